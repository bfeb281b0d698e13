package main

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/jackc/pgx/v5"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/outboxevents"
)

// OrderPlaced is raised when a customer places an order.
type OrderPlaced struct {
	OrderID    string `json:"order_id"`
	Customer   string `json:"customer"`
	TotalCents int    `json:"total_cents"`
}

// OrderPaid is raised when an order's payment arrives.
type OrderPaid struct {
	OrderID  string `json:"order_id"`
	Customer string `json:"customer"`
}

// Order is the aggregate: it raises events and knows nothing of the outbox.
type Order struct {
	outboxevents.Recorder
	ID         string
	Customer   string
	TotalCents int
	Paid       bool
}

// NewOrder places an order: it raises OrderPlaced.
func NewOrder(id, customer string, totalCents int) *Order {
	o := &Order{ID: id, Customer: customer, TotalCents: totalCents}
	o.Record(OrderPlaced{OrderID: id, Customer: customer, TotalCents: totalCents})
	return o
}

// Pay marks the order paid and raises OrderPaid, once.
func (o *Order) Pay() {
	if !o.Paid {
		o.Paid = true
		o.Record(OrderPaid{OrderID: o.ID, Customer: o.Customer})
	}
}

// EventKey keys the order's events by its id: they keep their order.
func (o *Order) EventKey() string { return o.ID }

// Events is the registry of the service's events: their names on the wire.
func Events() *outboxevents.Registry {
	reg := outboxevents.NewRegistry(outboxevents.Options{Source: "/orders-service"})
	outboxevents.MustRegister[OrderPlaced](reg, "orders.placed")
	outboxevents.MustRegister[OrderPaid](reg, "orders.paid")
	return reg
}

// NewDispatcher returns the consumer's typed handlers, each applying each
// event once in its own transaction with its own inbox record: the read
// model, and the mailer. A handler's panic is a retry, not a crash.
func NewDispatcher(reg *outboxevents.Registry, inbox outbox.InboxStore[pgx.Tx], logger *slog.Logger) (*outboxevents.Dispatcher[pgx.Tx], error) {
	d, err := outboxevents.NewDispatcher(reg, inbox, outboxevents.Use(outboxevents.Log(logger), outboxevents.Recover()))
	if err != nil {
		return nil, err
	}
	err = firstErr(
		outboxevents.Handle(d, "read-model", func(ctx context.Context, tx pgx.Tx, e OrderPlaced) error {
			_, err := tx.Exec(ctx, `INSERT INTO order_summaries VALUES ($1, $2, $3, 'placed')`, e.OrderID, e.Customer, e.TotalCents)
			return err
		}),
		// One name over both types: the read model sees an order's
		// events in order, OrderPaid after OrderPlaced.
		outboxevents.Handle(d, "read-model", func(ctx context.Context, tx pgx.Tx, e OrderPaid) error {
			tag, err := tx.Exec(ctx, `UPDATE order_summaries SET status = 'paid' WHERE id = $1`, e.OrderID)
			if err != nil {
				return err
			}
			// No summary yet: OrderPlaced has not been applied here.
			// Failing retries it, rather than committing it as applied.
			if tag.RowsAffected() == 0 {
				return fmt.Errorf("order %s paid before it was placed here; retrying", e.OrderID)
			}
			return nil
		}),
		outboxevents.Handle(d, "mailer", func(ctx context.Context, tx pgx.Tx, e OrderPlaced) error {
			return sendMail(ctx, tx, e.Customer, fmt.Sprintf("Your order %s", e.OrderID))
		}),
		outboxevents.Handle(d, "mailer", func(ctx context.Context, tx pgx.Tx, e OrderPaid) error {
			return sendMail(ctx, tx, e.Customer, fmt.Sprintf("Payment received for order %s", e.OrderID))
		}),
	)
	return d, err
}

// sendMail stands for a mail provider's API; the sent_mails row commits
// with the mailer's inbox record. A real provider call is outside the
// transaction: give it the message id (outboxevents.MessageOf) as its
// idempotency key, so a retry after a crash does not send the mail twice.
func sendMail(ctx context.Context, tx pgx.Tx, to, subject string) error {
	_, err := tx.Exec(ctx, `INSERT INTO sent_mails (recipient, subject) VALUES ($1, $2)`, to, subject)
	return err
}

func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
