package bench

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/outboxpg"
)

// businessTables are the application's tables next to the outbox: an order
// (the business change) and, as the yardstick for the writer's cost, a plain
// table shaped like a message but with nothing but its primary key.
const businessTables = `
CREATE TABLE %[1]s.orders (
	id         bigserial PRIMARY KEY,
	customer   text NOT NULL,
	total      numeric(12, 2) NOT NULL,
	created_at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE %[1]s.audit (
	id         uuid PRIMARY KEY,
	topic      text NOT NULL,
	payload    bytea NOT NULL,
	created_at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE %[1]s.outbox_copy (LIKE %[1]s.outbox INCLUDING ALL);
CREATE TABLE %[1]s.outbox_pk_only (LIKE %[1]s.outbox INCLUDING DEFAULTS INCLUDING IDENTITY);
ALTER TABLE %[1]s.outbox_pk_only ADD PRIMARY KEY (id);
CREATE TABLE %[1]s.outbox_no_key_idx (LIKE %[1]s.outbox INCLUDING DEFAULTS INCLUDING IDENTITY);
ALTER TABLE %[1]s.outbox_no_key_idx ADD PRIMARY KEY (id);
CREATE INDEX ON %[1]s.outbox_no_key_idx (available_at, id) WHERE status = 'pending';
CREATE INDEX ON %[1]s.outbox_no_key_idx (id) WHERE status = 'dead';
CREATE INDEX ON %[1]s.outbox_no_key_idx (published_at) WHERE status = 'published';
CREATE TABLE %[1]s.outbox_no_seq (LIKE %[1]s.outbox INCLUDING DEFAULTS);
ALTER TABLE %[1]s.outbox_no_seq ALTER COLUMN seq DROP NOT NULL, ADD PRIMARY KEY (id);
CREATE INDEX ON %[1]s.outbox_no_seq (available_at, id) WHERE status = 'pending';
CREATE INDEX ON %[1]s.outbox_no_seq (id) WHERE status = 'dead';
CREATE INDEX ON %[1]s.outbox_no_seq (published_at) WHERE status = 'published';
CREATE TABLE %[1]s.outbox_pending_idx_only (LIKE %[1]s.outbox INCLUDING DEFAULTS INCLUDING IDENTITY);
ALTER TABLE %[1]s.outbox_pending_idx_only ADD PRIMARY KEY (id);
CREATE INDEX ON %[1]s.outbox_pending_idx_only (available_at, id) WHERE status = 'pending'`

// writerVariant is one business transaction: the order insert plus extra.
type writerVariant struct {
	name   string
	notify bool // the outbox store sends NOTIFY
	extra  func(ctx context.Context, tx pgx.Tx, w *outbox.Writer[pgx.Tx], schema string, payload []byte) error
}

func outboxMessages(n int) func(context.Context, pgx.Tx, *outbox.Writer[pgx.Tx], string, []byte) error {
	return func(ctx context.Context, tx pgx.Tx, w *outbox.Writer[pgx.Tx], _ string, payload []byte) error {
		msgs := make([]*outbox.Message, n)
		for i := range msgs {
			msgs[i] = &outbox.Message{Topic: "orders.created", Key: "order", Payload: payload}
		}
		return w.Write(ctx, tx, msgs...)
	}
}

var writerVariants = []writerVariant{
	{name: "order only"},
	{name: "order + a plain second insert (256-byte row)", extra: func(ctx context.Context, tx pgx.Tx, _ *outbox.Writer[pgx.Tx], schema string, payload []byte) error {
		_, err := tx.Exec(ctx, `INSERT INTO `+quote(schema)+`.audit (id, topic, payload) VALUES ($1, $2, $3)`, uuid.Must(uuid.NewV7()), "orders.created", payload)
		return err
	}},
	{name: "order + 1 outbox message", extra: outboxMessages(1)},
	{name: "order + 10 outbox messages (one Write)", extra: outboxMessages(10)},
	{name: "order + 1 outbox message, NOTIFY", notify: true, extra: outboxMessages(1)},
	// The next two split the outbox message's cost between the library and
	// the table: the same row inserted by hand, into a copy of the outbox
	// table (its indexes, defaults and the seq column's sequence), then into
	// a copy with its primary key only.
	{name: "order + the same row by hand, outbox-shaped table", extra: rowByHand("outbox_copy")},
	{name: "order + the same row by hand, primary key only", extra: rowByHand("outbox_pk_only")},
	// Between those two, one part of the table at a time (issue 29): the
	// outbox table without its key-order index (key, seq); without the
	// seq identity column and the key indexes that need it; with the
	// pending index (what claims read) as its only index beside the key.
	// The partial indexes of dead and published rows take no entry for a
	// pending row, so they stay in the first two.
	{name: "order + the same row by hand, no key-order index", extra: rowByHand("outbox_no_key_idx")},
	{name: "order + the same row by hand, no seq identity and no key-order indexes", extra: rowByHand("outbox_no_seq")},
	{name: "order + the same row by hand, primary key and pending index only", extra: rowByHand("outbox_pending_idx_only")},
}

func rowByHand(table string) func(context.Context, pgx.Tx, *outbox.Writer[pgx.Tx], string, []byte) error {
	return func(ctx context.Context, tx pgx.Tx, _ *outbox.Writer[pgx.Tx], schema string, payload []byte) error {
		_, err := tx.Exec(ctx, `INSERT INTO `+quote(schema)+`.`+table+` (id, topic, key, payload, created_at) VALUES ($1, $2, $3, $4, now())`,
			uuid.Must(uuid.NewV7()), "orders.created", "order", payload)
		return err
	}
}

