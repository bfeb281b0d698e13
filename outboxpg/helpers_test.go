package outboxpg_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"github.com/google/uuid"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/pgtest"
	"github.com/go-outbox/outbox/outboxdriver"
	"github.com/go-outbox/outbox/outboxpg"
	"github.com/go-outbox/outbox/storetest"
)

var errRollback = errors.New("roll back on purpose")

// newStore returns a Store on a migrated table in a fresh schema. opts.Schema
// is filled in.
func newStore(t *testing.T, pool *pgxpool.Pool, opts outboxpg.Options) *outboxpg.Store {
	t.Helper()
	if opts.Schema == "" {
		opts.Schema = pgtest.Schema(t)
	}
	m, err := outboxpg.NewMigrator(pool, opts)
	if err != nil {
		t.Fatalf("new migrator: %v", err)
	}
	if _, err := m.Up(t.Context()); err != nil {
		t.Fatalf("migrate up: %v", err)
	}
	s, err := outboxpg.New(pool, opts)
	if err != nil {
		t.Fatalf("new store: %v", err)
	}
	return s
}

func newWriter[TTx any](t *testing.T, in outbox.Inserter[TTx]) *outbox.Writer[TTx] {
	t.Helper()
	w, err := outbox.NewWriter(in, outbox.WriterConfig{})
	if err != nil {
		t.Fatalf("new writer: %v", err)
	}
	return w
}

// dbNow reads the database's clock.
func dbNow(pool *pgxpool.Pool) func(ctx context.Context) (time.Time, error) {
	return func(ctx context.Context) (time.Time, error) {
		var now time.Time
		err := pool.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&now)
		return now, err
	}
}

// pgxHarness writes through pgx transactions.
func pgxHarness(t *testing.T) storetest.Harness { return pgxHarnessOn(t, pgtest.Pool(t)) }

// pgxHarnessOn is pgxHarness on a pool of the caller's.
func pgxHarnessOn(t *testing.T, pool *pgxpool.Pool) storetest.Harness {
	return pgxHarnessWith(t, pool, outboxpg.Options{})
}

// pgxHarnessWith is pgxHarnessOn with stores made with opts (the schema and
// table are the test's, and the key-ordered store adds OrderByKey).
func pgxHarnessWith(t *testing.T, pool *pgxpool.Pool, opts outboxpg.Options) storetest.Harness {
	store := newStore(t, pool, opts)
	ordered := keyOrderedWith(t, pool, store, opts)
	skipOpts := opts
	skipOpts.SkipDeadInKeyOrder = true
	skipping := keyOrderedWith(t, pool, store, skipOpts)
	t.Cleanup(func() {
		outboxpg.RollBackOpenClaims(store)
		outboxpg.RollBackOpenClaims(ordered)
		outboxpg.RollBackOpenClaims(skipping)
	})
	w := newWriter(t, store)
	return storetest.Harness{
		Admin:                  store,
		Now:                    dbNow(pool),
		Store:                  store,
		KeyOrdered:             ordered,
		KeyOrderedSkippingDead: skipping,
		Write: func(ctx context.Context, msgs ...*outbox.Message) error {
			return w.Transact(ctx, func(ctx context.Context, tx pgx.Tx) error { return w.Write(ctx, tx, msgs...) })
		},
		WriteRollback: func(ctx context.Context, msgs ...*outbox.Message) error {
			return rollback(store.RunInTx(ctx, func(tx pgx.Tx) error {
				if err := w.Write(ctx, tx, msgs...); err != nil {
					return err
				}
				return errRollback
			}))
		},
		SetStoredHeaders: setStoredHeaders(pool, store.Name()),
		SetMinute:        setMinute(pool, store.Name()),
		CountHeld:        countHeld(pool, store.Name(), opts.TransactionLeases),
	}
}

