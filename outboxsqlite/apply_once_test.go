package outboxsqlite_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/outboxsqlite"
	"github.com/go-outbox/outbox/outboxtest"
	"github.com/go-outbox/outbox/publishertest"
)

// outbox.ApplyOnce names its inbox after the consumer the adapter (here the
// test kit, as an adapter does) puts in the context: each consumer applies
// a redelivered message once, under its own name, and a handler called
// without a consumer name fails with the fix.
func TestApplyOnceAppliesEachMessageOncePerConsumerNamedByTheAdapter(t *testing.T) {
	t.Parallel()
	store := newStore(t, outboxsqlite.Options{})
	table := migratedInbox(t, store)
	applied := map[string]int{}
	handle := outbox.ApplyOnce(table, func(ctx context.Context, _ *sql.Tx, _ outbox.Message) error {
		consumer, _ := outbox.ConsumerName(ctx)
		applied[consumer]++
		return nil
	})
	m := publishertest.Messages("orders.paid", 1)[0]
	for _, consumer := range []string{"billing", "shipping"} {
		for _, got := range outboxtest.DeliverWith(t, handle, outboxtest.DeliverConfig{Consumer: consumer, Copies: 3}, m) {
			if got.Acked != 3 {
				t.Fatalf("%s: %+v; want the 3 copies acknowledged", consumer, got)
			}
		}
	}
	if applied["billing"] != 1 || applied["shipping"] != 1 {
		t.Fatalf("applied %v; want the message once per consumer", applied)
	}
	var records int
	if err := store.DB().QueryRowContext(t.Context(), `SELECT count(*) FROM `+table.Name()+` WHERE consumer IN ('billing', 'shipping')`).Scan(&records); err != nil {
		t.Fatal(err)
	}
	if records != 2 {
		t.Fatalf("%d inbox records under billing and shipping; want one each", records)
	}
	var cfgErr *outbox.ConfigError
	if err := handle(t.Context(), m); !errors.As(err, &cfgErr) {
		t.Fatalf("ApplyOnce's handler called with no consumer name: %v; want a *outbox.ConfigError", err)
	}
	// A name the inbox refuses: unavailable, so the adapter waits and
	// parks nothing until it is fixed.
	long := outbox.WithConsumerName(t.Context(), strings.Repeat("x", outbox.MaxConsumerLength+1))
	if err := handle(long, m); !outbox.IsUnavailable(err) || !errors.As(err, &cfgErr) {
		t.Fatalf("ApplyOnce under a consumer name over MaxConsumerLength: %v; want an unavailable *outbox.ConfigError", err)
	}
}
