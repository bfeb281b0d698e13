package outboxsqlite_test

import (
	"testing"

	"github.com/google/uuid"

	"github.com/go-outbox/outbox"

	"github.com/go-outbox/outbox/outboxsqlite"
)

// A retry requested of a taken message by a client that does not know of
// taken messages (an older CLI or console sets retry_requested alone) must
// not hand the message to a second process while the first has it in its
// handler: take and next leave taken messages alone.
func TestInboxParkedTakenMessageRequestedByAnOlderClientIsNotTakenAgain(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	store := newStore(t, outboxsqlite.Options{})
	tb := migratedInbox(t, store)
	m1, m2 := parkedKeyMessage("order-1"), parkedKeyMessage("order-1")
	if err := tb.Park(ctx, "billing", m1, 5, "no such customer"); err != nil {
		t.Fatalf("park %s: %v", m1.ID, err)
	}
	if _, err := tb.ParkBehind(ctx, "billing", m2); err != nil {
		t.Fatalf("park %s behind %s: %v", m2.ID, m1.ID, err)
	}
	if _, err := tb.RequestRetry(ctx, "billing", m1.ID); err != nil {
		t.Fatalf("request the retry of %s: %v", m1.ID, err)
	}
	if got, err := tb.TakeRetries(ctx, "billing", 10); err != nil || len(got) != 1 {
		t.Fatalf("take the retry of %s: %v, %v", m1.ID, got, err)
	}
	if _, err := tb.UnparkRetried(ctx, "billing", m1.ID, mustParked(t, tb, m1.ID).TakenAt); err != nil {
		t.Fatalf("unpark %s: %v", m1.ID, err)
	}
	if _, ok, err := tb.TakeNextWaiting(ctx, "billing", "order-1"); err != nil || !ok {
		t.Fatalf("take the next of order-1, %s: %v, %v", m2.ID, ok, err)
	}
	// m2 is in its handler; an older client requests it again.
	if _, err := store.DB().ExecContext(ctx, `UPDATE `+tb.ParkedName()+` SET retry_requested = 1`); err != nil {
		t.Fatalf("request every retry as an older client: %v", err)
	}
	if got, err := tb.TakeRetries(ctx, "billing", 10); err != nil || len(got) != 0 {
		t.Fatalf("retries taken while %s is in its handler and requested by an older client: %v, %v; want none", m2.ID, got, err)
	}
	if m, ok, err := tb.TakeNextWaiting(ctx, "billing", "order-1"); err != nil || ok {
		t.Fatalf("next of order-1 taken while %s is in its handler and requested by an older client: %s, %v, %v; want none", m2.ID, m.ID, ok, err)
	}
}

func mustParked(t *testing.T, tb *outboxsqlite.InboxTable, id uuid.UUID) outbox.ParkedMessage {
	t.Helper()
	p, err := tb.GetParked(t.Context(), "billing", id)
	if err != nil {
		t.Fatalf("get parked message %s: %v", id, err)
	}
	return p
}

func parkedKeyMessage(key string) outbox.Message {
	return outbox.Message{ID: uuid.Must(uuid.NewV7()), Topic: "orders", Key: key, Payload: []byte(`{}`)}
}
