package outboxpg_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/pgtest"
	"github.com/go-outbox/outbox/outboxdriver"
	"github.com/go-outbox/outbox/outboxpg"
)

// Statements that lock several dead messages (a settlement counting the
// messages that overtake them, a dead retry, a discard) must take them in
// one order, whatever plan PostgreSQL picks for each: two that take them
// in opposite orders deadlock, and PostgreSQL aborts one. When that is a
// settlement, the messages it published come back and go out again.
//
// These tests hold one dead message's lock in an explicit transaction, as
// the statement on the other side takes them (in id order: the lower id
// first), and run the statement under test on a pool whose planner scans
// tables in their physical order and joins by hashing, where the dead
// message of the higher id comes first. The statement must wait for the
// first dead message before it takes the second; once it waits, the
// explicit transaction takes the second, which deadlocks if it did not.

// A settlement that counts the messages it publishes on the dead messages
// they overtook, while a dead retry locks those dead messages in id order,
// waits for the retry and goes on: neither is aborted, and the retried
// messages, pending once the retry commits, are not counted.
func TestASettlementCountingOvertakenMessagesAndADeadRetryLockTheDeadMessagesInOneOrder(t *testing.T) {
	t.Parallel()
	for _, txLeases := range []bool{false, true} {
		t.Run(fmt.Sprintf("TransactionLeases=%v", txLeases), func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			pool := pgtest.Pool(t)
			opts := outboxpg.Options{OrderByKey: true, SkipDeadInKeyOrder: true, TransactionLeases: txLeases}
			store := newStore(t, pool, opts)
			dead := deadInTableOrderAgainstIDOrder(t, pool, store, "k")
			w := newWriter(t, store)
			later := &outbox.Message{Topic: "orders", Key: "k", Payload: []byte(`{}`)}
			if err := w.Transact(ctx, func(ctx context.Context, tx pgx.Tx) error { return w.Write(ctx, tx, later) }); err != nil {
				t.Fatal(err)
			}

			hashing, app := hashJoiningStore(t, store, opts)
			token := uuid.New()
			got, err := hashing.SettleAndClaim(ctx, outboxdriver.Settlement{}, outboxdriver.Claim{Limit: 1, Lease: time.Minute, Token: token})
			if err != nil || len(got) != 1 || got[0].ID != later.ID {
				t.Fatalf("claim past the dead messages %v: %v, %v; want %s", dead, ids(got), err, later.ID)
			}
			defer outboxpg.RollBackOpenClaims(hashing)

			retry := lockFirstDead(t, pool, store, dead)
			settled := make(chan error, 1)
			go func() {
				_, err := hashing.SettleAndClaim(ctx, outboxdriver.Settlement{Token: token, Published: []uuid.UUID{later.ID}}, outboxdriver.Claim{})
				settled <- err
			}()
			waitForLock(t, pool, app, "transactionid")
			retry.takeSecondAndRetry(t)

			if err := <-settled; err != nil {
				t.Fatalf("settlement of %s, published past the dead messages %v, while a retry of them locked them in id order: %v; want it to wait for the retry and succeed",
					later.ID, dead, err)
			}
			if _, err := store.Get(ctx, later.ID); !errors.Is(err, outbox.ErrNotFound) {
				t.Fatalf("get %s after its settlement as published: %v; want it deleted", later.ID, err)
			}
			for _, id := range dead {
				m, err := store.Get(ctx, id)
				if err != nil || m.Status != outbox.StatusPending || m.Overtaken != 0 {
					t.Fatalf("message %s after its retry and the settlement: %+v, %v; want pending, overtaken by 0 (retried before the settlement counted)", id, m, err)
				}
			}
		})
	}
}

