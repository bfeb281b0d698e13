package outboxpg_test

import (
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/go-outbox/outbox"
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

// Passing over the spans of open claims loses nothing: a message that
// lies within them, free (here written after the claims, with an earlier
// due time, as a transaction that commits late writes it), is claimed
// once the rows before and after them leave places, and a message that a
// claim puts back within its own span is free at once for the next claim.
func TestTransactionLeaseClaimsTakeFreeMessagesWithinTheSpansTheyPassOver(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	store := newStore(t, pool, outboxpg.Options{TransactionLeases: true})
	t.Cleanup(func() { outboxpg.RollBackOpenClaims(store) })
	base := time.Now().Add(-time.Hour).Truncate(time.Second)
	step := func(i int) time.Time { return base.Add(time.Duration(i) * 10 * time.Microsecond) }
	var due []time.Time
	for i := range 100 {
		due = append(due, step(i))
	}
	writeDue(t, store, due)
	first := claimFor(t, store, 30) // the 30 first
	claimFor(t, store, 30)          // the next 30
	due = due[:0]
	for i := range 5 {
		due = append(due, step(10+i).Add(5*time.Microsecond)) // within first's span
	}
	writeDue(t, store, due)
	if got := claimFor(t, store, 100); len(got.msgs) != 45 {
		t.Fatalf("a claim beside two open claims of 30 of 100 messages, 5 more written within their spans, got %d; want the 45 free", len(got.msgs))
	}
	released := first.msgs[10:20]
	settle := outboxdriver.Settlement{Token: first.token, Release: ids(released)}
	for _, m := range first.msgs {
		if !slices.Contains(settle.Release, m.ID) {
			settle.Published = append(settle.Published, m.ID)
		}
	}
	if _, err := store.SettleAndClaim(t.Context(), settle, outboxdriver.Claim{}); err != nil {
		t.Fatalf("settle: %v", err)
	}
	due = due[:0]
	for i := range 100 {
		due = append(due, step(1000+i)) // after every span
	}
	writeDue(t, store, due)
	got := claimFor(t, store, len(released))
	for i, m := range got.msgs {
		if m.ID != released[i].ID {
			t.Fatalf("a claim of %d after a claim released %d of its messages got %v; want the released ones, due first, %v", len(released), len(released), ids(got.msgs), ids(released))
		}
	}
}

// claimed is what claimFor claimed, under token.
type claimed struct {
	token uuid.UUID
	msgs  []outbox.Message
}

// claimFor claims up to limit messages from store, leased for a minute.
func claimFor(t *testing.T, store *outboxpg.Store, limit int) claimed {
	t.Helper()
	c := claimed{token: uuid.New()}
	var err error
	c.msgs, err = store.SettleAndClaim(t.Context(), outboxdriver.Settlement{}, outboxdriver.Claim{Token: c.token, Limit: limit, Lease: time.Minute})
	if err != nil {
		t.Fatalf("claim: %v", err)
	}
	return c
}

// writeDue writes a message due at each of due, in one transaction.
func writeDue(t *testing.T, store *outboxpg.Store, due []time.Time) {
	t.Helper()
	w := newWriter(t, store)
	msgs := make([]*outbox.Message, len(due))
	for i, at := range due {
		msgs[i] = &outbox.Message{Topic: "orders", AvailableAt: at}
	}
	ctx := t.Context()
	if err := w.Transact(ctx, func(tx pgx.Tx) error { return w.Write(ctx, tx, msgs...) }); err != nil {
		t.Fatalf("write: %v", err)
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

// A claim that stays open long (its publisher stalled until the lease
// ends) is not passed over for long: a free message within its span is
// claimed after a few more claims of the store, although the other
// workers' claims keep finding work after the spans.
func TestTransactionLeaseClaimsStopPassingOverAClaimThatStaysOpen(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	store := newStore(t, pool, outboxpg.Options{TransactionLeases: true})
	t.Cleanup(func() { outboxpg.RollBackOpenClaims(store) })
	base := time.Now().Add(-time.Hour).Truncate(time.Second)
	step := func(i int) time.Time { return base.Add(time.Duration(i) * 10 * time.Microsecond) }
	var due []time.Time
	for i := range 300 {
		due = append(due, step(i))
	}
	writeDue(t, store, due)
	claimFor(t, store, 30) // stays open
	late := step(10).Add(5 * time.Microsecond)
	writeDue(t, store, []time.Time{late})
	const claims = 10
	for range claims {
		c := claimFor(t, store, 10)
		settle := outboxdriver.Settlement{Token: c.token, Published: ids(c.msgs)}
		if _, err := store.SettleAndClaim(t.Context(), settle, outboxdriver.Claim{}); err != nil {
			t.Fatalf("settle: %v", err)
		}
		for _, m := range c.msgs {
			if m.AvailableAt.Equal(late) {
				return
			}
		}
	}
	t.Fatalf("a message written late within the span of a claim that stays open was not claimed in %d claims of 10 while 270 others were free; want it within a few", claims)
}