// setMinute is storetest.Harness.SetMinute for the table named
// schema.table.
func setMinute(pool *pgxpool.Pool, name string) func(ctx context.Context, m outboxdriver.Minute) error {
	schema, table, _ := strings.Cut(name, ".")
	return func(ctx context.Context, m outboxdriver.Minute) error {
		var pending, oldestMS *int64
		if m.Sampled {
			ms := m.OldestPending.Milliseconds()
			pending, oldestMS = &m.Pending, &ms
		}
		_, err := pool.Exec(ctx, `INSERT INTO `+pgx.Identifier{schema, table + "_minutes"}.Sanitize()+` (minute, published, failed, pending, oldest_ms) VALUES ($1, $2, $3, $4, $5)`,
			m.Start, m.Published, m.Failed, pending, oldestMS)
		return err
	}
}

// countHeld is storetest.Harness.CountHeld for the table named
// schema.table when its stores hold claims in transactions, and nil
// otherwise: the pending rows that another transaction holds locked.
func countHeld(pool *pgxpool.Pool, name string, held bool) func(ctx context.Context) (int64, error) {
	if !held {
		return nil
	}
	schema, table, _ := strings.Cut(name, ".")
	q := pgx.Identifier{schema, table}.Sanitize()
	return func(ctx context.Context) (n int64, err error) {
		err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			var all, free int64
			if err := tx.QueryRow(ctx, `SELECT count(*) FROM `+q+` WHERE status = 'pending'`).Scan(&all); err != nil {
				return err
			}
			err := tx.QueryRow(ctx, `SELECT count(*) FROM (SELECT FROM `+q+` WHERE status = 'pending' FOR UPDATE SKIP LOCKED) AS f`).Scan(&free)
			n = all - free
			return err
		})
		return n, err
	}
}

// writeRoundRobin writes keys*perKey messages to store in one transaction,
// taking the keys in turn (account-000, account-001, ...), and returns them
// in write order.
func writeRoundRobin(t *testing.T, store *outboxpg.Store, keys, perKey int) []*outbox.Message {
	t.Helper()
	w := newWriter(t, store)
	msgs := make([]*outbox.Message, 0, keys*perKey)
	for i := range keys * perKey {
		msgs = append(msgs, &outbox.Message{Topic: "accounts", Key: fmt.Sprintf("account-%03d", i%keys)})
	}
	ctx := t.Context()
	if err := w.Transact(ctx, func(ctx context.Context, tx pgx.Tx) error { return w.Write(ctx, tx, msgs...) }); err != nil {
		t.Fatalf("write: %v", err)
	}
	return msgs
}

// claimByKey claims up to limit messages from store with a lease of a
// minute and returns them, and how many of them each key got.
func claimByKey(t *testing.T, store *outboxpg.Store, limit int) ([]outbox.Message, map[string]int) {
	t.Helper()
	got, err := store.SettleAndClaim(t.Context(), outboxdriver.Settlement{}, outboxdriver.Claim{Limit: limit, Lease: time.Minute, Token: uuid.New()})
	if err != nil {
		t.Fatalf("claim: %v", err)
	}
	runs := map[string]int{}
	for _, m := range got {
		runs[m.Key]++
	}
	return got, runs
}

// keyOrdered returns a store on store's table that claims in key order.
func keyOrdered(t *testing.T, pool *pgxpool.Pool, store *outboxpg.Store) *outboxpg.Store {
	return keyOrderedWith(t, pool, store, outboxpg.Options{})
}

// keyOrderedWith is keyOrdered with the other options of opts.
func keyOrderedWith(t *testing.T, pool *pgxpool.Pool, store *outboxpg.Store, opts outboxpg.Options) *outboxpg.Store {
	t.Helper()
	opts.Schema, opts.Table, _ = strings.Cut(store.Name(), ".")
	opts.OrderByKey = true
	s, err := outboxpg.New(pool, opts)
	if err != nil {
		t.Fatalf("new key-ordered store: %v", err)
	}
	return s
}

// setStoredHeaders is storetest.Harness.SetStoredHeaders for the table named
// schema.table.
func setStoredHeaders(pool *pgxpool.Pool, name string) func(ctx context.Context, id uuid.UUID, raw string) error {
	schema, table, _ := strings.Cut(name, ".")
	return func(ctx context.Context, id uuid.UUID, raw string) error {
		_, err := pool.Exec(ctx, `UPDATE `+pgx.Identifier{schema, table}.Sanitize()+` SET headers = $1::jsonb WHERE id = $2`, raw, id)
		return err
	}
}

