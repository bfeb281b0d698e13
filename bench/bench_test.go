package bench

// The Go benchmarks against a real PostgreSQL (set TEST_DATABASE_URL). They
// report messages or commits per second as custom metrics; compare runs with
// benchstat, never single numbers: these machines are shared and noisy. The
// full set of measurements, with references and the doc, is `outbox-bench`
// (scripts/bench).

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/pgtest"
	"github.com/go-outbox/outbox/outboxdriver"
	"github.com/go-outbox/outbox/outboxpg"
)

// backlog is how many messages each drain iteration publishes.
const backlog = 50000

func setup(b *testing.B, opts outboxpg.Options) (*pgxpool.Pool, *outboxpg.Store, outboxpg.Options) {
	b.Helper()
	ctx := context.Background()
	opts.Schema = pgtest.Schema(b)
	cfg := pgtest.Config(b)
	cfg.MaxConns = 32
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pool.Close)
	m, err := outboxpg.NewMigrator(pool, opts)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := m.Up(ctx); err != nil {
		b.Fatal(err)
	}
	store, err := outboxpg.New(pool, opts)
	if err != nil {
		b.Fatal(err)
	}
	return pool, store, opts
}

// fill inserts n pending messages with 256-byte payloads and 64 keys in one
// statement.
func fill(b *testing.B, pool *pgxpool.Pool, opts outboxpg.Options, n int) {
	b.Helper()
	fillKeys(b, pool, opts, n, 64)
}

