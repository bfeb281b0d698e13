// Command orders is the outboxevents example: an order aggregate raises
// OrderPlaced and OrderPaid; saving an order writes its events to the outbox
// in the same transaction; a relay in the same process hands each event to
// every handler of its type, each applying it once (a read model, and an
// e-mail). It runs on SQLite in a temporary directory, with nothing to
// install:
//
//	go run ./examples/orders
package main

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"log"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/outboxevents"
	"github.com/go-outbox/outbox/outboxsqlite"
)

// OrderPlaced is raised when a customer places an order.
type OrderPlaced struct {
	OrderID    string `json:"order_id"`
	Customer   string `json:"customer"`
	TotalCents int    `json:"total_cents"`
}

// OrderPaid is raised when an order's payment arrives.
type OrderPaid struct {
	OrderID string `json:"order_id"`
}

// Order is the aggregate. It raises events through the embedded Recorder and
// knows nothing of the outbox.
type Order struct {
	outboxevents.Recorder
	ID         string
	Customer   string
	TotalCents int
	Paid       bool
}

// PlaceOrder creates an order and raises OrderPlaced.
func PlaceOrder(id, customer string, totalCents int) *Order {
	o := &Order{ID: id, Customer: customer, TotalCents: totalCents}
	o.Record(OrderPlaced{OrderID: id, Customer: customer, TotalCents: totalCents})
	return o
}

// Pay marks the order paid and raises OrderPaid, once.
func (o *Order) Pay() {
	if o.Paid {
		return
	}
	o.Paid = true
	o.Record(OrderPaid{OrderID: o.ID})
}

// EventKey keys the order's events by its id, so they keep their order.
func (o *Order) EventKey() string { return o.ID }

func main() {
	dir, err := os.MkdirTemp("", "outbox-orders-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	if err := run(context.Background(), filepath.Join(dir, "orders.db"), os.Stdout); err != nil {
		log.Fatal(err)
	}
}

// app holds the example's database and its outbox.
type app struct {
	store  *outboxsqlite.Store
	writer *outbox.Writer[*sql.Tx]
	events *outboxevents.Registry
}

// run sets everything up, places and pays orders, and prints what the
// handlers did.
func run(ctx context.Context, path string, out io.Writer) error {
	a, inbox, err := open(ctx, path)
	if err != nil {
		return err
	}
	defer a.store.Close()

	d, err := outboxevents.NewDispatcher(a.events, inbox)
	if err != nil {
		return err
	}
	if err := handlers(d, out); err != nil {
		return err
	}
	relay, err := outbox.NewRelay(a.store, d, outbox.Config{Logger: quietLogger()})
	if err != nil {
		return err
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- relay.Run(runCtx) }()
	defer func() { stop(); <-done }()

	ada := PlaceOrder("o-1", "ada@example.com", 4200)
	bob := PlaceOrder("o-2", "bob@example.com", 1999)
	if err := a.save(ctx, ada, bob); err != nil {
		return err
	}
	ada.Pay()
	if err := a.save(ctx, ada); err != nil {
		return err
	}
	if err := a.waitDrained(ctx); err != nil {
		return err
	}
	return a.printReadModel(ctx, out)
}

// open migrates the outbox, the handlers' inbox and the example's tables.
func open(ctx context.Context, path string) (*app, *outboxsqlite.InboxTable, error) {
	// OrderByKey: an order's events reach the handlers in the order they
	// were raised (OrderPaid after OrderPlaced), even across retries.
	store, err := outboxsqlite.Open(ctx, path, outboxsqlite.Options{CreateIfMissing: true, OrderByKey: true})
	if err != nil {
		return nil, nil, err
	}
	inbox, err := migrate(ctx, store)
	if err != nil {
		store.Close()
		return nil, nil, err
	}
	w, err := outbox.NewWriter[*sql.Tx](store, outbox.WriterConfig{})
	if err != nil {
		store.Close()
		return nil, nil, err
	}
	events := outboxevents.NewRegistry(outboxevents.Options{Source: "/examples/orders"})
	outboxevents.MustRegister[OrderPlaced](events, "orders.placed")
	outboxevents.MustRegister[OrderPaid](events, "orders.paid")
	return &app{store: store, writer: w, events: events}, inbox, nil
}