// A dead retry or discard of several dead messages, while a settlement
// that counts on them holds the first in id order, waits for the
// settlement and goes on: neither is aborted.
func TestDeadRetriesAndDiscardsLockTheDeadMessagesInTheOrderSettlementsDo(t *testing.T) {
	t.Parallel()
	type operation struct {
		name string
		run  func(ctx context.Context, s *outboxpg.Store, dead []uuid.UUID) (int, error)
		want int
	}
	for _, op := range []operation{
		{"retry all", func(ctx context.Context, s *outboxpg.Store, _ []uuid.UUID) (int, error) { return s.RetryAllDead(ctx) }, 2},
		{"retry by id", func(ctx context.Context, s *outboxpg.Store, dead []uuid.UUID) (int, error) {
			return s.RetryDead(ctx, dead...)
		}, 2},
		{"discard by id", func(ctx context.Context, s *outboxpg.Store, dead []uuid.UUID) (int, error) {
			return s.DiscardDead(ctx, dead...)
		}, 2},
		// The settlement counted on both: the request is refused whole.
		{"retry unless overtaken", func(ctx context.Context, s *outboxpg.Store, dead []uuid.UUID) (int, error) {
			n, overtaken, err := s.RetryDeadUnlessOvertaken(ctx, dead, false)
			if err == nil && len(overtaken) != len(dead) {
				err = fmt.Errorf("named %v as overtaken; want %v", ids(overtaken), dead)
			}
			return n, err
		}, 0},
	} {
		t.Run(op.name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			pool := pgtest.Pool(t)
			opts := outboxpg.Options{OrderByKey: true, SkipDeadInKeyOrder: true}
			store := newStore(t, pool, opts)
			dead := deadInTableOrderAgainstIDOrder(t, pool, store, "k")
			hashing, app := hashJoiningStore(t, store, opts)

			settlement := lockFirstDead(t, pool, store, dead)
			done := make(chan error, 1)
			var n int
			go func() {
				var err error
				n, err = op.run(ctx, hashing, dead)
				done <- err
			}()
			waitForLock(t, pool, app, "transactionid")
			settlement.takeSecondAndCount(t)

			if err := <-done; err != nil || n != op.want {
				t.Fatalf("%s of %v while a settlement that counts on them held the first in id order: %d, %v; want %d, and to wait for the settlement",
					op.name, dead, n, err, op.want)
			}
		})
	}
}

// deadInTableOrderAgainstIDOrder writes two messages of key to store,
// dead-letters them, and moves the one of the lower id after the other in
// the table, so that a scan of the table meets them against id order. It
// returns their ids in id order.
func deadInTableOrderAgainstIDOrder(t *testing.T, pool *pgxpool.Pool, store *outboxpg.Store, key string) []uuid.UUID {
	t.Helper()
	ctx := t.Context()
	w := newWriter(t, store)
	msgs := []*outbox.Message{{Topic: "orders", Key: key, Payload: []byte(`{}`)}, {Topic: "orders", Key: key, Payload: []byte(`{}`)}}
	if err := w.Transact(ctx, func(ctx context.Context, tx pgx.Tx) error { return w.Write(ctx, tx, msgs...) }); err != nil {
		t.Fatal(err)
	}
	for _, m := range msgs {
		token := uuid.New()
		got, err := store.SettleAndClaim(ctx, outboxdriver.Settlement{}, outboxdriver.Claim{Limit: 1, Lease: time.Minute, Token: token})
		if err != nil || len(got) != 1 || got[0].ID != m.ID {
			t.Fatalf("claim %s: %v, %v", m.ID, ids(got), err)
		}
		if _, err := store.SettleAndClaim(ctx, outboxdriver.Settlement{Token: token, Dead: []outboxdriver.Failure{{ID: m.ID, Error: "rejected"}}}, outboxdriver.Claim{}); err != nil {
			t.Fatalf("dead-letter %s: %v", m.ID, err)
		}
	}
	low, high := msgs[0].ID, msgs[1].ID
	if low.String() > high.String() {
		low, high = high, low
	}
	// An update writes a new version after the others: nothing frees
	// room on the table's only page in this test (no vacuum, no pruning
	// at this fill).
	table := qualified(store)
	if _, err := pool.Exec(ctx, `UPDATE `+table+` SET last_error = last_error WHERE id = $1`, low); err != nil {
		t.Fatal(err)
	}
	var first uuid.UUID
	if err := pool.QueryRow(ctx, `SELECT id FROM `+table+` WHERE status = 'dead' ORDER BY ctid LIMIT 1`).Scan(&first); err != nil {
		t.Fatal(err)
	}
	if first != high {
		t.Fatalf("the table holds dead message %s first; want %s, of the higher id: this test no longer sets up the order it is about", first, high)
	}
	return []uuid.UUID{low, high}
}

