package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/pgtest"
	"github.com/go-outbox/outbox/outboxpg"
)

// BenchmarkTablesFairness measures whether one tenant's backlog or failing
// destination slows the other tenants of a TablesRelay (issue 29, part 1).
// FAIRNESS_TENANTS schemas (default 200) on one PostgreSQL, served by one
// TablesRelay on outboxpg.NewTables (one worker per table, one pool of 20
// connections, one LISTEN connection); a trickle of messages written to the
// other tenants at FAIRNESS_RATE msg/s (default 200) over 10 s, written by
// another "process" (NOTIFY only), first with nothing else going on, then
// with tenant 0 holding a backlog of FAIRNESS_BACKLOG messages (default
// 200,000) and every message of tenant 1 failing at its destination. It
// reports the others' commit-to-publish p50 and p99 in both phases and the
// ratio of the p99s (the target: 2 or less). Run it alone:
//
//	go test -run XXX -bench TablesFairness -benchtime 1x
func BenchmarkTablesFairness(b *testing.B) {
	tenants, rate, backlog := envInt("FAIRNESS_TENANTS", 200), envInt("FAIRNESS_RATE", 200), envInt("FAIRNESS_BACKLOG", 200000)
	const window = 10 * time.Second
	ctx := context.Background()
	cfg := pgtest.Config(b)
	cfg.MaxConns = 20
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pool.Close)
	prefix := strings.Replace(pgtest.Schema(b), "test_", "fair", 1)
	schemas := make([]string, tenants)
	for i := range schemas {
		schemas[i] = fmt.Sprintf("%s_%03d", prefix, i)
		m, err := outboxpg.NewMigrator(pool, outboxpg.Options{Schema: schemas[i]})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := m.Up(ctx); err != nil {
			b.Fatal(err)
		}
	}
	b.Cleanup(func() {
		for _, s := range schemas {
			_, _ = pool.Exec(context.Background(), `DROP SCHEMA `+pgx.Identifier{s}.Sanitize()+` CASCADE`)
		}
	})
	backlogged, failing, rest := schemas[0], schemas[1], schemas[2:]

	for range b.N {
		alone := fairnessPhase(b, pool, prefix, rest, nil, rate, window)
		fillSchema(b, pool, backlogged, backlog)
		noisy := fairnessPhase(b, pool, prefix, rest, []string{failing}, rate, window)
		b.ReportMetric(millis(alone[0]), "alone-p50-ms")
		b.ReportMetric(millis(alone[1]), "alone-p99-ms")
		b.ReportMetric(millis(noisy[0]), "noisy-p50-ms")
		b.ReportMetric(millis(noisy[1]), "noisy-p99-ms")
		b.ReportMetric(float64(noisy[1])/float64(alone[1]), "p99-ratio")
	}
}

