package outboxmysql_test

import (
	"context"
	"database/sql"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/outboxdriver"
	"github.com/go-outbox/outbox/outboxmysql"
)

// holdClaim runs the store's claim in a transaction with opts and leaves
// the transaction open, holding what the claim locked, until the test ends.
func holdClaim(t *testing.T, store *outboxmysql.Store, opts *sql.TxOptions) int {
	t.Helper()
	tx, err := store.DB().BeginTx(t.Context(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback() })
	rows, err := tx.QueryContext(t.Context(), outboxmysql.ClaimSQL(store), 10)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for rows.Next() {
		n++
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return n
}

// insertWithin writes one message on a connection that waits at most a
// second for a lock, and returns the error.
func insertWithin(t *testing.T, store *outboxmysql.Store) error {
	t.Helper()
	ctx := t.Context()
	c, err := store.DB().Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.ExecContext(ctx, `SET SESSION innodb_lock_wait_timeout = 1`); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_, _ = c.ExecContext(context.WithoutCancel(ctx), `SET SESSION innodb_lock_wait_timeout = DEFAULT`)
	}()
	tx, err := c.BeginTx(ctx, nil) // the server's default isolation, REPEATABLE READ
	if err != nil {
		t.Fatal(err)
	}
	m := newMessages(1)[0]
	if err := store.InsertTx(ctx, tx, []*outbox.Message{m}); err != nil {
		_ = tx.Rollback()
		return err
	}
	return tx.Commit()
}

func newMessages(n int) []*outbox.Message {
	w := make([]*outbox.Message, n)
	for i := range w {
		w[i] = &outbox.Message{ID: uuid.Must(uuid.NewV7()), Topic: "orders.created", Key: "order-1", Payload: []byte(`{}`)}
	}
	return w
}

// A claim that finds fewer due messages than its limit reads past the last
// of them. At REPEATABLE READ its locking read would hold the gap after
// that entry, where every new message is inserted; the store's claims run
// at READ COMMITTED and hold no gap, so a writer's INSERT goes through
// while a claim is open.
func TestAnOpenClaimDoesNotBlockWritersInserts(t *testing.T) {
	t.Parallel()
	store := newStore(t, outboxmysql.Options{})
	w := newWriter(t, store)
	if err := w.Transact(t.Context(), func(ctx context.Context, tx *sql.Tx) error { return w.Write(ctx, tx, newMessages(3)...) }); err != nil {
		t.Fatal(err)
	}
	if n := holdClaim(t, store, outboxmysql.ClaimTxOptions); n != 3 {
		t.Fatalf("the claim read %d messages; want 3", n)
	}
	start := time.Now()
	if err := insertWithin(t, store); err != nil {
		t.Fatalf("a writer's INSERT while a claim is open: %v (after %v); want it to go through", err, time.Since(start))
	}
}

// The control of the test above: the same claim at REPEATABLE READ blocks
// the writer, which is why the store does not claim at that level. If this
// fails, the server no longer takes that gap lock and the isolation of the
// claims may be revisited.
func TestAClaimAtRepeatableReadWouldBlockWritersInserts(t *testing.T) {
	t.Parallel()
	store := newStore(t, outboxmysql.Options{})
	w := newWriter(t, store)
	if err := w.Transact(t.Context(), func(ctx context.Context, tx *sql.Tx) error { return w.Write(ctx, tx, newMessages(3)...) }); err != nil {
		t.Fatal(err)
	}
	holdClaim(t, store, &sql.TxOptions{Isolation: sql.LevelRepeatableRead})
	if err := insertWithin(t, store); err == nil || !strings.Contains(err.Error(), "Lock wait timeout") {
		t.Fatalf("a writer's INSERT while a REPEATABLE READ claim was open: %v; want a lock wait timeout (the claim's gap lock)", err)
	}
}

// A retried head's settlement in key order moves the messages held behind
// it (postponeHeld); a writer's transaction that inserted a message of the
// same key and is still open must not make it wait: waiting, it would leave
// the settlement's published messages unrecorded until their lease ran out
// and another relay published them again.
func TestARetrySettlementInKeyOrderDoesNotWaitForAWritersOpenInsertOfItsKey(t *testing.T) {
	t.Parallel()
	store := newStore(t, outboxmysql.Options{})
	ordered := keyOrdered(t, store, outboxmysql.Options{OrderByKey: true})
	w := newWriter(t, store)
	msgs := newMessages(2) // key order-1
	if err := w.Transact(t.Context(), func(ctx context.Context, tx *sql.Tx) error { return w.Write(ctx, tx, msgs...) }); err != nil {
		t.Fatal(err)
	}
	token := uuid.New()
	claimed, err := ordered.SettleAndClaim(t.Context(), outboxdriver.Settlement{}, outboxdriver.Claim{Limit: 1, Lease: time.Minute, Token: token})
	if err != nil || len(claimed) != 1 || claimed[0].ID != msgs[0].ID {
		t.Fatalf("claim of the key's head = %v, %v; want %s", claimed, err, msgs[0].ID)
	}
	// A writer inserts another message of the key and keeps its
	// transaction open.
	open, err := store.DB().BeginTx(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = open.Rollback() })
	if err := store.InsertTx(t.Context(), open, newMessages(1)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	start := time.Now()
	retry := outboxdriver.Settlement{Token: token, Retry: []outboxdriver.Retry{{ID: msgs[0].ID, Delay: time.Minute, Error: "broker hiccup"}}}
	if _, err := ordered.SettleAndClaim(ctx, retry, outboxdriver.Claim{}); err != nil {
		t.Fatalf("the retry's settlement while a writer's insert of its key is open: %v after %v; want it recorded at once", err, time.Since(start))
	}
	got, err := ordered.Get(t.Context(), msgs[1].ID)
	if err != nil || !got.AvailableAt.After(time.Now().Add(30*time.Second)) {
		t.Fatalf("the committed message behind the retried head: %+v, %v; want it moved behind the head, a minute on", got, err)
	}
}
