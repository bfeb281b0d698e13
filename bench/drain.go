package bench

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/outboxpg"
)

// drainTimeout bounds one drain: a relay that stopped publishing must not
// hang the whole benchmark.
const drainTimeout = 10 * time.Minute

// repeat runs one drain opts.Repeats times and keeps every rate; the WAL
// figures are those of the median run.
func (e *env) repeat(ctx context.Context, t Throughput, run func(ctx context.Context) (float64, WALUsage, error)) (Throughput, error) {
	var wals []WALUsage
	for i := range e.opts.Repeats {
		rate, wal, err := run(ctx)
		if err != nil {
			return t, err
		}
		t.Runs = append(t.Runs, rate)
		wals = append(wals, wal)
		e.logf("%s: run %d/%d: %s msgs/s", t.title(), i+1, e.opts.Repeats, thousands(rate))
	}
	t.WAL = wals[medianIndex(t.Runs)]
	return t, nil
}

func (t Throughput) title() string {
	switch t.Name {
	case "relay":
		if t.Variant != "" {
			return fmt.Sprintf("relay to %s (%s), batch %d, %d relay(s)", t.Publisher, t.Variant, t.Batch, t.Relays)
		}
		return fmt.Sprintf("relay to %s, batch %d, %d relay(s)", t.Publisher, t.Batch, t.Relays)
	case "writers":
		return fmt.Sprintf("%d writers, %s", t.Relays, t.Label)
	case "ceiling":
		return fmt.Sprintf("raw DELETE loop, batch %d", t.Batch)
	case "watermill":
		if t.Batch == 0 {
			return "watermill forwarder, defaults (batch 100)"
		}
		return fmt.Sprintf("watermill forwarder, batch %d", t.Batch)
	default:
		return fmt.Sprintf("%s, batch %d", t.Name, t.Batch)
	}
}

// drainRelays measures relays separate outbox.Relay instances, each on a pool
// of its own (as separate processes would be), draining a backlog of
// opts.Backlog messages to the named publisher. The clock runs from starting
// the relays until every message was confirmed and the relays shut down
// (so the last deletions are recorded too).
func (e *env) drainRelays(ctx context.Context, publisher string, batch, relays int) (float64, WALUsage, error) {
	return e.drainRelaysWith(ctx, publisher, batch, relays, nil)
}

// relayVariants are experiments on the relay's sessions, measured next to
// the relay as shipped: what a change to outboxpg would gain, before making
// it.
var relayVariants = map[string]map[string]string{
	// The relay only ever writes leases and outcomes. Losing its last
	// commits in a crash of PostgreSQL (not of the relay) makes messages due
	// again: duplicates, which at-least-once allows, never a lost message,
	// since the writer's commit that stored the message was durable.
	"synchronous_commit=off": {"synchronous_commit": "off"},
}