func migrate(ctx context.Context, store *outboxsqlite.Store) (*outboxsqlite.InboxTable, error) {
	m, err := outboxsqlite.NewMigrator(store.DB(), outboxsqlite.Options{})
	if err != nil {
		return nil, err
	}
	if _, err := m.Up(ctx); err != nil {
		return nil, err
	}
	inbox, err := outboxsqlite.NewInboxTable(store, "")
	if err != nil {
		return nil, err
	}
	if err := inbox.Migrate(ctx); err != nil {
		return nil, err
	}
	_, err = store.DB().ExecContext(ctx, `
CREATE TABLE orders (id TEXT PRIMARY KEY, customer TEXT NOT NULL, total_cents INTEGER NOT NULL, paid INTEGER NOT NULL);
CREATE TABLE order_summaries (id TEXT PRIMARY KEY, customer TEXT NOT NULL, total_cents INTEGER NOT NULL, status TEXT NOT NULL);
CREATE TABLE sent_emails (recipient TEXT NOT NULL, subject TEXT NOT NULL);`)
	return inbox, err
}

// firstErr returns the first error that is not nil.
func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// save stores the orders and the events they raised in one transaction.
func (a *app) save(ctx context.Context, orders ...*Order) error {
	sources := make([]outboxevents.Source, len(orders))
	for i, o := range orders {
		sources[i] = o
	}
	// Transact writes the orders' events after the rows, in the same
	// transaction, and clears them from the orders only once it committed.
	return outboxevents.Transact(ctx, a.writer, a.events, func(ctx context.Context, tx *sql.Tx) error {
		for _, o := range orders {
			_, err := tx.ExecContext(ctx, `INSERT INTO orders VALUES (?, ?, ?, ?) ON CONFLICT (id) DO UPDATE SET paid = excluded.paid`,
				o.ID, o.Customer, o.TotalCents, o.Paid)
			if err != nil {
				return err
			}
		}
		return nil
	}, sources...)
}

// handlers registers the read model and the e-mail handlers. Each applies
// every event once, in its own transaction with its inbox record.
func handlers(d *outboxevents.Dispatcher[*sql.Tx], out io.Writer) error {
	return firstErr(
		outboxevents.Handle(d, "order-summaries", func(ctx context.Context, tx *sql.Tx, e OrderPlaced) error {
			_, err := tx.ExecContext(ctx, `INSERT INTO order_summaries VALUES (?, ?, ?, 'placed')`, e.OrderID, e.Customer, e.TotalCents)
			return err
		}),
		outboxevents.Handle(d, "order-summaries-paid", func(ctx context.Context, tx *sql.Tx, e OrderPaid) error {
			_, err := tx.ExecContext(ctx, `UPDATE order_summaries SET status = 'paid' WHERE id = ?`, e.OrderID)
			return err
		}),
		outboxevents.Handle(d, "confirmation-email", func(ctx context.Context, tx *sql.Tx, e OrderPlaced) error {
			// A real service calls its mail provider here, with the event
			// id as the idempotency key; the example records the mail.
			subject := fmt.Sprintf("Your order %s (%d.%02d EUR)", e.OrderID, e.TotalCents/100, e.TotalCents%100)
			if _, err := tx.ExecContext(ctx, `INSERT INTO sent_emails VALUES (?, ?)`, e.Customer, subject); err != nil {
				return err
			}
			fmt.Fprintf(out, "e-mail to %s: %s\n", e.Customer, subject)
			return nil
		}),
	)
}

func (a *app) waitDrained(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		st, err := a.store.Stats(ctx)
		if err == nil && st.Pending == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("events not handled in time: %+v, %v", st, err)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func (a *app) printReadModel(ctx context.Context, out io.Writer) error {
	rows, err := a.store.DB().QueryContext(ctx, `SELECT id, customer, total_cents, status FROM order_summaries ORDER BY id`)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var id, customer, status string
		var cents int
		if err := rows.Scan(&id, &customer, &cents, &status); err != nil {
			return err
		}
		fmt.Fprintf(out, "read model: %s %s %d cents %s\n", id, customer, cents, status)
	}
	return rows.Err()
}