// sqlHarness writes through database/sql transactions on the pgx driver.
func sqlHarness(t *testing.T) storetest.Harness {
	pool := pgtest.Pool(t)
	store := newStore(t, pool, outboxpg.Options{Table: "events"})
	db := openDB(t, pool)
	sw, err := outboxpg.NewSQL(db, outboxpg.Options{Schema: strings.Split(store.Name(), ".")[0], Table: "events"})
	if err != nil {
		t.Fatalf("new SQL writer: %v", err)
	}
	w := newWriter(t, sw)
	return storetest.Harness{
		Admin:                  store,
		Now:                    dbNow(pool),
		Store:                  store,
		KeyOrdered:             keyOrdered(t, pool, store),
		KeyOrderedSkippingDead: keyOrderedWith(t, pool, store, outboxpg.Options{SkipDeadInKeyOrder: true}),
		Write: func(ctx context.Context, msgs ...*outbox.Message) error {
			return w.Transact(ctx, func(ctx context.Context, tx *sql.Tx) error { return w.Write(ctx, tx, msgs...) })
		},
		WriteRollback: func(ctx context.Context, msgs ...*outbox.Message) error {
			return rollback(sw.RunInTx(ctx, func(tx *sql.Tx) error {
				if err := w.Write(ctx, tx, msgs...); err != nil {
					return err
				}
				return errRollback
			}))
		},
		SetStoredHeaders: setStoredHeaders(pool, store.Name()),
		SetMinute:        setMinute(pool, store.Name()),
	}
}

func rollback(err error) error {
	if errors.Is(err, errRollback) {
		return nil
	}
	if err == nil {
		return errors.New("the transaction committed; want it rolled back")
	}
	return err
}

func openDB(t *testing.T, pool *pgxpool.Pool) *sql.DB {
	t.Helper()
	db := stdlib.OpenDBFromPool(pool)
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// counter is a pgx tracer that counts what a pool sends.
type counter struct {
	batches, batchQueries, queries atomic.Int64
	// roundTrips counts flights of client messages: writes that follow a read
	// from the server (or open the connection).
	roundTrips atomic.Int64
	sqls       chan string
}

func newCounter() *counter { return &counter{sqls: make(chan string, 64)} }

func (c *counter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	c.queries.Add(1)
	select {
	case c.sqls <- d.SQL:
	default:
	}
	return ctx
}
func (c *counter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (c *counter) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	c.batches.Add(1)
	return ctx
}
func (c *counter) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {
	c.batchQueries.Add(1)
}
func (c *counter) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

func (c *counter) reset() {
	c.batches.Store(0)
	c.batchQueries.Store(0)
	c.roundTrips.Store(0)
	c.queries.Store(0)
	for {
		select {
		case <-c.sqls:
		default:
			return
		}
	}
}

// tracedPool returns a pool of one connection whose statements c counts.
func tracedPool(t *testing.T, c *counter) *pgxpool.Pool {
	t.Helper()
	cfg := pgtest.Config(t)
	cfg.MaxConns = 1
	cfg.ConnConfig.Tracer = c
	dial := cfg.ConnConfig.DialFunc
	cfg.ConnConfig.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &countingConn{Conn: conn, c: c, fresh: true}, nil
	}
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	if err != nil {
		t.Fatalf("new pool: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// countingConn counts round trips: a write that follows a read starts one.
type countingConn struct {
	net.Conn
	c     *counter
	mu    sync.Mutex
	fresh bool // nothing written since the last read
}

func (cc *countingConn) Write(b []byte) (int, error) {
	cc.mu.Lock()
	if cc.fresh {
		cc.c.roundTrips.Add(1)
		cc.fresh = false
	}
	cc.mu.Unlock()
	return cc.Conn.Write(b)
}

func (cc *countingConn) Read(b []byte) (int, error) {
	n, err := cc.Conn.Read(b)
	if n > 0 {
		cc.mu.Lock()
		cc.fresh = true
		cc.mu.Unlock()
	}
	return n, err
}

// pgxpoolForValidation stands in for a pool in tests that never reach the
// database.
var pgxpoolForValidation = new(pgxpool.Pool)
