package typedconsumer

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
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

// handlers is how many handlers take each event: Run waits until each has
// applied every event written.
const handlers = 2

// appliedTimeout bounds Run's wait for the handlers.
const appliedTimeout = 10 * time.Second

// Shop is the examples' service. One SQLite file holds both sides, to keep
// the examples short: the outbox the shop's events are written to, and the
// tables and inbox of the handlers that consume them from the broker. In a
// real deployment they are services of their own, each with its database.
type Shop struct {
	// Dispatcher runs the handlers: its Deliver is the function to give a
	// consumer adapter's Consume.
	Dispatcher *outboxevents.Dispatcher[*sql.Tx]
	// Inbox is the handlers' inbox table. Give it to Consume as Parked
	// too: a message the adapter gives up on is kept there, for `outbox
	// inbox parked` to list and retry.
	Inbox *outboxsqlite.InboxTable
	// Logger discards everything, so that the examples print only what
	// the handlers did; give a service's own logger instead.
	Logger *slog.Logger

	dir     string
	store   *outboxsqlite.Store
	writer  *outbox.Writer[*sql.Tx]
	events  *outboxevents.Registry
	written int // events written, for Run's wait
}

// Open creates the shop in a temporary directory, which Close removes.
func Open(ctx context.Context) (_ *Shop, err error) {
	dir, err := os.MkdirTemp("", "typedconsumer-")
	if err != nil {
		return nil, err
	}
	s := &Shop{dir: dir, Logger: slog.New(slog.DiscardHandler)}
	defer func() {
		if err != nil {
			_ = s.Close()
		}
	}()
	// OrderByKey: the relay publishes an order's events in the order they
	// were written, retries included, so the broker gets them in order.
	s.store, err = outboxsqlite.Open(ctx, filepath.Join(dir, "shop.db"), outboxsqlite.Options{CreateIfMissing: true, OrderByKey: true})
	if err != nil {
		return nil, err
	}
	if err := s.migrate(ctx); err != nil {
		return nil, err
	}
	if s.writer, err = outbox.NewWriter[*sql.Tx](s.store, outbox.WriterConfig{}); err != nil {
		return nil, err
	}
	// The registered names travel with each message (ce-type): the
	// consumer decodes by them, whatever topic or subject carried it.
	s.events = outboxevents.NewRegistry(outboxevents.Options{Source: "/examples/typedconsumer"})
	outboxevents.MustRegister[OrderPlaced](s.events, "orders.placed")
	outboxevents.MustRegister[OrderPaid](s.events, "orders.paid")

	// Middleware wraps every handler run: Recover turns a panic into a
	// retry, Log logs each run (failures at WARN level).
	s.Dispatcher, err = outboxevents.NewDispatcher(s.events, s.Inbox,
		outboxevents.Use(outboxevents.Log(s.Logger), outboxevents.Recover()))
	if err != nil {
		return nil, err
	}
	return s, s.handle()
}

// migrate creates the outbox, the inbox and the handlers' tables.
func (s *Shop) migrate(ctx context.Context) error {
	m, err := outboxsqlite.NewMigrator(s.store.DB(), outboxsqlite.Options{})
	if err != nil {
		return err
	}
	if _, err := m.Up(ctx); err != nil {
		return err
	}
	if s.Inbox, err = outboxsqlite.NewInboxTable(s.store, ""); err != nil {
		return err
	}
	if err := s.Inbox.Migrate(ctx); err != nil {
		return err
	}
	_, err = s.store.DB().ExecContext(ctx, `
CREATE TABLE order_summaries (id TEXT PRIMARY KEY, customer TEXT NOT NULL, total_cents INTEGER NOT NULL, status TEXT NOT NULL);
CREATE TABLE sent_mails (seq INTEGER PRIMARY KEY AUTOINCREMENT, order_id TEXT NOT NULL, recipient TEXT NOT NULL, subject TEXT NOT NULL, idempotency_key TEXT NOT NULL);`)
	return err
}

// handle adds the two handlers. Each handles both types under one name, so
// it gets an order's events in the order they were written: the mailer
// finds the recipient of OrderPaid's mail in the mail it sent for
// OrderPlaced.
func (s *Shop) handle() error {
	d := s.Dispatcher
	return errors.Join(
		outboxevents.Handle(d, "read-model", func(ctx context.Context, tx *sql.Tx, e OrderPlaced) error {
			_, err := tx.ExecContext(ctx, `INSERT INTO order_summaries VALUES (?, ?, ?, 'placed')`, e.OrderID, e.Customer, e.TotalCents)
			return err
		}),
		outboxevents.Handle(d, "read-model", func(ctx context.Context, tx *sql.Tx, e OrderPaid) error {
			res, err := tx.ExecContext(ctx, `UPDATE order_summaries SET status = 'paid' WHERE id = ?`, e.OrderID)
			if err != nil {
				return err
			}
			// No summary yet: OrderPlaced has not been applied (two
			// consumer processes on one queue do not keep key order).
			// Failing retries it, rather than committing it as applied.
			if n, err := res.RowsAffected(); err != nil || n == 0 {
				return errors.Join(err, fmt.Errorf("order %s paid before it was placed here; retrying", e.OrderID))
			}
			return nil
		}),
		outboxevents.Handle(d, "mailer", func(ctx context.Context, tx *sql.Tx, e OrderPlaced) error {
			return sendMail(ctx, tx, e.OrderID, e.Customer, fmt.Sprintf("Your order %s (%s)", e.OrderID, euros(e.TotalCents)))
		}),
		outboxevents.Handle(d, "mailer", func(ctx context.Context, tx *sql.Tx, e OrderPaid) error {
			var to string
			err := tx.QueryRowContext(ctx, `SELECT recipient FROM sent_mails WHERE order_id = ? ORDER BY seq LIMIT 1`, e.OrderID).Scan(&to)
			if err != nil {
				return err
			}
			return sendMail(ctx, tx, e.OrderID, to, "Payment received for order "+e.OrderID)
		}),
	)
}

