package bench

// Commit-to-publish latency and idle cost of the MySQL/MariaDB store, in
// the form of PostgreSQL's latency and idle steps. MySQL has no LISTEN: a
// relay learns of another process's commits only by its adaptive poll
// (Config.ActivePollInterval after work, doubling to Config.PollInterval),
// while Writer.Transact in the relay's process wakes it at once. Statements
// are counted by mysqltest's counting connector on the relay's pool. They
// need TEST_MYSQL_URL; run them with -test.benchtime 1x (each iteration is
// a whole measurement, under half a minute).

import (
	"context"
	"database/sql"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/mysqltest"
	"github.com/go-outbox/outbox/outboxmysql"
)

// mysqlLatencyDuration is how long each latency run writes after its
// warm-up (latencyWarmup).
const mysqlLatencyDuration = 10 * time.Second

// mysqlIdleWindow is the idle window, after idleWarmup.
const mysqlIdleWindow = 20 * time.Second

// mysqlPair is a migrated table in a fresh database with two pools on it:
// the relay's, whose statements are logged, and a plain one standing for
// writers in another process.
func mysqlPair(b *testing.B) (relayDB, writerDB *sql.DB, log *mysqltest.StatementLog, opts outboxmysql.Options) {
	b.Helper()
	name, writerDB := mysqltest.Database(b)
	relayDB, log = mysqltest.Counted(b, name)
	m, err := outboxmysql.NewMigrator(writerDB, opts)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := m.Up(context.Background()); err != nil {
		b.Fatal(err)
	}
	return relayDB, writerDB, log, opts
}

// startMySQLRelay runs a relay on db with cfg until the benchmark ends.
func startMySQLRelay(b *testing.B, db *sql.DB, opts outboxmysql.Options, pub outbox.Publisher, cfg outbox.Config) *outboxmysql.Store {
	b.Helper()
	store, err := outboxmysql.New(db, opts)
	if err != nil {
		b.Fatal(err)
	}
	cfg.Logger = quietLogger()
	relay, err := outbox.NewRelay(store, pub, cfg)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- relay.Run(ctx) }()
	b.Cleanup(func() {
		sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer scancel()
		_ = relay.Shutdown(sctx)
		cancel()
		<-done
	})
	return store
}

// plainCommit returns a commit of one message in a plain transaction on db,
// with no Notify: nothing in the relay's process hears of it, as when the
// writer is another process.
func plainCommit(b *testing.B, db *sql.DB, opts outboxmysql.Options) func(context.Context, *outbox.Message) error {
	b.Helper()
	store, err := outboxmysql.New(db, opts)
	if err != nil {
		b.Fatal(err)
	}
	w, err := outbox.NewWriter[*sql.Tx](store, outbox.WriterConfig{})
	if err != nil {
		b.Fatal(err)
	}
	return func(ctx context.Context, m *outbox.Message) error {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		if err := w.Write(ctx, tx, m); err != nil {
			_ = tx.Rollback()
			return err
		}
		return tx.Commit()
	}
}

// BenchmarkMySQLLatency times messages from the return of their commit to
// their arrival at a no-op publisher, one message per transaction on a
// fixed schedule (open loop, latencyWriters goroutines), relay at its
// defaults. polling: the writers commit plain transactions on a pool of
// their own, as another process would, so only the relay's poll finds
// the messages. in-process: Writer.Transact on the relay's pool wakes it
// after each commit.
func BenchmarkMySQLLatency(b *testing.B) {
	for _, inProcess := range []bool{false, true} {
		mode := "polling"
		if inProcess {
			mode = "in-process"
		}
		for _, rate := range []int{50, 200} {
			b.Run(fmt.Sprintf("%s/rate=%d", mode, rate), func(b *testing.B) {
				for range b.N {
					mysqlLatency(b, inProcess, rate)
				}
			})
		}
	}
}

