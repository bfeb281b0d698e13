package outboxmysql_test

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/go-outbox/outbox"

	"github.com/go-outbox/outbox/internal/mysqltest"
	"github.com/go-outbox/outbox/outboxdriver"
	"github.com/go-outbox/outbox/outboxmysql"
	"github.com/go-outbox/outbox/relaytest"
	"github.com/go-outbox/outbox/storetest"
)

// TestConformanceWithTransactionLeases runs the suite with claims held in
// a transaction (Options.TransactionLeases).
func TestConformanceWithTransactionLeases(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T) storetest.Harness {
		return heldHarness(t, newStore(t, outboxmysql.Options{TransactionLeases: true}))
	})
}

// TestModelOfTheStoreContractWithTransactionLeases runs storetest.RunModel
// with claims held in transactions.
func TestModelOfTheStoreContractWithTransactionLeases(t *testing.T) {
	t.Parallel()
	storetest.RunModel(t, func(t *testing.T) storetest.ModelHarness {
		db := mysqltest.DB(t)
		return modelHarness(t, db, migrated(t, db, outboxmysql.Options{Table: randomTable(), TransactionLeases: true}))
	})
}

// TestRelayWithTransactionLeases runs the relay suite on stores whose
// claims hold their rows in a transaction.
func TestRelayWithTransactionLeases(t *testing.T) {
	t.Parallel()
	relaytest.Run(t, func(t *testing.T) relaytest.Harness {
		return relayHarnessWith(t, outboxmysql.Options{TransactionLeases: true})
	})
}

// heldHarness is harness for a store with TransactionLeases: it counts the
// messages held claims hold.
func heldHarness(t *testing.T, store *outboxmysql.Store) storetest.Harness {
	h := harness(t, store)
	h.CountHeld = countHeld(store.DB(), store.Name())
	return h
}