// hashJoiningStore returns a store like store, on a pool of its own whose
// planner reads tables in their physical order (no index scans) and joins
// by hashing, and the application name of the pool's connections.
func hashJoiningStore(t *testing.T, store *outboxpg.Store, opts outboxpg.Options) (*outboxpg.Store, string) {
	t.Helper()
	cfg := pgtest.Config(t)
	app := "hash-joining-" + uuid.NewString()[:8]
	for k, v := range map[string]string{"application_name": app, "enable_indexscan": "off", "enable_indexonlyscan": "off",
		"enable_bitmapscan": "off", "enable_nestloop": "off", "enable_mergejoin": "off"} {
		cfg.ConnConfig.RuntimeParams[k] = v
	}
	cfg.MaxConns = 4
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	opts.Schema, opts.Table, _ = strings.Cut(store.Name(), ".")
	s, err := outboxpg.New(pool, opts)
	if err != nil {
		t.Fatal(err)
	}
	return s, app
}

// deadLocker is an explicit transaction that takes the locks of two dead
// messages in id order, as the statements that lock several do.
type deadLocker struct {
	tx    pgx.Tx
	table string
	dead  []uuid.UUID
}

// lockFirstDead begins the transaction and locks dead[0].
func lockFirstDead(t *testing.T, pool *pgxpool.Pool, store *outboxpg.Store, dead []uuid.UUID) *deadLocker {
	t.Helper()
	tx, err := pool.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	l := &deadLocker{tx: tx, table: qualified(store), dead: dead}
	if _, err := tx.Exec(t.Context(), `SELECT FROM `+l.table+` WHERE id = $1 FOR UPDATE`, dead[0]); err != nil {
		t.Fatal(err)
	}
	return l
}

// takeSecondAndRetry locks dead[1] and retries both, as a dead retry does,
// and commits.
func (l *deadLocker) takeSecondAndRetry(t *testing.T) {
	t.Helper()
	l.takeSecondThen(t, `UPDATE `+l.table+` SET status = 'pending', attempts = 0, available_at = now() WHERE id = ANY($1) AND status = 'dead'`)
}

// takeSecondAndCount locks dead[1] and counts one message past each, as a
// settlement does, and commits.
func (l *deadLocker) takeSecondAndCount(t *testing.T) {
	t.Helper()
	l.takeSecondThen(t, `UPDATE `+l.table+` SET overtaken = overtaken + 1 WHERE id = ANY($1) AND status = 'dead'`)
}

func (l *deadLocker) takeSecondThen(t *testing.T, q string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if _, err := l.tx.Exec(ctx, `SELECT FROM `+l.table+` WHERE id = $1 FOR UPDATE`, l.dead[1]); err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "40P01" {
			t.Fatalf("locking dead message %s after %s, in id order: %v: the statement under test took %s first",
				l.dead[1], l.dead[0], err, l.dead[1])
		}
		t.Fatal(err)
	}
	if _, err := l.tx.Exec(ctx, q, l.dead); err != nil {
		t.Fatal(err)
	}
	if err := l.tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
}

// qualified is the quoted name of store's table.
func qualified(store *outboxpg.Store) string {
	schema, table, _ := strings.Cut(store.Name(), ".")
	return pgx.Identifier{schema, table}.Sanitize()
}