func mysqlLatency(b *testing.B, inProcess bool, rate int) {
	ctx := context.Background()
	relayDB, writerDB, log, opts := mysqlPair(b)
	rec := newLatencyRecorder()
	relayStore := startMySQLRelay(b, relayDB, opts, rec, outbox.Config{})
	var commit func(context.Context, *outbox.Message) error
	if inProcess {
		w, err := outbox.NewWriter[*sql.Tx](relayStore, outbox.WriterConfig{})
		if err != nil {
			b.Fatal(err)
		}
		commit = func(ctx context.Context, m *outbox.Message) error {
			return w.Transact(ctx, func(ctx context.Context, tx *sql.Tx) error { return w.Write(ctx, tx, m) })
		}
	} else {
		commit = plainCommit(b, writerDB, opts)
	}
	e := &env{opts: Options{PayloadBytes: 256}} // schedule needs only the payload size
	b.ResetTimer()
	committed, achieved, err := e.schedule(ctx, rate, mysqlLatencyDuration, latencyWarmup, commit)
	if err != nil {
		b.Fatal(err)
	}
	// The last messages may wait up to a poll.
	deadline := time.Now().Add(outbox.PollIntervalDefault + 4*time.Second)
	for time.Now().Before(deadline) && !rec.has(committed) {
		time.Sleep(10 * time.Millisecond)
	}
	b.StopTimer()
	lat, early, missing := rec.latencies(committed)
	if len(lat) == 0 {
		b.Fatalf("none of %d messages published", len(committed))
	}
	p50, p99 := percentile(lat, 0.50), percentile(lat, 0.99)
	b.ReportMetric(float64(p50.Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(p99.Microseconds())/1000, "p99-ms")
	b.ReportMetric(float64(lat[len(lat)-1].Microseconds())/1000, "max-ms")
	b.ReportMetric(achieved, "msgs/s")
	b.Logf("%d samples, %d published before Commit returned (counted as 0), %d missing; relay pool sent %d statements",
		len(committed), early, missing, log.Len())
}

// BenchmarkMySQLLatencyAfterIdle is the latency of a single message
// committed by another process after nothing was written for long enough
// that the relay polls at its slowest (PollIntervalDefault): what polling
// gives to a message that comes alone. It reports the median and the worst
// of samples such messages.
func BenchmarkMySQLLatencyAfterIdle(b *testing.B) {
	const (
		samples = 8
		// 10 ms doubling reaches the 1 s poll after about 1.3 s; a spell of
		// a whole number of seconds would commit each message at the same
		// point of the relay's 1 s rhythm, hence the random part.
		idle = 3 * time.Second
	)
	for range b.N {
		ctx := context.Background()
		relayDB, writerDB, _, opts := mysqlPair(b)
		rec := newLatencyRecorder()
		startMySQLRelay(b, relayDB, opts, rec, outbox.Config{})
		commit := plainCommit(b, writerDB, opts)
		var lat []time.Duration
		for range samples {
			time.Sleep(idle + rand.N(time.Second)) // the idle spell is what is measured after
			m := &outbox.Message{Topic: "bench.latency", Payload: payloadOf(256)}
			if err := commit(ctx, m); err != nil {
				b.Fatal(err)
			}
			one := map[uuid.UUID]time.Time{m.ID: time.Now()}
			deadline := time.Now().Add(outbox.PollIntervalDefault + 4*time.Second)
			for time.Now().Before(deadline) && !rec.has(one) {
				time.Sleep(time.Millisecond)
			}
			l, _, missing := rec.latencies(one)
			if missing > 0 {
				b.Fatalf("message %s not published within %v", m.ID, outbox.PollIntervalDefault+4*time.Second)
			}
			lat = append(lat, l[0])
		}
		slices.Sort(lat)
		b.ReportMetric(float64(percentile(lat, 0.5).Microseconds())/1000, "p50-ms")
		b.ReportMetric(float64(lat[len(lat)-1].Microseconds())/1000, "max-ms")
		b.Logf("latencies after %v to %v idle: %v", idle, idle+time.Second, lat)
	}
}

// BenchmarkMySQLIdle counts what a relay with nothing to publish sends on
// its pool over mysqlIdleWindow, after idleWarmup: statements and round
// trips per second, and the statements that write (INSERT, UPDATE, DELETE,
// whether or not they change a row), by default and with retention on.
func BenchmarkMySQLIdle(b *testing.B) {
	for _, mode := range []struct {
		name string
		cfg  outbox.Config
	}{
		{"defaults", outbox.Config{}},
		{"retention=10s", outbox.Config{Retention: 10 * time.Second}},
	} {
		b.Run(mode.name, func(b *testing.B) {
			for range b.N {
				relayDB, _, log, opts := mysqlPair(b)
				startMySQLRelay(b, relayDB, opts, outbox.PublisherFunc(func(_ context.Context, m []outbox.Message) []error { return make([]error, len(m)) }), mode.cfg)
				time.Sleep(idleWarmup) // the first look and the settling into the idle rhythm are not counted
				before, trips := log.Len(), log.RoundTrips()
				time.Sleep(mysqlIdleWindow) // the window measured
				sent := log.All()[before:]
				trips = log.RoundTrips() - trips
				kinds := map[string]int{}
				var writes int
				for _, q := range sent {
					q = strings.Join(strings.Fields(q), " ")
					kinds[q[:min(len(q), 60)]]++
					switch strings.ToUpper(strings.Fields(q)[0]) {
					case "INSERT", "UPDATE", "DELETE", "REPLACE":
						writes++
					}
				}
				secs := mysqlIdleWindow.Seconds()
				b.ReportMetric(float64(len(sent))/secs, "statements/s")
				b.ReportMetric(float64(trips)/secs, "roundtrips/s")
				b.ReportMetric(float64(writes), "writes/window")
				var by []string
				for _, k := range slices.Sorted(maps.Keys(kinds)) {
					by = append(by, fmt.Sprintf("%3d  %s", kinds[k], k))
				}
				b.Logf("%d statements in %v:\n%s", len(sent), mysqlIdleWindow, strings.Join(by, "\n"))
			}
		})
	}
}