// countHeld is storetest.Harness.CountHeld for the table: the pending rows
// that another transaction holds locked, which a locking read that skips
// locked rows does not return.
func countHeld(db *sql.DB, table string) func(ctx context.Context) (int64, error) {
	q := "`" + table + "`"
	return func(ctx context.Context) (int64, error) {
		tx, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
		if err != nil {
			return 0, err
		}
		defer tx.Rollback()
		var all, free int64
		if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM `+q+` WHERE status = 'pending'`).Scan(&all); err != nil {
			return 0, err
		}
		rows, err := tx.QueryContext(ctx, `SELECT id FROM `+q+` WHERE status = 'pending' FOR UPDATE SKIP LOCKED`)
		if err != nil {
			return 0, err
		}
		defer rows.Close()
		for rows.Next() {
			free++
		}
		return all - free, rows.Err()
	}
}

// TestALeasedSettlementOnASmallTableDoesNotWaitForAHeldClaimOfOtherRows:
// on a table of ten rows the optimizer would rather scan than look ten ids
// up, and a DELETE that scans waits for every row another transaction
// locks. Messages leased by their columns beside a held claim (as
// Relay.PublishNow leases them) are settled at once, not when the held
// claim ends.
func TestALeasedSettlementOnASmallTableDoesNotWaitForAHeldClaimOfOtherRows(t *testing.T) {
	t.Parallel()
	store := newStore(t, outboxmysql.Options{TransactionLeases: true})
	w := newWriter(t, store)
	msgs := make([]*outbox.Message, 10)
	for i := range msgs {
		msgs[i] = &outbox.Message{Topic: "orders.small", Key: fmt.Sprint("k", i), Payload: []byte("x")}
	}
	ctx := t.Context()
	if err := w.Transact(ctx, func(ctx context.Context, tx *sql.Tx) error { return w.Write(ctx, tx, msgs...) }); err != nil {
		t.Fatal(err)
	}
	held, err := store.SettleAndClaim(ctx, outboxdriver.Settlement{}, outboxdriver.Claim{Limit: 2, Lease: time.Minute, Token: uuid.New()})
	if err != nil || len(held) != 2 {
		t.Fatalf("held claim: %d messages, %v; want 2", len(held), err)
	}
	var others []uuid.UUID
	for _, m := range msgs {
		if m.ID != held[0].ID && m.ID != held[1].ID {
			others = append(others, m.ID)
		}
	}
	token := uuid.New()
	leased, err := store.ClaimIDs(ctx, others, outboxdriver.Claim{Lease: time.Minute, Token: token})
	if err != nil || len(leased) != len(others) {
		t.Fatalf("claim by id: %d messages, %v; want %d", len(leased), err, len(others))
	}
	settleCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := store.SettleAndClaim(settleCtx, outboxdriver.Settlement{Token: token, Published: others}, outboxdriver.Claim{}); err != nil {
		t.Fatalf("settling %d messages leased by their columns beside a held claim of 2 others: %v; want it done at once", len(others), err)
	}
	st, err := store.Stats(ctx)
	if err != nil || st.Pending != 2 {
		t.Fatalf("stats: %+v, %v; want the 2 held messages pending, the rest gone", st, err)
	}
}

// TestALateLeasedSettlementOfARowAHeldClaimTookOverWaitsForIt: a message
// leased by its columns whose lease lapsed is claimed by a held claim; its
// first owner then settles it late (a retry, after deleting the rest of its
// batch). That settlement must wait for the held claim's row without
// holding an index entry the held claim's settlement deletes: through
// status_idx it did, the two deadlocked, and the held claim lost (its
// batch published again).
func TestALateLeasedSettlementOfARowAHeldClaimTookOverWaitsForIt(t *testing.T) {
	t.Parallel()
	db := mysqltest.DB(t)
	held := migrated(t, db, outboxmysql.Options{Table: randomTable(), TransactionLeases: true})
	leased, err := outboxmysql.New(db, outboxmysql.Options{Table: held.Name()})
	if err != nil {
		t.Fatal(err)
	}
	w := newWriter(t, held)
	ctx := t.Context()
	msgs := make([]*outbox.Message, 31)
	for i := range msgs {
		msgs[i] = &outbox.Message{Topic: "orders.late", Key: fmt.Sprint("k", i), Payload: []byte("x")}
	}
	if err := w.Transact(ctx, func(ctx context.Context, tx *sql.Tx) error { return w.Write(ctx, tx, msgs...) }); err != nil {
		t.Fatal(err)
	}
	first := uuid.New()
	claimed, err := leased.SettleAndClaim(ctx, outboxdriver.Settlement{}, outboxdriver.Claim{Limit: 31, Lease: 200 * time.Millisecond, Token: first})
	if err != nil || len(claimed) != 31 {
		t.Fatalf("leased claim: %d messages, %v; want 31", len(claimed), err)
	}
	// The lease lapses; a held claim takes the first message.
	second := uuid.New()
	var took []outbox.Message
	deadline := time.Now().Add(10 * time.Second)
	for len(took) == 0 && time.Now().Before(deadline) {
		if took, err = held.SettleAndClaim(ctx, outboxdriver.Settlement{}, outboxdriver.Claim{Limit: 1, Lease: time.Minute, Token: second}); err != nil {
			t.Fatal(err)
		}
	}
	if len(took) != 1 {
		t.Fatal("no held claim took a message whose lease lapsed")
	}
	x := took[0].ID
	var rest []uuid.UUID
	for _, m := range claimed {
		if m.ID != x {
			rest = append(rest, m.ID)
		}
	}
	late := make(chan error, 1)
	go func() {
		_, err := leased.SettleAndClaim(ctx, outboxdriver.Settlement{Token: first, Published: rest,
			Retry: []outboxdriver.Retry{{ID: x, Delay: time.Second, Error: "late"}}}, outboxdriver.Claim{})
		late <- err
	}()
	// The late settlement waits for the held row: a statement of it on
	// this small table runs for 200 ms. (INNODB_TRX does not always show
	// the wait as one.)
	for {
		var waiting int
		if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM information_schema.PROCESSLIST
WHERE COMMAND = 'Query' AND TIME_MS > 200 AND INFO LIKE ? AND INFO NOT LIKE '%PROCESSLIST%'`, "%"+held.Name()+"%").Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting > 0 {
			break
		}
		select {
		case err := <-late:
			t.Fatalf("the late settlement returned %v without waiting for the held claim's row", err)
		case <-time.After(5 * time.Millisecond):
		}
	}
	if _, err := held.SettleAndClaim(ctx, outboxdriver.Settlement{Token: second, Published: []uuid.UUID{x}}, outboxdriver.Claim{}); err != nil {
		t.Fatalf("the held claim's settlement beside a late leased settlement of its row: %v; want it recorded", err)
	}
	if err := <-late; err != nil {
		t.Fatalf("late leased settlement: %v", err)
	}
	if st, err := held.Stats(ctx); err != nil || st.Pending != 0 {
		t.Fatalf("stats: %+v, %v; want every message gone (the held claim published the retried one)", st, err)
	}
}
