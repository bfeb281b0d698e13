package outboxpg_test

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/pgtest"
	"github.com/go-outbox/outbox/outboxpg"
	"github.com/go-outbox/outbox/relaytest"
)

// statementLog is a pgx tracer that records the statements a pool sends,
// batched ones included.
type statementLog struct {
	mu  sync.Mutex
	sql []string
}

func (l *statementLog) add(sql string) {
	l.mu.Lock()
	l.sql = append(l.sql, sql)
	l.mu.Unlock()
}

func (l *statementLog) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.sql)
}

func (l *statementLog) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	l.add(d.SQL)
	return ctx
}
func (l *statementLog) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (l *statementLog) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return ctx
}
func (l *statementLog) TraceBatchQuery(_ context.Context, _ *pgx.Conn, d pgx.TraceBatchQueryData) {
	l.add(d.SQL)
}
func (l *statementLog) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// relayHarness opens a migrated table in a fresh schema on a pool of its own
// that counts statements.
func relayHarness(t *testing.T, opts outboxpg.Options) (relaytest.Harness, *pgxpool.Pool, string) {
	t.Helper()
	ctx := context.Background()
	opts.Schema = pgtest.Schema(t)
	statements := &statementLog{}
	cfg := pgtest.Config(t)
	cfg.MaxConns = 8
	cfg.ConnConfig.Tracer = statements
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	m, err := outboxpg.NewMigrator(pool, opts)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Up(ctx); err != nil {
		t.Fatal(err)
	}
	store, err := outboxpg.New(pool, opts)
	if err != nil {
		t.Fatal(err)
	}
	w, err := outbox.NewWriter(store, outbox.WriterConfig{})
	if err != nil {
		t.Fatal(err)
	}
	orderedOpts := opts
	orderedOpts.OrderByKey = true
	ordered, err := outboxpg.New(pool, orderedOpts)
	if err != nil {
		t.Fatal(err)
	}
	return relaytest.Harness{
		Store:      store,
		KeyOrdered: ordered,
		Write: func(ctx context.Context, commit bool, msgs ...*outbox.Message) error {
			tx, err := pool.Begin(ctx)
			if err != nil {
				return err
			}
			defer tx.Rollback(ctx)
			if err := w.Write(ctx, tx, msgs...); err != nil {
				return err
			}
			if !commit {
				return tx.Rollback(ctx)
			}
			return tx.Commit(ctx)
		},
		Notify:     w.Notify,
		Statements: statements.all,
	}, pool, opts.Schema
}

func TestRelay(t *testing.T) {
	t.Parallel()
	relaytest.Run(t, func(t *testing.T) relaytest.Harness {
		h, _, _ := relayHarness(t, outboxpg.Options{})
		return h
	})
}

// TestRelayWithTransactionLeases runs the relay suite on stores whose
// claims hold their rows in a transaction (Options.TransactionLeases).
func TestRelayWithTransactionLeases(t *testing.T) {
	t.Parallel()
	relaytest.Run(t, func(t *testing.T) relaytest.Harness {
		h, _, _ := relayHarness(t, outboxpg.Options{TransactionLeases: true})
		t.Cleanup(func() {
			outboxpg.RollBackOpenClaims(h.Store.(*outboxpg.Store))
			outboxpg.RollBackOpenClaims(h.KeyOrdered.(*outboxpg.Store))
		})
		return h
	})
}

// A relay in another process learns of commits through NOTIFY when writers
// opt in: this relay polls once an hour, so only the notification can deliver
// in time.
func TestRelayWakesOnNotifyFromAnotherWriter(t *testing.T) {
	t.Parallel()
	h, pool, schema := relayHarness(t, outboxpg.Options{})
	// The writer is a different store value on the same table, as in another
	// process, with Notify on; it never calls the in-process Notify.
	notifying, err := outboxpg.New(pool, outboxpg.Options{Schema: schema, Notify: true})
	if err != nil {
		t.Fatal(err)
	}
	w, err := outbox.NewWriter(notifying, outbox.WriterConfig{})
	if err != nil {
		t.Fatal(err)
	}
	// Ready once the relay listens and has claimed after connecting (its
	// post-connect wake-up), so the messages below are found by NOTIFY alone.
	ready := func() {
		deadline := time.Now().Add(30 * time.Second)
		for {
			all := h.Statements()
			if i := slices.IndexFunc(all, func(s string) bool { return strings.HasPrefix(s, "LISTEN") }); i >= 0 &&
				slices.ContainsFunc(all[i+1:], func(s string) bool { return strings.Contains(s, "FOR UPDATE SKIP LOCKED") }) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatal("the relay did not LISTEN within 30s")
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	relaytest.TestWakeLatency(t, h, outbox.Config{}, ready, func(ctx context.Context, m *outbox.Message) error {
		return notifying.RunInTx(ctx, func(tx pgx.Tx) error { return w.Write(ctx, tx, m) })
	})
}

// Behind a transaction-mode pooler LISTEN does not work: with listening off
// and writers notifying anyway, the relay still delivers by polling.
func TestPollOnlyRelayIgnoresNotificationsAndStillDelivers(t *testing.T) {
	t.Parallel()
	h, pool, schema := relayHarness(t, outboxpg.Options{})
	notifying, err := outboxpg.New(pool, outboxpg.Options{Schema: schema, Notify: true})
	if err != nil {
		t.Fatal(err)
	}
	w, err := outbox.NewWriter(notifying, outbox.WriterConfig{})
	if err != nil {
		t.Fatal(err)
	}
	rec := relaytest.NewRecorder()
	relaytest.StartRelay(t, h.Store, rec, outbox.Config{DisableListen: true, PollInterval: 200 * time.Millisecond})
	ctx := context.Background()
	m := &outbox.Message{Topic: "poll-only", Payload: []byte("x")}
	if err := notifying.RunInTx(ctx, func(tx pgx.Tx) error { return w.Write(ctx, tx, m) }); err != nil {
		t.Fatal(err)
	}
	rec.WaitFor(t, 10*time.Second, "the poll to deliver "+m.ID.String(), func() bool { return rec.Count(m.ID) == 1 })
}
