package outboxpg_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/pgtest"
	"github.com/go-outbox/outbox/outboxpg"
	"github.com/go-outbox/outbox/relaytest"
)

// With transaction leases each batch in flight holds a connection of the
// pool. A publisher that runs its own transactions on the same pool
// (in-process handlers with an inbox, outboxevents.Dispatcher) needs one
// more per worker. With pgxpool's default of 4 connections and 4 workers,
// the claims held them all and every handler waited out its deadline until
// the messages were dead letters. The store must leave the publisher room:
// every message is handled, none is dead.
func TestTransactionLeasesLeaveConnectionsForHandlersOnTheSamePool(t *testing.T) {
	t.Parallel()
	cfg := pgtest.Config(t)
	cfg.MaxConns = 4 // pgxpool's default on a machine of up to 4 cores
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	store := newStore(t, pool, outboxpg.Options{Schema: pgtest.Schema(t), TransactionLeases: true})
	t.Cleanup(func() { outboxpg.RollBackOpenClaims(store) })

	const n = 400
	w := newWriter(t, store)
	msgs := make([]*outbox.Message, n)
	for i := range msgs {
		msgs[i] = &outbox.Message{Topic: "orders"}
	}
	ctx := t.Context()
	if err := w.Transact(ctx, func(ctx context.Context, tx pgx.Tx) error { return w.Write(ctx, tx, msgs...) }); err != nil {
		t.Fatalf("write: %v", err)
	}

	var handled atomic.Int64
	var handlers outbox.Handlers
	handlers.Handle("orders", func(ctx context.Context, m outbox.Message) error {
		// The handler's own transaction on the relay's pool, as an
		// inbox's would be.
		return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `SELECT pg_sleep(0.001)`); err != nil {
				return err
			}
			handled.Add(1)
			return nil
		})
	})
	relaytest.StartRelay(t, store, &handlers, outbox.Config{Workers: 4, BatchSize: 10, LeaseDuration: 2 * time.Second, MaxAttempts: 2,
		BackoffBase: 10 * time.Millisecond, BackoffMax: 50 * time.Millisecond, PollInterval: 50 * time.Millisecond})

	deadline := time.Now().Add(60 * time.Second)
	for {
		st, err := store.Stats(ctx)
		if err != nil {
			t.Fatalf("stats: %v", err)
		}
		if st.Dead > 0 {
			t.Fatalf("%d messages dead, %d handled of %d: the held claims left the handlers no connection of the pool (MaxConns 4, 4 workers)", st.Dead, handled.Load(), n)
		}
		if st.Pending == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 60 s, %d of %d pending, %d handled: the relay's claims and its handlers share the pool badly", st.Pending, n, handled.Load())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if got := handled.Load(); got < n {
		t.Fatalf("%d messages handled; want all %d", got, n)
	}
}
