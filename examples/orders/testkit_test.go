package main

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-outbox/outbox/outboxevents"
	"github.com/go-outbox/outbox/outboxsqlite/outboxsqlitetest"
	"github.com/go-outbox/outbox/outboxtest"
)

// The application's own test, written with outboxtest: saving a paid order
// writes both of its events in the transaction, and a relay drained at once
// hands them to the handlers, which send one e-mail.
func TestSavingAPaidOrderWritesItsEventsAndTheHandlersSendOneEmail(t *testing.T) {
	ctx := t.Context()
	a, inbox, err := open(ctx, filepath.Join(t.TempDir(), "orders.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer a.store.Close()

	o := PlaceOrder("o-1", "ada@example.com", 4200)
	o.Pay()
	if err := a.save(ctx, o); err != nil {
		t.Fatal(err)
	}
	table := outboxsqlitetest.Table(a.store)
	outboxtest.RequireEvent(t, table, a.events, func(e OrderPlaced) bool { return e.OrderID == "o-1" && e.TotalCents == 4200 })
	_, paid := outboxtest.RequireEvent(t, table, a.events, func(e OrderPaid) bool { return e.OrderID == "o-1" })
	if paid.Key != "o-1" {
		t.Fatalf("OrderPaid has key %q, want the order's id", paid.Key)
	}

	d, err := outboxevents.NewDispatcher(a.events, inbox)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := handlers(d, &out); err != nil {
		t.Fatal(err)
	}
	outboxtest.Drain(t, a.store, d)
	outboxtest.RequireNothingWritten(t, table)
	if n := strings.Count(out.String(), "e-mail to ada@example.com"); n != 1 {
		t.Fatalf("%d e-mails sent, want 1:\n%s", n, out.String())
	}
}
