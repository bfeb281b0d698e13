package outboxevents_test

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/google/uuid"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/outboxevents"
)

// An aggregate raises events without knowing the outbox: it embeds a
// Recorder. Its id keys its events.
type Order struct {
	outboxevents.Recorder
	ID    string
	Total int
}

func (o *Order) Place(total int) {
	o.Total = total
	o.Record(OrderPlaced{OrderID: o.ID, TotalCents: total})
}

func (o *Order) EventKey() string { return o.ID }

func ExampleRegistry() {
	reg := outboxevents.NewRegistry(outboxevents.Options{Source: "/orders-service"})
	outboxevents.MustRegister[OrderPlaced](reg, "orders.placed")

	order := &Order{ID: "o-1"}
	order.Place(1250)
	for _, event := range order.RecordedEvents() {
		m, err := reg.Message(event, order.EventKey())
		if err != nil {
			panic(err)
		}
		fmt.Println(m.Topic, m.Key, string(m.Payload))
		fmt.Println(m.Headers["ce-type"], m.Headers["ce-source"], m.Headers["content-type"])

		// A consumer, here or in another service, decodes with the same
		// registry.
		decoded, name, err := reg.Decode(*m)
		fmt.Printf("%s %+v %v\n", name, decoded, err)
	}
	// Output:
	// orders.placed o-1 {"order_id":"o-1","total_cents":1250}
	// orders.placed /orders-service application/json
	// orders.placed {OrderID:o-1 TotalCents:1250} <nil>
}

func ExampleDispatcher() {
	reg := outboxevents.NewRegistry(outboxevents.Options{})
	outboxevents.MustRegister[OrderPlaced](reg, "orders.placed")

	// An inbox table of the handlers' database (outboxpg.NewInboxTable,
	// outboxsqlite.NewInboxTable); a map stands in for it here.
	d, err := outboxevents.NewDispatcher(reg, newMapInbox())
	if err != nil {
		panic(err)
	}
	mails := 0
	_ = outboxevents.Handle(d, "read-model", func(ctx context.Context, tx *mapTx, e OrderPlaced) error {
		fmt.Println("read model: order", e.OrderID, "total", e.TotalCents)
		return nil
	})
	_ = outboxevents.Handle(d, "welcome-mail", func(ctx context.Context, tx *mapTx, e OrderPlaced) error {
		if mails++; mails == 1 {
			return errors.New("mail server busy")
		}
		fmt.Println("mail: thank you for order", e.OrderID)
		return nil
	})

	m, _ := reg.Message(OrderPlaced{OrderID: "o-1", TotalCents: 1250}, "o-1")
	// The relay calls Publish; the first try fails in the mail handler, the
	// retry runs only that handler.
	fmt.Println(d.Publish(context.Background(), []outbox.Message{*m})[0] != nil)
	fmt.Println(d.Publish(context.Background(), []outbox.Message{*m})[0])
	// Output:
	// read model: order o-1 total 1250
	// true
	// mail: thank you for order o-1
	// <nil>
}

// mapInbox is an in-memory outbox.InboxStore for the example.
type mapInbox struct {
	mu   sync.Mutex
	done map[string]bool
}

type mapTx struct{ marks []string }

func newMapInbox() *mapInbox { return &mapInbox{done: map[string]bool{}} }

func (s *mapInbox) RunInTx(ctx context.Context, fn func(tx *mapTx) error) error {
	tx := &mapTx{}
	if err := fn(tx); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, k := range tx.marks {
		s.done[k] = true
	}
	return nil
}

func (s *mapInbox) MarkProcessed(ctx context.Context, tx *mapTx, consumer string, id uuid.UUID) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	key := consumer + "/" + id.String()
	if s.done[key] {
		return false, nil
	}
	tx.marks = append(tx.marks, key)
	return true, nil
}
