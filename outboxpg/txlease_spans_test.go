package outboxpg_test

import (
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/go-outbox/outbox/internal/pgtest"
	"github.com/go-outbox/outbox/outboxdriver"
	"github.com/go-outbox/outbox/outboxpg"
)

// With transaction leases, the rows an open claim holds are still pending
// to every other transaction, and in the pending index's order they come
// first: the next worker's claim, read from the head of the index, would
// fetch and try to lock each of them before it reached free work, so every
// worker added made each claim dearer (docs/benchmarks.md, "After issue
// 24"). The Store knows which rows its open claims hold, and its next claim
// starts past them.
func TestTransactionLeaseClaimPassesOverTheRowsOfTheStoresOtherOpenClaimsWithoutReadingThem(t *testing.T) {
	t.Parallel()
	const batch = 500
	shared := pgtest.Pool(t)
	writer := newStore(t, shared, outboxpg.Options{TransactionLeases: true})
	writeUnkeyed(t, writer, 10*batch)
	// With statistics, as autovacuum keeps them, the claim reads the
	// pending index in order; without, a bitmap scan reads all of it.
	if _, err := shared.Exec(t.Context(), `ANALYZE `+writer.Name()); err != nil {
		t.Fatal(err)
	}

	cfg := pgtest.Config(t)
	cfg.MaxConns = 4 // two places for open claims
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	store, err := outboxpg.New(pool, outboxpg.Options{Schema: schemaOf(t, writer), TransactionLeases: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { outboxpg.RollBackOpenClaims(store) })

	before := pendingIndexReads(t, shared, store, 0)
	var settles []outboxdriver.Settlement
	for i := range 2 {
		token := uuid.New()
		msgs, err := store.SettleAndClaim(t.Context(), outboxdriver.Settlement{}, outboxdriver.Claim{Token: token, Limit: batch, Lease: time.Minute})
		if err != nil {
			t.Fatalf("claim %d: %v", i, err)
		}
		if len(msgs) != batch {
			t.Fatalf("claim %d got %d messages; want %d", i, len(msgs), batch)
		}
		s := outboxdriver.Settlement{Token: token}
		for _, m := range msgs {
			s.Published = append(s.Published, m.ID)
		}
		settles = append(settles, s)
	}
	for i, s := range settles {
		if _, err := store.SettleAndClaim(t.Context(), s, outboxdriver.Claim{}); err != nil {
			t.Fatalf("settle %d: %v", i, err)
		}
	}
	// Backends report their statistics when they end.
	pool.Close()
	read := pendingIndexReads(t, shared, store, before+2*batch) - before
	// Each claim reads its own rows, and one entry past them at most.
	if read > 2*batch+2 {
		t.Fatalf("two claims of %d held open at once read %d entries of the pending index; want at most %d: the second read the first's rows", batch, read, 2*batch+2)
	}
}

// schemaOf is the schema of store's table.
func schemaOf(t *testing.T, store *outboxpg.Store) string {
	t.Helper()
	schema, _, _ := cutName(store.Name())
	return schema
}

// cutName splits "schema.table".
func cutName(name string) (schema, table string, ok bool) {
	for i := len(name) - 1; i >= 0; i-- {
		if name[i] == '.' {
			return name[:i], name[i+1:], true
		}
	}
	return "", name, false
}

// pendingIndexReads returns the entries scans have read from the pending
// index of store's table, once the statistics reach at least want and stop
// changing (backends report them a while after they go idle or end).
func pendingIndexReads(t *testing.T, pool *pgxpool.Pool, store *outboxpg.Store, want int64) int64 {
	t.Helper()
	schema, table, _ := cutName(store.Name())
	deadline := time.Now().Add(15 * time.Second)
	last, stable := int64(-1), 0
	for {
		var n int64
		err := pool.QueryRow(t.Context(), `SELECT COALESCE(sum(idx_tup_read), 0)::bigint FROM pg_stat_user_indexes
			WHERE schemaname = $1 AND relname = $2 AND indexrelname = $2 || '_pending_idx'`, schema, table).Scan(&n)
		if err != nil {
			t.Fatal(err)
		}
		if n >= want && n == last {
			stable++
			if stable == 5 {
				return n
			}
		} else {
			stable = 0
		}
		last = n
		if time.Now().After(deadline) {
			t.Fatalf("the pending index's statistics stayed at %d; want at least %d", n, want)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