// fillKeys is fill with the given number of keys, spread round robin.
func fillKeys(b *testing.B, pool *pgxpool.Pool, opts outboxpg.Options, n, keys int) {
	b.Helper()
	_, err := pool.Exec(context.Background(), fmt.Sprintf(`
		INSERT INTO %q.outbox (id, topic, key, payload, created_at)
		SELECT gen_random_uuid(), 'bench', (g %% $2)::text, convert_to(repeat('x', 256), 'UTF8'), now()
		FROM generate_series(1, $1) g`, opts.Schema), n, keys)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := pool.Exec(context.Background(), fmt.Sprintf(`VACUUM ANALYZE %q.outbox`, opts.Schema)); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkRelayDrain measures how fast relays drain a backlog to a no-op
// publisher, by batch size and relay count.
func BenchmarkRelayDrain(b *testing.B) {
	for _, batch := range []int{10, 100, 1000} {
		for _, relays := range []int{1, 2, 4} {
			b.Run(fmt.Sprintf("batch=%d/relays=%d", batch, relays), func(b *testing.B) {
				pool, store, opts := setup(b, outboxpg.Options{})
				drain(b, store, batch, relays, func() { fill(b, pool, opts, backlog) })
			})
		}
	}
}

// BenchmarkRelayDrainKeyOrder is BenchmarkRelayDrain with claims in key
// order (Options.OrderByKey), by the number of keys the backlog spreads
// over: one hot key, 64, and 10,000 (more than a claim walks,
// outboxdriver.KeyWalkLimit). A claim takes each key's run of due messages,
// so a hot key is not limited to one message per claim. keys=unordered is
// the same backlog of 64 keys drained without key order, the reference for
// the ratios in docs/benchmarks.md: run them together
// (-bench 'RelayDrainKeyOrder/.*batch=1000' -count 3).
func BenchmarkRelayDrainKeyOrder(b *testing.B) {
	for _, keys := range []int{0, 1, 64, 10000} {
		for _, batch := range []int{100, 1000} {
			name := fmt.Sprintf("keys=%d/batch=%d", keys, batch)
			if keys == 0 {
				name = fmt.Sprintf("keys=unordered/batch=%d", batch)
			}
			b.Run(name, func(b *testing.B) {
				pool, _, opts := setup(b, outboxpg.Options{})
				opts.OrderByKey = keys > 0
				store, err := outboxpg.New(pool, opts)
				if err != nil {
					b.Fatal(err)
				}
				drain(b, store, batch, 1, func() { fillKeys(b, pool, opts, backlog, cmp.Or(keys, 64)) })
			})
		}
	}
}

// BenchmarkRelayDrainTransactionLeases is BenchmarkRelayDrainKeyOrder at
// batch 1000 with claims held in a transaction (Options.TransactionLeases):
// a message is written once, by the claim's delete, where a leased claim
// writes the lease first. Compare it with BenchmarkRawDeleteCeiling and the
// leased drains in the same run (docs/benchmarks.md gives the command).
func BenchmarkRelayDrainTransactionLeases(b *testing.B) {
	for _, keys := range []int{0, 1, 64, 10000} {
		name := fmt.Sprintf("keys=%d", keys)
		if keys == 0 {
			name = "keys=unordered"
		}
		b.Run(name, func(b *testing.B) {
			pool, _, opts := setup(b, outboxpg.Options{})
			opts.OrderByKey = keys > 0
			opts.TransactionLeases = true
			store, err := outboxpg.New(pool, opts)
			if err != nil {
				b.Fatal(err)
			}
			drain(b, store, 1000, 1, func() { fillKeys(b, pool, opts, backlog, cmp.Or(keys, 64)) })
		})
	}
}

// drain runs b.N times: fill a backlog of backlog messages (untimed), then
// time relays draining it to a no-op publisher; it reports msgs/s.
func drain(b *testing.B, store outboxdriver.Store, batch, relays int, fill func()) {
	b.Helper()
	drainTo(b, store, noopPublisher{}, batch, relays, backlog, fill)
}

// noopPublisher confirms every message at once. It fails none, so it keeps
// each key's order within a batch whatever it is given: an
// outbox.KeyOrderKeeper, which a claim in key order reaches whole.
type noopPublisher struct{}

func (noopPublisher) Publish(_ context.Context, msgs []outbox.Message) []error {
	return make([]error, len(msgs))
}
func (noopPublisher) Close() error   { return nil }
func (noopPublisher) KeepsKeyOrder() {}

// roundTripPublisher confirms every message after one round trip of
// roundTrip per Publish call, as a broker's batch confirm would take: the
// wait workers are there to overlap.
type roundTripPublisher struct{ roundTrip time.Duration }

func (p roundTripPublisher) Publish(ctx context.Context, msgs []outbox.Message) []error {
	select {
	case <-time.After(p.roundTrip):
	case <-ctx.Done():
	}
	return make([]error, len(msgs))
}
func (roundTripPublisher) Close() error   { return nil }
func (roundTripPublisher) KeepsKeyOrder() {}

// drainTo is drain to pub, for a backlog of n messages that fill writes.
func drainTo(b *testing.B, store outboxdriver.Store, noop outbox.Publisher, batch, relays, backlog int, fill func()) {
	b.Helper()
	drainWith(b, store, noop, outbox.Config{BatchSize: batch, Workers: 2}, relays, backlog, fill)
}

// drainObserved is one relay draining the default backlog at batch 1000
// with observer (nil for none).
func drainObserved(b *testing.B, store outboxdriver.Store, pub outbox.Publisher, observer outbox.Observer, fill func()) {
	b.Helper()
	drainWith(b, store, pub, outbox.Config{BatchSize: 1000, Workers: 2, Observer: observer}, 1, backlog, fill)
}

// drainWith runs b.N times: fill a backlog of backlog messages (untimed),
// then time relays with cfg draining it to noop, until every message is
// published and the relays have shut down (recording the last batches); it
// reports msgs/s. The end is seen by counting publishes, not by polling the
// store: Stats reads the whole table, and polled while the relays run it
// took about one of the database's two cores from them.
func drainWith(b *testing.B, store outboxdriver.Store, noop outbox.Publisher, cfg outbox.Config, relays, backlog int, fill func()) {
	b.Helper()
	cfg.Logger = quietLogger()
	var elapsed time.Duration
	for range b.N {
		b.StopTimer()
		fill()
		b.StartTimer()
		start := time.Now()
		counter := newCounting(noop, backlog)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{}, relays)
		rs := make([]*outbox.Relay, relays)
		for i := range rs {
			r, err := outbox.NewRelay(store, counter, cfg)
			if err != nil {
				b.Fatal(err)
			}
			rs[i] = r
			go func() { _ = r.Run(ctx); done <- struct{}{} }()
		}
		select {
		case <-counter.finished():
		case <-time.After(drainTimeout):
			cancel()
			b.Fatalf("drain did not finish in %v: %d of %d published", drainTimeout, counter.published(), backlog)
		}
		var shutdownErr error
		for _, r := range rs {
			shutdownErr = errors.Join(shutdownErr, r.Shutdown(context.Background()))
		}
		elapsed += time.Since(start)
		cancel()
		for range relays {
			<-done
		}
		if shutdownErr != nil {
			b.Fatal(shutdownErr)
		}
		b.StopTimer()
		requireDrained(b, store.(outboxdriver.Admin))
		b.StartTimer()
	}
	b.ReportMetric(float64(backlog*b.N)/elapsed.Seconds(), "msgs/s")
}