// sendMail records a mail as sent. A real mailer calls its mail provider
// here with the event's id as the idempotency key, so that a redelivery
// after a crash between the call and the commit sends no second mail.
func sendMail(ctx context.Context, tx *sql.Tx, orderID, to, subject string) error {
	m, _ := outboxevents.MessageOf(ctx)
	_, err := tx.ExecContext(ctx, `INSERT INTO sent_mails (order_id, recipient, subject, idempotency_key) VALUES (?, ?, ?, ?)`,
		orderID, to, subject, m.ID.String())
	return err
}

// PlaceOrders writes the events of two orders to the outbox, as the shop's
// transactions do: Ada's order is placed and then paid, Bob's placed.
func (s *Shop) PlaceOrders(ctx context.Context) error {
	return errors.Join(
		s.write(ctx, "o-1", OrderPlaced{OrderID: "o-1", Customer: "ada@example.com", TotalCents: 4200}),
		s.write(ctx, "o-2", OrderPlaced{OrderID: "o-2", Customer: "bob@example.com", TotalCents: 1999}),
		s.write(ctx, "o-1", OrderPaid{OrderID: "o-1"}),
	)
}

// write writes event with key (its order's id: the broker keeps the order
// of one key) in a transaction of its own.
func (s *Shop) write(ctx context.Context, key string, event any) error {
	m, err := s.events.Message(event, key)
	if err != nil {
		return err
	}
	err = s.store.RunInTx(ctx, func(tx *sql.Tx) error {
		// The shop's own rows would be saved here: the event commits
		// with them, or not at all.
		return s.writer.Write(ctx, tx, m)
	})
	if err != nil {
		return err
	}
	s.written++
	s.writer.Notify() // a relay of this process publishes it at once
	return nil
}

// Run runs a relay that publishes the outbox with pub, and consume, which
// reads the broker and hands each message to Dispatcher.Deliver, until the
// handlers have applied every event written; then it stops both and returns.
func (s *Shop) Run(ctx context.Context, pub outbox.Publisher, consume func(ctx context.Context) error) error {
	relay, err := outbox.NewRelay(s.store, pub, outbox.Config{Logger: s.Logger})
	if err != nil {
		return err
	}
	ctx, stop := context.WithCancel(ctx)
	relayed, consumed := make(chan error, 1), make(chan error, 1)
	go func() { relayed <- relay.Run(ctx) }()
	go func() { consumed <- consume(ctx) }()
	// Takes the retries operators request of a handler's parked share
	// (`outbox inbox parked retry --consumer mailer ID`).
	retried := make(chan error, 1)
	go func() { retried <- s.Dispatcher.RetryParked(ctx, outboxevents.RetryConfig{Logger: s.Logger}) }()
	err = s.waitApplied(ctx, consumed)
	stop()
	return errors.Join(err, <-relayed, <-consumed, <-retried)
}

// waitApplied waits until each handler has an inbox record of every event
// written, or the consumer stopped, or appliedTimeout passed.
func (s *Shop) waitApplied(ctx context.Context, consumed chan error) error {
	want := handlers * s.written
	deadline := time.After(appliedTimeout)
	for {
		var n int
		err := s.store.DB().QueryRowContext(ctx, `SELECT count(*) FROM `+s.Inbox.Name()).Scan(&n)
		if err != nil || n == want {
			return err
		}
		select {
		case err := <-consumed:
			consumed <- err // for Run
			return fmt.Errorf("the consumer stopped after %d of %d events applied: %v", n, want, err)
		case <-deadline:
			return fmt.Errorf("the handlers applied %d of %d events within %v", n, want, appliedTimeout)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// Print prints what each handler did: the read model's orders, then the
// mails sent, each order's in the order they were sent.
func (s *Shop) Print(ctx context.Context, w io.Writer) error {
	rows, err := s.store.DB().QueryContext(ctx, `SELECT id, customer, total_cents, status FROM order_summaries ORDER BY id`)
	if err != nil {
		return err
	}
	for rows.Next() {
		var id, customer, status string
		var cents int
		if err := rows.Scan(&id, &customer, &cents, &status); err != nil {
			rows.Close()
			return err
		}
		fmt.Fprintf(w, "read-model: %s %s %s %s\n", id, customer, euros(cents), status)
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return err
	}
	rows, err = s.store.DB().QueryContext(ctx, `SELECT recipient, subject FROM sent_mails ORDER BY order_id, seq`)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var to, subject string
		if err := rows.Scan(&to, &subject); err != nil {
			return err
		}
		fmt.Fprintf(w, "mailer: to %s: %s\n", to, subject)
	}
	return rows.Err()
}

// Close closes the database and removes the shop's directory.
func (s *Shop) Close() error {
	var err error
	if s.store != nil {
		err = s.store.Close()
	}
	return errors.Join(err, os.RemoveAll(s.dir))
}

func euros(cents int) string { return fmt.Sprintf("%d.%02d EUR", cents/100, cents%100) }
