package outboxpg_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/pgtest"
	"github.com/go-outbox/outbox/outboxdriver"
	"github.com/go-outbox/outbox/outboxpg"
)

// A handler may write to several outbox tables: its record is kept while a
// message in any of them is pending, not only in the first it wrote to or
// the inbox's own. The inbox records the tables in the order of their names:
// the message of the table it records first is published first, then that
// of the other, so a record that kept either table alone would be purged
// too early.
func TestInboxRecordWaitsForEveryOutboxTableItsHandlerWroteTo(t *testing.T) {
	t.Parallel()
	for _, publishFirst := range []string{"first by name", "last by name"} {
		t.Run("the table "+publishFirst+" published first", func(t *testing.T) {
			t.Parallel()
			testInboxRecordWaitsForBothTables(t, publishFirst == "first by name")
		})
	}
}

func testInboxRecordWaitsForBothTables(t *testing.T, firstByName bool) {
	store, table := newOutboxAndInbox(t)
	other := newStore(t, pgtest.Pool(t), outboxpg.Options{})
	in, err := outbox.NewInbox(table, "billing")
	if err != nil {
		t.Fatal(err)
	}
	w, w2 := newWriter(t, store), newWriter(t, other)
	first := &outbox.Message{Topic: "invoices.sent", Payload: []byte("{}")}
	second := &outbox.Message{Topic: "audit.logged", Payload: []byte("{}")}
	id := uuid.Must(uuid.NewV7())
	if applied, err := in.Handle(t.Context(), id, func(ctx context.Context, tx pgx.Tx) error {
		if err := w.Write(ctx, tx, first); err != nil {
			return err
		}
		return w2.Write(ctx, tx, second)
	}); err != nil || !applied {
		t.Fatalf("handle message %s writing to two outbox tables: applied %v, %v", id, applied, err)
	}
	early, late, earlyID, lateID := store, other, first.ID, second.ID
	if (early.Name() < late.Name()) != firstByName {
		early, late, earlyID, lateID = other, store, second.ID, first.ID
	}
	publishOne(t, early, earlyID)
	// Purge twice: the first purge may only start the countdown.
	for i := range 2 {
		if n, err := outbox.PurgeInboxOnce(t.Context(), table, 0, 100); err != nil || n != 0 {
			t.Fatalf("purge %d with %s pending in %s: %d deleted, %v; want the record of %s kept", i+1, lateID, late.Name(), n, err, id)
		}
	}
	if applied, err := in.Handle(t.Context(), id, func(context.Context, pgx.Tx) error { return nil }); err != nil || applied {
		t.Fatalf("redelivery of %s while %s is pending: applied %v, %v; want skipped", id, lateID, applied, err)
	}
	publishOne(t, late, lateID)
	deadline := time.Now().Add(10 * time.Second)
	for deleted := 0; deleted == 0; {
		n, err := outbox.PurgeInboxOnce(t.Context(), table, 0, 100)
		if err != nil {
			t.Fatalf("purge after both outgoing messages were published: %v", err)
		}
		if deleted += n; deleted == 0 && time.Now().After(deadline) {
			t.Fatalf("the record of %s was not purged in 10s after both outgoing messages were published", id)
		}
	}
}

// publishOne claims id, the only pending message of store, and settles it as
// published, as a relay would.
func publishOne(t *testing.T, store outboxdriver.Store, id uuid.UUID) {
	t.Helper()
	token := uuid.Must(uuid.NewV7())
	claimed, err := store.SettleAndClaim(t.Context(), outboxdriver.Settlement{}, outboxdriver.Claim{Limit: 10, Lease: time.Minute, Token: token})
	if err != nil || len(claimed) != 1 || claimed[0].ID != id {
		t.Fatalf("claim %s from %s: %v, %v; want it alone", id, store.Name(), claimed, err)
	}
	if _, err := store.SettleAndClaim(t.Context(), outboxdriver.Settlement{Token: token, Published: []uuid.UUID{id}}, outboxdriver.Claim{}); err != nil {
		t.Fatalf("settle %s as published: %v", id, err)
	}
}

// A record written by a release that knew one outbox table per record
// (outbox_table, no outbox_tables) still waits for that table's messages,
// and is purged once they are published.
func TestInboxRecordOfAnOlderReleaseWaitsForItsOutboxTable(t *testing.T) {
	t.Parallel()
	store, table := newOutboxAndInbox(t)
	pool := pgtest.Pool(t)
	out := &outbox.Message{Topic: "invoices.sent", Payload: []byte("{}")}
	w := newWriter(t, store)
	if err := w.Transact(t.Context(), func(ctx context.Context, tx pgx.Tx) error { return w.Write(t.Context(), tx, out) }); err != nil {
		t.Fatal(err)
	}
	id := uuid.Must(uuid.NewV7())
	if _, err := pool.Exec(t.Context(), `INSERT INTO `+table.Name()+` (consumer, message_id, outgoing, outbox_table) VALUES ('billing', $1, ARRAY[$2::uuid], $3)`,
		id, out.ID, store.Name()); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if n, err := outbox.PurgeInboxOnce(t.Context(), table, 0, 100); err != nil || n != 0 {
			t.Fatalf("purge %d with %s pending: %d deleted, %v; want the older record kept", i+1, out.ID, n, err)
		}
	}
	publishOne(t, store, out.ID)
	deadline := time.Now().Add(10 * time.Second)
	for deleted := 0; deleted == 0; {
		n, err := outbox.PurgeInboxOnce(t.Context(), table, 0, 100)
		if err != nil {
			t.Fatalf("purge after the outgoing message was published: %v", err)
		}
		if deleted += n; deleted == 0 && time.Now().After(deadline) {
			t.Fatalf("the older record of %s was not purged in 10s after its outgoing message was published", id)
		}
	}
}