// BenchmarkRawDeleteCeiling is the SQL ceiling the relay is measured
// against: a loop deleting and returning the oldest rows (ceilingSQL, read
// as a relay reads them), no lease, no publisher. loops=1 is one
// connection, as outbox-bench and the issue that set the target measure
// it; loops=2 runs two such loops at once, as a relay runs two workers,
// and is the fair ceiling for the one-relay drains here (a relay of two
// workers can beat one loop).
func BenchmarkRawDeleteCeiling(b *testing.B) {
	for _, batch := range []int{100, 1000} {
		for _, loops := range []int{1, 2} {
			b.Run(fmt.Sprintf("batch=%d/loops=%d", batch, loops), func(b *testing.B) {
				pool, _, opts := setup(b, outboxpg.Options{})
				q := fmt.Sprintf(ceilingSQL, fmt.Sprintf("%q.outbox", opts.Schema))
				var elapsed time.Duration
				for range b.N {
					b.StopTimer()
					fill(b, pool, opts, backlog)
					b.StartTimer()
					start := time.Now()
					var wg sync.WaitGroup
					for range loops {
						wg.Go(func() {
							if err := deleteLoop(context.Background(), pool, q, batch); err != nil {
								b.Error(err)
							}
						})
					}
					wg.Wait()
					elapsed += time.Since(start)
				}
				b.ReportMetric(float64(backlog*b.N)/elapsed.Seconds(), "msgs/s")
			})
		}
	}
}

// BenchmarkWriterCommits measures commits per second of 8 concurrent writers,
// each transaction inserting one message, with and without NOTIFY: the cost
// NOTIFY's commit-time lock puts on the application.
func BenchmarkWriterCommits(b *testing.B) {
	for _, notify := range []bool{false, true} {
		b.Run(fmt.Sprintf("notify=%v", notify), func(b *testing.B) {
			_, store, _ := setup(b, outboxpg.Options{Notify: notify})
			w, err := outbox.NewWriter(store, outbox.WriterConfig{})
			if err != nil {
				b.Fatal(err)
			}
			payload := make([]byte, 256)
			b.SetParallelism(4) // 8 writers on 2 cores
			start := time.Now()
			b.RunParallel(func(pb *testing.PB) {
				ctx := context.Background()
				for pb.Next() {
					err := store.RunInTx(ctx, func(tx pgx.Tx) error {
						return w.Write(ctx, tx, &outbox.Message{Topic: "bench", Payload: payload})
					})
					if err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "commits/s")
		})
	}
}

// BenchmarkRelayDrainWorkers drains the backlog at batch 1000 with one
// relay of 1, 2 and 4 workers, with leased claims and with claims held in
// transactions (Options.TransactionLeases), unordered and in key order
// over 64 keys: a mode whose claims starve each other does not speed up
// with workers. Run both modes in the same run and compare ratios (the
// machine is shared and noisy; docs/benchmarks.md gives the command).
//
// publish=noop publishes at no cost, so the drain is the database's work
// alone; on a machine whose cores the database shares, workers can only
// add contention there. publish=20ms waits one broker round trip per
// batch, which is what workers overlap in production.
func BenchmarkRelayDrainWorkers(b *testing.B) {
	publishers := []struct {
		name string
		pub  outbox.Publisher
	}{
		{"noop", noopPublisher{}},
		{"20ms", roundTripPublisher{roundTrip: 20 * time.Millisecond}},
	}
	for _, publish := range publishers {
		for _, mode := range []string{"leased", "transaction"} {
			for _, keys := range []int{0, 64} {
				for _, workers := range []int{1, 2, 4} {
					keysName := strconv.Itoa(keys)
					if keys == 0 {
						keysName = "unordered"
					}
					name := fmt.Sprintf("publish=%s/lease=%s/keys=%s/workers=%d", publish.name, mode, keysName, workers)
					drainWorkers(b, name, publish.pub, mode == "transaction", keys, workers)
				}
			}
		}
	}
}

// drainWorkers is one case of BenchmarkRelayDrainWorkers.
func drainWorkers(b *testing.B, name string, pub outbox.Publisher, transactionLeases bool, keys, workers int) {
	b.Run(name, func(b *testing.B) {
		pool, _, opts := setup(b, outboxpg.Options{})
		opts.OrderByKey = keys > 0
		opts.TransactionLeases = transactionLeases
		pgStore, err := outboxpg.New(pool, opts)
		if err != nil {
			b.Fatal(err)
		}
		store := &countingStore{Store: pgStore}
		before := readTableCounts(b, pool, opts.Schema)
		var cpu drainCPU
		drainWith(b, store, pub, outbox.Config{BatchSize: 1000, Workers: workers}, 1, backlog,
			func() {
				cpu.pause()
				fillKeys(b, pool, opts, backlog, cmp.Or(keys, 64))
				cpu.resume(pool)
			})
		b.StopTimer()
		cpu.pause()
		reportDrainCounts(b, store, before, readTableCounts(b, pool, opts.Schema), &cpu)
	})
}
