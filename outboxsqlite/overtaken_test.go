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
	"github.com/go-outbox/outbox/relaytest"
)

// A relay that skips dead messages in key order counts the messages that
// overtake them in the column migration 5 adds: on a table without it, it
// refuses to start and names the fix. Other relays, and the dead-letter
// commands, keep working there: Get and ListDead read 0, since nothing
// counted, and a retry unless overtaken retries.
func TestOnlyARelaySkippingDeadMessagesNeedsMigrationFive(t *testing.T) {
	t.Parallel()
	plain, opts := openUnmigrated(t)
	m, err := outboxsqlite.NewMigrator(plain.DB(), opts)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.To(t.Context(), 4); err != nil {
		t.Fatal(err)
	}
	with := func(orderByKey, skipDead bool) *outboxsqlite.Store {
		t.Helper()
		s, err := outboxsqlite.New(plain.DB(), outboxsqlite.Options{Table: opts.Table, OrderByKey: orderByKey, SkipDeadInKeyOrder: skipDead})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	skipping, holding := with(true, true), with(true, false)
	relaytest.RequireRunRefuses(t, skipping, skipping.Name(), "at an older migration", "overtaken")
	for name, s := range map[string]*outboxsqlite.Store{"an unordered store": plain, "a store that holds keys behind dead messages": holding} {
		if err := s.CheckSchema(t.Context()); err != nil {
			t.Fatalf("CheckSchema at migration 4 of %s: %v; want nil", name, err)
		}
	}

	msg := &outbox.Message{Topic: "orders", Key: "order-1", Payload: []byte(`{}`)}
	w := newWriter(t, holding)
	if err := w.Transact(t.Context(), func(ctx context.Context, tx *sql.Tx) error { return w.Write(t.Context(), tx, msg) }); err != nil {
		t.Fatal(err)
	}
	token := uuid.New()
	if got, err := holding.SettleAndClaim(t.Context(), outboxdriver.Settlement{}, outboxdriver.Claim{Limit: 1, Lease: time.Minute, Token: token}); err != nil || len(got) != 1 {
		t.Fatalf("claim: %v, %v; want the message", got, err)
	}
	if _, err := holding.SettleAndClaim(t.Context(), outboxdriver.Settlement{Token: token, Dead: []outboxdriver.Failure{{ID: msg.ID, Error: "rejected"}}}, outboxdriver.Claim{}); err != nil {
		t.Fatal(err)
	}
	if dead, err := plain.ListDead(t.Context(), uuid.Nil, 10); err != nil || len(dead) != 1 || dead[0].ID != msg.ID || dead[0].Overtaken != 0 {
		t.Fatalf("list dead at migration 4: %+v, %v; want %s, overtaken 0", dead, err, msg.ID)
	}
	if got, err := plain.Get(t.Context(), msg.ID); err != nil || got.Status != outbox.StatusDead || got.Overtaken != 0 {
		t.Fatalf("get at migration 4: %+v, %v; want it dead, overtaken 0", got, err)
	}
	if n, overtaken, err := plain.RetryDeadUnlessOvertaken(t.Context(), []uuid.UUID{msg.ID}, false); err != nil || n != 1 || len(overtaken) != 0 {
		t.Fatalf("retry unless overtaken at migration 4: %d retried, overtaken %v, %v; want 1 retried, none overtaken", n, overtaken, err)
	}
	if got, err := plain.Get(t.Context(), msg.ID); err != nil || got.Status != outbox.StatusPending {
		t.Fatalf("get at migration 4 after the retry: %+v, %v; want it pending", got, err)
	}

	if _, err := m.Up(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := skipping.CheckSchema(t.Context()); err != nil {
		t.Fatalf("CheckSchema of a store skipping dead messages after migrate up: %v", err)
	}
}