// fairnessPhase runs a TablesRelay over every tenant for window while a
// writer sends rate msg/s round robin to the tenants of rest (and of
// failing, whose messages fail at the destination), and returns the p50 and
// p99 of the rest's commit-to-publish latencies.
func fairnessPhase(b *testing.B, pool *pgxpool.Pool, prefix string, rest, failing []string, rate int, window time.Duration) [2]time.Duration {
	b.Helper()
	src, err := outboxpg.NewTables(pool, prefix+"_*", outboxpg.Options{})
	if err != nil {
		b.Fatal(err)
	}
	lat := &latencies{committed: map[uuid.UUID]time.Time{}, publishedAt: map[uuid.UUID]time.Time{}}
	failTopics := map[string]bool{}
	for _, s := range failing {
		failTopics[s] = true
	}
	pub := outbox.PublisherFunc(func(_ context.Context, ms []outbox.Message) []error {
		errs := make([]error, len(ms))
		now := time.Now()
		for i, m := range ms {
			if failTopics[m.Topic] {
				errs[i] = errors.New("destination refuses (injected)")
				continue
			}
			lat.published(m.ID, now)
		}
		return errs
	})
	tr, err := outbox.NewTablesRelay(src, pub, outbox.TablesConfig{Relay: outbox.Config{Logger: quietLogger()}})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- tr.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			b.Error(err)
		}
	}()
	for deadline := time.Now().Add(time.Minute); len(tr.Tables()) < len(rest)+len(failing); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			b.Fatalf("the relay serves %d tables after a minute; want %d", len(tr.Tables()), len(rest)+len(failing))
		}
	}

	// Let the relays' start (schema checks, first looks, registry rows)
	// pass before measuring; both phases wait the same.
	time.Sleep(2 * time.Second)

	// The writer stands for other processes: stores of its own with
	// Notify, InsertTx, no in-process wake-up.
	writers := map[string]*outboxpg.Store{}
	for _, s := range append(slices.Clone(rest), failing...) {
		if writers[s], err = outboxpg.New(pool, outboxpg.Options{Schema: s, Notify: true}); err != nil {
			b.Fatal(err)
		}
	}
	targets := append(slices.Clone(rest), failing...)
	tick := time.NewTicker(time.Second / time.Duration(rate))
	defer tick.Stop()
	end := time.Now().Add(window)
	var sent []uuid.UUID
	for i := 0; time.Now().Before(end); i++ {
		<-tick.C
		schema := targets[i%len(targets)]
		m := &outbox.Message{ID: uuid.Must(uuid.NewV7()), Topic: schema, Payload: make([]byte, 256)}
		w := writers[schema]
		if err := w.RunInTx(context.Background(), func(tx pgx.Tx) error { return w.InsertTx(context.Background(), tx, []*outbox.Message{m}) }); err != nil {
			b.Fatal(err)
		}
		if !failTopics[schema] {
			lat.committedAt(m.ID, time.Now())
			sent = append(sent, m.ID)
		}
	}
	for deadline := time.Now().Add(30 * time.Second); lat.count(sent) < len(sent); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			b.Fatalf("%d of %d messages of the other tenants published 30 s after the writes ended", lat.count(sent), len(sent))
		}
	}
	return lat.quantiles(sent)
}

// latencies pairs each message's commit with its publish.
type latencies struct {
	mu                     sync.Mutex
	committed, publishedAt map[uuid.UUID]time.Time
}

func (l *latencies) committedAt(id uuid.UUID, at time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.committed[id] = at
}

func (l *latencies) published(id uuid.UUID, at time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.publishedAt[id]; !ok {
		l.publishedAt[id] = at
	}
}

func (l *latencies) count(ids []uuid.UUID) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, id := range ids {
		if _, ok := l.publishedAt[id]; ok {
			n++
		}
	}
	return n
}

// quantiles returns the p50 and p99 of ids' commit-to-publish latencies. A
// message published before its writer noted the commit counts as 0.
func (l *latencies) quantiles(ids []uuid.UUID) [2]time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	d := make([]time.Duration, 0, len(ids))
	for _, id := range ids {
		d = append(d, max(l.publishedAt[id].Sub(l.committed[id]), 0))
	}
	slices.Sort(d)
	return [2]time.Duration{percentile(d, 0.50), percentile(d, 0.99)}
}

// fillSchema inserts n pending messages into schema's outbox in one
// statement.
func fillSchema(b *testing.B, pool *pgxpool.Pool, schema string, n int) {
	b.Helper()
	_, err := pool.Exec(context.Background(), `
		INSERT INTO `+pgx.Identifier{schema, "outbox"}.Sanitize()+` (id, topic, key, payload, created_at)
		SELECT gen_random_uuid(), 'backlog', (g % 64)::text, convert_to(repeat('x', 256), 'UTF8'), now()
		FROM generate_series(1, $1) g`, n)
	if err != nil {
		b.Fatal(err)
	}
}

// millis is d in milliseconds.
func millis(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// envInt reads a positive integer from the environment, or def.
func envInt(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n > 0 {
		return n
	}
	return def
}
