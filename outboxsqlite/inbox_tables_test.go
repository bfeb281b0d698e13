package outboxsqlite_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/outboxdriver"
	"github.com/go-outbox/outbox/outboxsqlite"
)

// A handler may write to several outbox tables of the file: its record is
// kept while a message in any of them is pending, not only in the first it
// wrote to or the Store's. Each table's message is published first in turn,
// so a record that kept either table alone would be purged too early.
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
	store := newStore(t, outboxsqlite.Options{})
	opts := outboxsqlite.Options{Table: randomTable()}
	m, err := outboxsqlite.NewMigrator(store.DB(), opts)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Up(t.Context()); err != nil {
		t.Fatal(err)
	}
	other, err := outboxsqlite.New(store.DB(), opts)
	if err != nil {
		t.Fatal(err)
	}
	table := migratedInbox(t, store)
	in, err := outbox.NewInbox(table, "billing")
	if err != nil {
		t.Fatal(err)
	}
	// The other table first: the record must not depend on which table
	// is the inbox's Store.
	w, w2 := newWriter(t, other), newWriter(t, store)
	first := &outbox.Message{Topic: "audit.logged", Payload: []byte("{}")}
	second := &outbox.Message{Topic: "invoices.sent", Payload: []byte("{}")}
	id := uuid.Must(uuid.NewV7())
	if applied, err := in.Handle(t.Context(), id, func(ctx context.Context, tx *sql.Tx) error {
		if err := w.Write(ctx, tx, first); err != nil {
			return err
		}
		return w2.Write(ctx, tx, second)
	}); err != nil || !applied {
		t.Fatalf("handle message %s writing to two outbox tables: applied %v, %v", id, applied, err)
	}
	early, late, earlyID, lateID := outboxdriver.Store(store), outboxdriver.Store(other), second.ID, first.ID
	if (early.Name() < late.Name()) != firstByName {
		early, late, earlyID, lateID = other, store, first.ID, second.ID
	}
	publishOne(t, early, earlyID)
	for i := range 2 {
		if n, err := outbox.PurgeInboxOnce(t.Context(), table, 0, 100); err != nil || n != 0 {
			t.Fatalf("purge %d with %s pending in %s: %d deleted, %v; want the record of %s kept", i+1, lateID, late.Name(), n, err, id)
		}
	}
	if applied, err := in.Handle(t.Context(), id, func(context.Context, *sql.Tx) error { return nil }); err != nil || applied {
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

// A record written by a release that knew only the Store's outbox table
// (outgoing, no outbox_tables) still waits for that table's messages, and
// is purged once they are published.
func TestInboxRecordOfAnOlderReleaseWaitsForTheStoresTable(t *testing.T) {
	t.Parallel()
	store := newStore(t, outboxsqlite.Options{})
	table := migratedInbox(t, store)
	out := &outbox.Message{Topic: "invoices.sent", Payload: []byte("{}")}
	w := newWriter(t, store)
	if err := w.Transact(t.Context(), func(ctx context.Context, tx *sql.Tx) error { return w.Write(t.Context(), tx, out) }); err != nil {
		t.Fatal(err)
	}
	id := uuid.Must(uuid.NewV7())
	if _, err := store.DB().ExecContext(t.Context(), `INSERT INTO processed_messages (consumer, message_id, processed_at, outgoing) VALUES ('billing', ?1, 1, json_array(?2))`,
		id.String(), out.ID.String()); err != nil {
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
