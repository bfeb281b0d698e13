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
	"github.com/go-outbox/outbox/relaytest"
)

// A relay that skips dead messages in key order counts the messages that
// overtake them in the column migration 6 adds: on a table without it, it
// refuses to start and names the fix. Other relays, and the dead-letter
// commands, keep working there: Get and ListDead read 0, since nothing
// counted, and a retry unless overtaken retries.
func TestOnlyARelaySkippingDeadMessagesNeedsMigrationSix(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	schema := pgtest.Schema(t)
	m, err := outboxpg.NewMigrator(pool, outboxpg.Options{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.To(t.Context(), 5); err != nil {
		t.Fatal(err)
	}
	skipping, err := outboxpg.New(pool, outboxpg.Options{Schema: schema, OrderByKey: true, SkipDeadInKeyOrder: true})
	if err != nil {
		t.Fatal(err)
	}
	relaytest.RequireRunRefuses(t, skipping, skipping.Name(), "at an older migration", "overtaken")
	holding, err := outboxpg.New(pool, outboxpg.Options{Schema: schema, OrderByKey: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := holding.CheckSchema(t.Context()); err != nil {
		t.Fatalf("CheckSchema at migration 5 of a store that holds keys behind dead messages: %v; want nil", err)
	}

	msg := &outbox.Message{Topic: "orders", Key: "order-1", Payload: []byte(`{}`)}
	w := newWriter(t, holding)
	if err := w.Transact(t.Context(), func(ctx context.Context, tx pgx.Tx) error { return w.Write(t.Context(), tx, msg) }); err != nil {
		t.Fatal(err)
	}
	token := uuid.New()
	if got, err := holding.SettleAndClaim(t.Context(), outboxdriver.Settlement{}, outboxdriver.Claim{Limit: 1, Lease: time.Minute, Token: token}); err != nil || len(got) != 1 {
		t.Fatalf("claim: %v, %v; want the message", got, err)
	}
	if _, err := holding.SettleAndClaim(t.Context(), outboxdriver.Settlement{Token: token, Dead: []outboxdriver.Failure{{ID: msg.ID, Error: "rejected"}}}, outboxdriver.Claim{}); err != nil {
		t.Fatal(err)
	}
	if dead, err := holding.ListDead(t.Context(), uuid.Nil, 10); err != nil || len(dead) != 1 || dead[0].ID != msg.ID || dead[0].Overtaken != 0 {
		t.Fatalf("list dead at migration 5: %+v, %v; want %s, overtaken 0", dead, err, msg.ID)
	}
	if got, err := holding.Get(t.Context(), msg.ID); err != nil || got.Status != outbox.StatusDead || got.Overtaken != 0 {
		t.Fatalf("get at migration 5: %+v, %v; want it dead, overtaken 0", got, err)
	}
	if n, overtaken, err := holding.RetryDeadUnlessOvertaken(t.Context(), []uuid.UUID{msg.ID}, false); err != nil || n != 1 || len(overtaken) != 0 {
		t.Fatalf("retry unless overtaken at migration 5: %d retried, overtaken %v, %v; want 1 retried, none overtaken", n, overtaken, err)
	}
	if got, err := holding.Get(t.Context(), msg.ID); err != nil || got.Status != outbox.StatusPending {
		t.Fatalf("get at migration 5 after the retry: %+v, %v; want it pending", got, err)
	}

	if _, err := m.Up(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := skipping.CheckSchema(t.Context()); err != nil {
		t.Fatalf("CheckSchema of a store skipping dead messages after migrate up: %v", err)
	}
}