// writerSetup is a schema with the business tables, the outbox, and a
// writer per NOTIFY setting.
type writerSetup struct {
	schema  string
	pool    *pgxpool.Pool
	stores  map[bool]*outboxpg.Store
	writers map[bool]*outbox.Writer[pgx.Tx]
	drop    func()
}

func (e *env) writerSetup(ctx context.Context, conns int32) (*writerSetup, error) {
	opts, drop, err := e.outboxTable(ctx, "writer")
	if err != nil {
		return nil, err
	}
	s := &writerSetup{schema: opts.Schema, drop: drop, stores: map[bool]*outboxpg.Store{}, writers: map[bool]*outbox.Writer[pgx.Tx]{}}
	if _, err := e.admin.Exec(ctx, fmt.Sprintf(businessTables, quote(opts.Schema))); err != nil {
		drop()
		return nil, err
	}
	if s.pool, err = e.pool(ctx, poolOptions{maxConns: conns}); err != nil {
		drop()
		return nil, err
	}
	for _, notify := range []bool{false, true} {
		o := opts
		o.Notify = notify
		st, err := outboxpg.New(s.pool, o)
		if err != nil {
			s.close()
			return nil, err
		}
		w, err := outbox.NewWriter(st, outbox.WriterConfig{})
		if err != nil {
			s.close()
			return nil, err
		}
		s.stores[notify], s.writers[notify] = st, w
	}
	return s, nil
}

func (s *writerSetup) close() {
	s.pool.Close()
	s.drop()
}

// tx runs one business transaction of variant v.
func (s *writerSetup) tx(ctx context.Context, v writerVariant, payload []byte) error {
	return s.stores[v.notify].RunInTx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO `+quote(s.schema)+`.orders (customer, total) VALUES ($1, $2)`, "customer-42", "99.90"); err != nil {
			return err
		}
		if v.extra == nil {
			return nil
		}
		return v.extra(ctx, tx, s.writers[v.notify], s.schema, payload)
	})
}

// measureWriter times single business transactions on one connection, the
// variants interleaved so drift in the machine's load hits all alike, then
// the throughput of 8 concurrent writers.
func (e *env) measureWriter(ctx context.Context) (*WriterResult, error) {
	s, err := e.writerSetup(ctx, 1)
	if err != nil {
		return nil, err
	}
	defer s.close()
	payload := payloadOf(e.opts.PayloadBytes)
	n := e.opts.WriterTransactions
	times := make([][]time.Duration, len(writerVariants))
	// Prepare every statement once before timing.
	for _, v := range writerVariants {
		if err := s.tx(ctx, v, payload); err != nil {
			return nil, fmt.Errorf("writer variant %q: %w", v.name, err)
		}
	}
	for i := range n {
		for j, v := range writerVariants {
			start := time.Now()
			if err := s.tx(ctx, v, payload); err != nil {
				return nil, fmt.Errorf("writer variant %q: %w", v.name, err)
			}
			times[j] = append(times[j], time.Since(start))
		}
		if (i+1)%(max(n/4, 1)) == 0 {
			e.logf("writer overhead: %d/%d transactions of each kind", i+1, n)
		}
	}
	res := &WriterResult{Transactions: n}
	for j, v := range writerVariants {
		slices.Sort(times[j])
		res.Variants = append(res.Variants, WriterVariant{Name: v.name, P50: percentile(times[j], 0.5), P95: percentile(times[j], 0.95)})
	}

	for _, v := range []writerVariant{writerVariants[0], writerVariants[1], writerVariants[2], writerVariants[4]} {
		t := Throughput{Name: "writers", Label: v.name, Relays: concurrentWriters}
		t, err := e.repeat(ctx, t, func(ctx context.Context) (float64, WALUsage, error) {
			rate, err := e.concurrentWriters(ctx, v)
			return rate, WALUsage{}, err
		})
		if err != nil {
			return nil, err
		}
		res.Concurrent = append(res.Concurrent, t)
	}
	return res, nil
}

const concurrentWriters = 8

// concurrentWriters runs concurrentWriters goroutines committing business
// transactions of variant v for opts.WriterDuration and returns commits/s.
func (e *env) concurrentWriters(ctx context.Context, v writerVariant) (float64, error) {
	s, err := e.writerSetup(ctx, concurrentWriters)
	if err != nil {
		return 0, err
	}
	defer s.close()
	payload := payloadOf(e.opts.PayloadBytes)
	if err := s.tx(ctx, v, payload); err != nil {
		return 0, err
	}
	return e.runWriters(ctx, s, v, concurrentWriters, payload)
}

// runWriters runs n goroutines committing business transactions of variant
// v in s for opts.WriterDuration and returns commits/s.
func (e *env) runWriters(ctx context.Context, s *writerSetup, v writerVariant, n int, payload []byte) (float64, error) {
	var (
		commits  atomic.Int64
		wg       sync.WaitGroup
		errOnce  sync.Once
		firstErr error
	)
	start := time.Now()
	end := start.Add(e.opts.WriterDuration)
	for range n {
		wg.Go(func() {
			for time.Now().Before(end) && ctx.Err() == nil {
				if err := s.tx(ctx, v, payload); err != nil {
					errOnce.Do(func() { firstErr = err })
					return
				}
				commits.Add(1)
			}
		})
	}
	wg.Wait()
	if firstErr != nil {
		return 0, firstErr
	}
	return float64(commits.Load()) / time.Since(start).Seconds(), ctx.Err()
}
