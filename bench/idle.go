package bench

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/outboxpg"
)

// What idle costs, and how it is measured. Statements: a pgx tracer on the
// relay's pool counts every statement the relay sends (a pipelined batch
// counts each statement, and once as a round trip). Write transactions:
// PostgreSQL assigns a transaction id only to a transaction that writes, so
// the advance of pg_snapshot_xmax(pg_current_snapshot()) over the window
// counts write transactions cluster-wide; the advance of pg_current_wal_lsn()
// counts WAL bytes (a read-only transaction writes none). Both counters are
// cluster-wide, so the window is also measured with no relay at all, and the
// cluster must be private to the benchmark (scripts/bench starts one).
// pg_stat_database.xact_commit would not do: it counts read-only
// transactions too.

// idleWarmup lets a new relay do its first look and settle into its idle
// polling rhythm before the window opens.
const idleWarmup = 3 * time.Second

type idleMode struct {
	name      string
	relay     bool
	watermill bool // watermill's forwarder instead, for comparison
	cfg       outbox.Config
}

var idleModes = []idleMode{
	{name: "no relay (background of the cluster)"},
	{name: "relay, defaults (LISTEN + poll every 1 s)", relay: true},
	{name: "relay, poll only", relay: true, cfg: outbox.Config{DisableListen: true}},
	{name: "relay, Retention 10s (cleanup looks every 1 s)", relay: true, cfg: outbox.Config{Retention: 10 * time.Second}},
	{name: "watermill forwarder, defaults (for comparison)", watermill: true},
}

// measureIdle measures every mode on one empty table. Creating and dropping
// schemas leaves dead rows in the system catalogs, and autovacuum's ANALYZE
// of a catalog is a write transaction: so the step makes no DDL between
// windows, runs VACUUM ANALYZE first, and measures a window again (once) if
// autovacuum worked during it anyway.
func (e *env) measureIdle(ctx context.Context) ([]Idle, error) {
	opts, drop, err := e.outboxTable(ctx, "idle")
	if err != nil {
		return nil, err
	}
	defer drop()
	if _, err := e.admin.Exec(ctx, `VACUUM ANALYZE`); err != nil {
		return nil, err
	}
	var out []Idle
	for _, mode := range idleModes {
		var res Idle
		for try := 0; try < 2; try++ {
			before, err := e.autovacuumCount(ctx)
			if err != nil {
				return nil, err
			}
			if res, err = e.idleWindow(ctx, opts, mode); err != nil {
				return nil, err
			}
			after, err := e.autovacuumCount(ctx)
			if err != nil {
				return nil, err
			}
			res.Autovacuum = after != before
			if !res.Autovacuum {
				break
			}
			e.logf("idle, %s: autovacuum worked during the window; measuring again", mode.name)
		}
		e.logf("idle, %s: %d statements, %d write transactions, %d WAL bytes in %s", mode.name, res.Statements, res.Xids, res.WALBytes, res.Window)
		out = append(out, res)
	}
	return out, nil
}

// autovacuumCount sums the autovacuum and autoanalyze runs over every table,
// catalogs included.
func (e *env) autovacuumCount(ctx context.Context) (int64, error) {
	var n int64
	err := e.admin.QueryRow(ctx, `SELECT COALESCE(sum(autovacuum_count + autoanalyze_count), 0)::bigint FROM pg_stat_all_tables`).Scan(&n)
	return n, err
}

func (e *env) idleWindow(ctx context.Context, opts outboxpg.Options, mode idleMode) (Idle, error) {
	res := Idle{Name: mode.name, Window: e.opts.IdleDuration}
	count := &statementCounter{}
	if mode.relay {
		pool, err := e.pool(ctx, poolOptions{maxConns: outbox.WorkersDefault + 2, tracer: count})
		if err != nil {
			return res, err
		}
		defer pool.Close()
		store, err := outboxpg.New(pool, opts)
		if err != nil {
			return res, err
		}
		cfg := mode.cfg
		cfg.Logger = quietLogger()
		relay, err := outbox.NewRelay(store, outbox.PublisherFunc(func(_ context.Context, m []outbox.Message) []error { return make([]error, len(m)) }), cfg)
		if err != nil {
			return res, err
		}
		runCtx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- relay.Run(runCtx) }()
		// Stop the relay before the next window, so it only counts its own.
		defer func() { cancel(); <-done; pool.Close() }()
	}
	if mode.watermill {
		// Its tables are created before the warm-up, so the DDL is not counted.
		stop, err := e.startWatermillIdle(ctx, opts.Schema, count)
		if err != nil {
			return res, err
		}
		defer stop()
	}
	select {
	case <-ctx.Done():
		return res, ctx.Err()
	case <-time.After(idleWarmup):
	}
	before, err := e.walCounters(ctx)
	if err != nil {
		return res, err
	}
	statements, roundTrips := count.statements.Load(), count.roundTrips.Load()
	select {
	case <-ctx.Done():
		return res, ctx.Err()
	case <-time.After(e.opts.IdleDuration):
	}
	after, err := e.walCounters(ctx)
	if err != nil {
		return res, err
	}
	res.Statements = count.statements.Load() - statements
	res.RoundTrips = count.roundTrips.Load() - roundTrips
	res.Xids = after.xmax - before.xmax
	res.WALBytes = after.lsn - before.lsn
	return res, nil
}

// statementCounter is a pgx tracer counting what a pool sends.
type statementCounter struct {
	statements, roundTrips atomic.Int64
	batches                atomic.Int64 // pipelined batches: the relay's Exchanges
}

func (c *statementCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.statements.Add(1)
	c.roundTrips.Add(1)
	return ctx
}
func (c *statementCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (c *statementCounter) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	c.roundTrips.Add(1)
	c.batches.Add(1)
	return ctx
}
func (c *statementCounter) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {
	c.statements.Add(1)
}
func (c *statementCounter) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}
