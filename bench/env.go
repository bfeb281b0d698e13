package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/go-outbox/outbox/outboxpg"
)

// env is the benchmark database and what every measurement shares: an admin
// pool for set-up and counters, fresh schemas, filled backlogs, progress.
type env struct {
	admin    *pgxpool.Pool
	opts     Options
	progress io.Writer
	mu       sync.Mutex // serialises progress lines

	noCheckpoint atomic.Bool // CHECKPOINT is not allowed
}

func newEnv(ctx context.Context, opts Options) (*env, error) {
	cfg, err := pgxpool.ParseConfig(opts.DatabaseURL)
	if err != nil {
		return nil, fmt.Errorf("parse database URL: %w", err)
	}
	cfg.MaxConns = 4
	admin, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connect to PostgreSQL: %w", err)
	}
	if err := admin.Ping(ctx); err != nil {
		admin.Close()
		return nil, fmt.Errorf("connect to PostgreSQL at %s: %w", cfg.ConnConfig.Host, err)
	}
	return &env{admin: admin, opts: opts, progress: opts.Progress}, nil
}

func (e *env) close() { e.admin.Close() }

// logf prints one progress line on the progress writer (stderr in the CLI).
func (e *env) logf(format string, args ...any) {
	if e.progress == nil {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	fmt.Fprintf(e.progress, "%s bench: %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}

// schema creates a schema with a fresh name and returns it with a function
// that drops it and everything in it. Each measurement runs in its own
// schema, so no run sees another's rows, dead tuples or statistics.
func (e *env) schema(ctx context.Context, prefix string) (string, func(), error) {
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := "bench_" + prefix + "_" + hex.EncodeToString(b[:])
	if _, err := e.admin.Exec(ctx, `CREATE SCHEMA `+quote(name)); err != nil {
		return "", nil, fmt.Errorf("create schema %s: %w", name, err)
	}
	drop := func() {
		// Dropping must work after ctx was cancelled (Ctrl-C): the schema
		// would otherwise stay behind in the user's database.
		dctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if _, err := e.admin.Exec(dctx, `DROP SCHEMA `+quote(name)+` CASCADE`); err != nil {
			e.logf("drop schema %s: %v", name, err)
		}
	}
	return name, drop, nil
}

// outboxTable creates a schema with a migrated outbox table in it.
func (e *env) outboxTable(ctx context.Context, prefix string) (outboxpg.Options, func(), error) {
	schema, drop, err := e.schema(ctx, prefix)
	if err != nil {
		return outboxpg.Options{}, nil, err
	}
	opts := outboxpg.Options{Schema: schema}
	m, err := outboxpg.NewMigrator(e.admin, opts)
	if err == nil {
		_, err = m.Up(ctx)
	}
	if err != nil {
		drop()
		return outboxpg.Options{}, nil, fmt.Errorf("migrate %s: %w", schema, err)
	}
	return opts, drop, nil
}

// poolOptions tune a pool opened by pool.
type poolOptions struct {
	maxConns   int32
	tracer     pgx.QueryTracer
	searchPath string
	params     map[string]string // session settings
}

// pool opens a pool of its own, as a separate process would have, and opens
// its connections before returning so that connecting is not measured.
func (e *env) pool(ctx context.Context, po poolOptions) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(e.opts.DatabaseURL)
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = max(po.maxConns, 1)
	cfg.ConnConfig.Tracer = po.tracer
	if po.searchPath != "" {
		cfg.ConnConfig.RuntimeParams["search_path"] = po.searchPath
	}
	for k, v := range po.params {
		cfg.ConnConfig.RuntimeParams[k] = v
	}
	p, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	conns := make([]*pgxpool.Conn, 0, cfg.MaxConns)
	defer func() {
		for _, c := range conns {
			c.Release()
		}
	}()
	for range cfg.MaxConns {
		c, err := p.Acquire(ctx)
		if err != nil {
			p.Close()
			return nil, err
		}
		conns = append(conns, c)
	}
	return p, nil
}

// fill inserts n pending messages with payload-sized payloads into the
// outbox table of opts, due now, with UUIDv7 ids in commit order (as
// Writer.Write makes them), then VACUUM ANALYZEs it so every run starts from
// the same state: fresh statistics and a set visibility map.
func (e *env) fill(ctx context.Context, opts outboxpg.Options, n int) error {
	e.checkpoint(ctx)
	payload := payloadOf(e.opts.PayloadBytes)
	now := time.Now().UTC()
	const chunk = 10000
	for done := 0; done < n; done += chunk {
		rows := make([][]any, 0, min(chunk, n-done))
		for i := done; i < n && i < done+chunk; i++ {
			id, err := uuid.NewV7()
			if err != nil {
				return err
			}
			rows = append(rows, []any{id, "bench.created", fmt.Sprintf("key-%d", i%64), payload, now, now})
		}
		_, err := e.admin.CopyFrom(ctx, pgx.Identifier{opts.Schema, "outbox"},
			[]string{"id", "topic", "key", "payload", "created_at", "available_at"}, pgx.CopyFromRows(rows))
		if err != nil {
			return fmt.Errorf("fill %s.outbox: %w", opts.Schema, err)
		}
	}
	return e.vacuum(ctx, opts.Schema+".outbox")
}

// checkpoint starts a new checkpoint cycle before a backlog is written. A
// page's first change after a checkpoint logs a full-page image (8 kB), and
// the periodic checkpoint (checkpoint_timeout) otherwise falls at a random
// point of some runs and not others; pages written after this checkpoint
// carry no image when the run changes them, so every run, the relay and its
// references alike, is measured in the same state. Needs superuser (or
// pg_checkpoint); without it runs go on, noisier.
func (e *env) checkpoint(ctx context.Context) {
	if e.noCheckpoint.Load() {
		return
	}
	if _, err := e.admin.Exec(ctx, `CHECKPOINT`); err != nil {
		e.noCheckpoint.Store(true)
		e.logf("CHECKPOINT failed (%v): runs may include full-page images at random", err)
	}
}

func (e *env) vacuum(ctx context.Context, table string) error {
	schema, name, _ := strings.Cut(table, ".")
	if _, err := e.admin.Exec(ctx, `VACUUM ANALYZE `+quote(schema)+`.`+quote(name)); err != nil {
		return fmt.Errorf("vacuum %s: %w", table, err)
	}
	return nil
}

// walCounters are cluster-wide counters read before and after a run. The
// cluster must be quiet apart from the run (scripts/bench starts a private
// one).
type walCounters struct {
	lsn  int64 // pg_current_wal_lsn() in bytes
	xmax int64 // next transaction id to be assigned
	sync int64 // pg_stat_wal.wal_sync
}

func (e *env) walCounters(ctx context.Context) (walCounters, error) {
	var c walCounters
	err := e.admin.QueryRow(ctx, `SELECT pg_current_wal_lsn() - '0/0',
		pg_snapshot_xmax(pg_current_snapshot())::text::bigint,
		(SELECT wal_sync FROM pg_stat_wal)`).Scan(&c.lsn, &c.xmax, &c.sync)
	return c, err
}

// WALUsage is what a run cost in WAL.
type WALUsage struct {
	Bytes int64 // WAL bytes written
	Xids  int64 // transaction ids assigned: write transactions
	Syncs int64 // WAL fsyncs (pg_stat_wal.wal_sync; needs a 1 s stats flush)
}

// walSince returns the WAL used since before. Backends flush their I/O
// statistics at most once a second (and when they exit), so callers close
// their pools first and this waits for the rest to arrive.
func (e *env) walSince(ctx context.Context, before walCounters) (WALUsage, error) {
	select {
	case <-ctx.Done():
		return WALUsage{}, ctx.Err()
	case <-time.After(1100 * time.Millisecond):
	}
	after, err := e.walCounters(ctx)
	if err != nil {
		return WALUsage{}, err
	}
	return WALUsage{Bytes: after.lsn - before.lsn, Xids: after.xmax - before.xmax, Syncs: after.sync - before.sync}, nil
}

func payloadOf(n int) []byte {
	p := make([]byte, n)
	for i := range p {
		p[i] = 'a' + byte(i%26)
	}
	return p
}

// quote quotes an identifier this package made (no quotes inside).
func quote(s string) string { return `"` + s + `"` }

func quietLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

func pgUUID(id uuid.UUID) pgtype.UUID { return pgtype.UUID{Bytes: id, Valid: true} }

func pgUUIDs(ids []uuid.UUID) []pgtype.UUID {
	out := make([]pgtype.UUID, len(ids))
	for i, id := range ids {
		out[i] = pgUUID(id)
	}
	return out
}