// drainRelaysWith is drainRelays with session settings for the relays' pools.
func (e *env) drainRelaysWith(ctx context.Context, publisher string, batch, relays int, params map[string]string) (float64, WALUsage, error) {
	factory, err := publisherFactory(publisher)
	if err != nil {
		return 0, WALUsage{}, err
	}
	opts, drop, err := e.outboxTable(ctx, "drain")
	if err != nil {
		return 0, WALUsage{}, err
	}
	defer drop()
	if err := e.fill(ctx, opts, e.opts.Backlog); err != nil {
		return 0, WALUsage{}, err
	}
	pub, closePub, err := factory(ctx)
	if err != nil {
		return 0, WALUsage{}, fmt.Errorf("open publisher %s: %w", publisher, err)
	}
	defer closePub()
	counter := newCounting(pub, e.opts.Backlog)

	cfg := outbox.Config{BatchSize: batch, Logger: quietLogger()}
	var (
		pools []*pgxpool.Pool
		rs    []*outbox.Relay
	)
	closePools := func() {
		for _, p := range pools {
			p.Close()
		}
		pools = nil
	}
	defer closePools()
	for range relays {
		// Workers, plus the idle probe and the LISTEN connection.
		p, err := e.pool(ctx, poolOptions{maxConns: outbox.WorkersDefault + 2, params: params})
		if err != nil {
			return 0, WALUsage{}, err
		}
		pools = append(pools, p)
		store, err := outboxpg.New(p, opts)
		if err != nil {
			return 0, WALUsage{}, err
		}
		r, err := outbox.NewRelay(store, counter, cfg)
		if err != nil {
			return 0, WALUsage{}, err
		}
		rs = append(rs, r)
	}

	before, err := e.walCounters(ctx)
	if err != nil {
		return 0, WALUsage{}, err
	}
	start := time.Now()
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, relays)
	for _, r := range rs {
		go func() { done <- r.Run(runCtx) }()
	}
	var waitErr error
	select {
	case <-counter.finished():
	case <-ctx.Done():
		waitErr = ctx.Err()
	case <-time.After(drainTimeout):
		waitErr = fmt.Errorf("drain did not finish in %v: %d of %d published", drainTimeout, counter.published(), e.opts.Backlog)
	}
	for _, r := range rs {
		sctx, scancel := context.WithTimeout(context.Background(), 30*time.Second)
		_ = r.Shutdown(sctx)
		scancel()
	}
	elapsed := time.Since(start)
	cancel()
	for range rs {
		<-done
	}
	if waitErr != nil {
		return 0, WALUsage{}, waitErr
	}
	closePools() // their backends flush their WAL statistics on exit
	wal, err := e.walSince(ctx, before)
	if err != nil {
		return 0, WALUsage{}, err
	}
	return float64(e.opts.Backlog) / elapsed.Seconds(), wal, nil
}

// ceilingSQL is the raw SQL ceiling: take the oldest due rows and delete
// them in one statement, returning what a publisher would need. No lease, no
// second statement; a crash between this commit and a publish would lose the
// batch, which is why the relay cannot work this way.
const ceilingSQL = `DELETE FROM %[1]s WHERE id IN (
	SELECT id FROM %[1]s WHERE status = 'pending' AND available_at <= now()
	ORDER BY available_at, id LIMIT $1 FOR UPDATE SKIP LOCKED)
RETURNING id, topic, key, payload, headers, created_at`

// drainCeiling runs loops concurrent delete loops over the same backlog.
func (e *env) drainCeiling(ctx context.Context, batch, loops int) (float64, WALUsage, error) {
	opts, drop, err := e.outboxTable(ctx, "ceiling")
	if err != nil {
		return 0, WALUsage{}, err
	}
	defer drop()
	if err := e.fill(ctx, opts, e.opts.Backlog); err != nil {
		return 0, WALUsage{}, err
	}
	pool, err := e.pool(ctx, poolOptions{maxConns: int32(loops)})
	if err != nil {
		return 0, WALUsage{}, err
	}
	defer pool.Close()
	q := fmt.Sprintf(ceilingSQL, quote(opts.Schema)+".outbox")

	before, err := e.walCounters(ctx)
	if err != nil {
		return 0, WALUsage{}, err
	}
	start := time.Now()
	errs := make(chan error, loops)
	for range loops {
		go func() { errs <- deleteLoop(ctx, pool, q, batch) }()
	}
	var loopErr error
	for range loops {
		loopErr = errors.Join(loopErr, <-errs)
	}
	elapsed := time.Since(start)
	if loopErr != nil {
		return 0, WALUsage{}, loopErr
	}
	pool.Close()
	wal, err := e.walSince(ctx, before)
	if err != nil {
		return 0, WALUsage{}, err
	}
	return float64(e.opts.Backlog) / elapsed.Seconds(), wal, nil
}

// deleteLoop deletes batches until none is left, reading every column as a
// relay would.
func deleteLoop(ctx context.Context, pool *pgxpool.Pool, q string, batch int) error {
	for {
		rows, err := pool.Query(ctx, q, batch)
		if err != nil {
			return err
		}
		n := 0
		var (
			id               [16]byte
			topic, key       string
			payload, headers []byte
			createdAt        time.Time
		)
		scanTargets := []any{&id, &topic, &key, &payload, &headers, &createdAt}
		for rows.Next() {
			if err := rows.Scan(scanTargets...); err != nil {
				rows.Close()
				return err
			}
			n++
		}
		if err := rows.Err(); err != nil {
			return err
		}
		if n == 0 {
			return nil
		}
	}
}
