package main

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/go-outbox/outbox/internal/amqptest"
	"github.com/go-outbox/outbox/outboxpg"
	"github.com/go-outbox/outbox/outboxpg/outboxpgtest"
	"github.com/go-outbox/outbox/outboxtest"
	"github.com/go-outbox/outbox/relaytest"
)

// newDatabase gives the test a database of its own, with the outbox, the
// inbox and the service's tables (outboxpgtest: a copy of a template).
func newDatabase(t *testing.T) *outboxpgtest.Database {
	return outboxpgtest.NewDatabase(t, outboxpgtest.Config{Inbox: &outboxpg.InboxOptions{}, Setup: CreateTables})
}

// The whole service, against PostgreSQL and RabbitMQ: each handler applies
// each event once, and an order's events in order.
func TestTheServiceRelaysItsEventsToRabbitMQAndItsHandlersApplyEachOnce(t *testing.T) {
	db := newDatabase(t)
	url := amqptest.URL(t)
	name := "ordersvc-test-" + randomHex(t)
	t.Cleanup(func() { deleteQueueAndExchange(t, url, name) })

	var out bytes.Buffer
	cfg := Config{AMQPURL: url, Exchange: name, Queue: name, Logger: relaytest.TestLogger(t)}
	if err := demo(t.Context(), db.Pool, cfg, &out); err != nil {
		t.Fatal(err)
	}
	want := `order o-1: ada@example.com, 4200 cents, paid
order o-2: bob@example.com, 1999 cents, placed
mail to ada@example.com: Your order o-1
mail to bob@example.com: Your order o-2
mail to ada@example.com: Payment received for order o-1
`
	if got := out.String(); !sameLines(got, want) {
		t.Fatalf("the service printed:\n%s\nwant (mails of different orders in any order, each order's in order):\n%s", got, want)
	}
	if !before(out.String(), "Your order o-1", "Payment received for order o-1") {
		t.Fatalf("the mailer sent o-1's payment mail before its order mail:\n%s", out.String())
	}
}

// The application's own test with the test kit: paying an order twice
// writes OrderPaid once, keyed by the order, in the payment's transaction.
func TestPayingAnOrderTwiceWritesOrderPaidOnce(t *testing.T) {
	db := newDatabase(t)
	svc, err := NewService(db.Pool)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	if err := svc.PlaceOrder(ctx, "o-7", "ada@example.com", 4200); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := svc.PayOrder(ctx, "o-7"); err != nil {
			t.Fatal(err)
		}
	}
	outboxtest.RequireWritten(t, db,
		outboxtest.Match{Topic: "orders.placed", Key: "o-7"},
		outboxtest.Match{Topic: "orders.paid", Key: "o-7"},
	)
	paid, _ := outboxtest.RequireEvent(t, db, svc.events, func(e OrderPaid) bool { return e.OrderID == "o-7" })
	if paid.Customer != "ada@example.com" {
		t.Fatalf("OrderPaid %+v; want the order's customer, loaded in the transaction", paid)
	}
	if err := svc.PayOrder(ctx, "o-404"); err == nil || !strings.Contains(err.Error(), "no such order") {
		t.Fatalf("paying a missing order: %v; want no such order", err)
	}
}

// The consumer's handlers alone, with the test kit's deliveries: an event
// delivered twice (the broker's redelivery) sends one mail.
func TestTheHandlersApplyARedeliveredEventOnce(t *testing.T) {
	db := newDatabase(t)
	reg := Events()
	d, err := NewDispatcher(reg, db.Inbox, relaytest.TestLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	placed, err := reg.Message(OrderPlaced{OrderID: "o-9", Customer: "bob@example.com", TotalCents: 1999}, "o-9")
	if err != nil {
		t.Fatal(err)
	}
	for _, got := range outboxtest.DeliverWith(t, d.Deliver, outboxtest.DeliverConfig{Copies: 2}, *placed) {
		if got.Acked != 2 || got.Parked != 0 {
			t.Fatalf("delivery %+v; want both copies acknowledged", got)
		}
	}
	var mails int
	if err := db.Pool.QueryRow(t.Context(), `SELECT count(*) FROM sent_mails`).Scan(&mails); err != nil {
		t.Fatal(err)
	}
	if mails != 1 {
		t.Fatalf("%d mails sent for an event delivered twice; want 1", mails)
	}
}

func sameLines(a, b string) bool {
	la, lb := strings.Split(a, "\n"), strings.Split(b, "\n")
	if len(la) != len(lb) {
		return false
	}
	seen := map[string]int{}
	for _, l := range la {
		seen[l]++
	}
	for _, l := range lb {
		seen[l]--
	}
	for _, n := range seen {
		if n != 0 {
			return false
		}
	}
	return true
}

func before(s, first, then string) bool {
	i, j := strings.Index(s, first), strings.Index(s, then)
	return i >= 0 && j > i
}

func randomHex(t *testing.T) string {
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b[:])
}

func deleteQueueAndExchange(t *testing.T, url, name string) {
	conn, err := amqp.DialConfig(url, amqp.Config{Dial: amqp.DefaultDial(10 * time.Second)})
	if err != nil {
		t.Logf("cleanup: %v", err)
		return
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return
	}
	_, _ = ch.QueueDelete(name, false, false, false)
	_ = ch.ExchangeDelete(name, false, false)
}
