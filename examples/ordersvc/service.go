package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/outboxamqp"
	"github.com/go-outbox/outbox/outboxevents"
	"github.com/go-outbox/outbox/outboxpg"
)

// Config says where the service's broker is.
type Config struct {
	AMQPURL  string // amqp://...
	Exchange string // where the relay publishes the events
	Queue    string // the consumer's queue, bound to the events' types
	Logger   *slog.Logger
}

// Service is the orders service: its database, the outbox writer, the relay
// to RabbitMQ and the typed consumer.
type Service struct {
	pool   *pgxpool.Pool
	store  *outboxpg.Store
	writer *outbox.Writer[pgx.Tx]
	events *outboxevents.Registry
	stop   func()
}

// Start migrates the database on pool (the outbox, the inbox and the
// service's own tables), declares the exchange and queue, and starts the
// relay and the consumer. Stop stops them.
func Start(ctx context.Context, pool *pgxpool.Pool, cfg Config) (*Service, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	inbox, err := migrate(ctx, pool)
	if err == nil {
		err = outboxamqp.DeclareQueue(ctx, cfg.AMQPURL, outboxamqp.Queue{
			Name: cfg.Queue, Exchange: cfg.Exchange, Bindings: []string{"orders.placed", "orders.paid"},
			// One consumer process at a time, the others standing by:
			// an order's events are applied in order even with
			// several replicas of the service.
			SingleActiveConsumer: true,
		})
	}
	var svc *Service
	if err == nil {
		svc, err = NewService(pool)
	}
	var publisher *outboxamqp.Publisher
	if err == nil {
		publisher, err = outboxamqp.Open(cfg.AMQPURL, outboxamqp.Config{Exchange: cfg.Exchange, Logger: cfg.Logger})
	}
	var relay *outbox.Relay
	if err == nil {
		relay, err = outbox.NewRelay(svc.store, publisher, outbox.Config{Logger: cfg.Logger})
	}
	var d *outboxevents.Dispatcher[pgx.Tx]
	if err == nil {
		d, err = NewDispatcher(svc.events, inbox, cfg.Logger)
	}
	if err != nil {
		if publisher != nil {
			_ = publisher.Close()
		}
		return nil, err
	}

	runCtx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 3)
	go func() { done <- relay.Run(runCtx) }()
	go func() {
		done <- outboxamqp.Consume(runCtx, cfg.AMQPURL, outboxamqp.ConsumerConfig{
			Queue: cfg.Queue, Name: "orders-service", Parked: inbox, Logger: cfg.Logger,
		}, d.Deliver)
	}()
	// Takes the retries an operator requests for a handler's parked share
	// (`outbox inbox parked retry --consumer mailer ID`).
	go func() { done <- d.RetryParked(runCtx, outboxevents.RetryConfig{Logger: cfg.Logger}) }()
	svc.stop = func() {
		cancel()
		for range 3 {
			if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
				cfg.Logger.Error("orders service: stopping", slog.Any("error", err))
			}
		}
		_ = publisher.Close()
	}
	return svc, nil
}

// NewService returns the service's writing side on pool, whose outbox table
// is migrated: what PlaceOrder and PayOrder need, without a relay or a
// consumer (the tests' way in).
func NewService(pool *pgxpool.Pool) (*Service, error) {
	// OrderByKey: an order's events leave in the order they were written.
	store, err := outboxpg.New(pool, outboxpg.Options{OrderByKey: true})
	if err != nil {
		return nil, err
	}
	w, err := outbox.NewWriter[pgx.Tx](store, outbox.WriterConfig{})
	if err != nil {
		return nil, err
	}
	return &Service{pool: pool, store: store, writer: w, events: Events(), stop: func() {}}, nil
}

// Stop stops the relay and the consumer.
func (s *Service) Stop() { s.stop() }

// migrate brings the outbox and inbox tables up to this release and makes
// the service's own tables.
func migrate(ctx context.Context, pool *pgxpool.Pool) (*outboxpg.InboxTable, error) {
	m, err := outboxpg.NewMigrator(pool, outboxpg.Options{})
	if err != nil {
		return nil, err
	}
	if _, err := m.Up(ctx); err != nil {
		return nil, err
	}
	inbox, err := outboxpg.NewInboxTable(pool, outboxpg.InboxOptions{})
	if err != nil {
		return nil, err
	}
	if err := inbox.Migrate(ctx); err != nil {
		return nil, err
	}
	return inbox, CreateTables(ctx, pool)
}

// CreateTables makes the service's own tables, if missing.
func CreateTables(ctx context.Context, pool *pgxpool.Pool) error {
	_, err := pool.Exec(ctx, `
CREATE TABLE IF NOT EXISTS orders (id text PRIMARY KEY, customer text NOT NULL, total_cents int NOT NULL, paid bool NOT NULL);
CREATE TABLE IF NOT EXISTS order_summaries (id text PRIMARY KEY, customer text NOT NULL, total_cents int NOT NULL, status text NOT NULL);
CREATE TABLE IF NOT EXISTS sent_mails (seq bigserial, recipient text NOT NULL, subject text NOT NULL)`)
	return err
}

// PlaceOrder stores a new order and its OrderPlaced event, in one
// transaction.
func (s *Service) PlaceOrder(ctx context.Context, id, customer string, totalCents int) error {
	o := NewOrder(id, customer, totalCents)
	return outboxevents.Transact(ctx, s.writer, s.events, func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO orders VALUES ($1, $2, $3, false)`, o.ID, o.Customer, o.TotalCents)
		return err
	}, o)
}

// PayOrder marks an order paid and writes OrderPaid, once: the order is
// loaded under a lock in the transaction, so two payments do not both see
// it unpaid.
func (s *Service) PayOrder(ctx context.Context, id string) error {
	return outboxevents.Transact(ctx, s.writer, s.events, func(ctx context.Context, tx pgx.Tx) error {
		o := &Order{ID: id}
		err := tx.QueryRow(ctx, `SELECT customer, total_cents, paid FROM orders WHERE id = $1 FOR UPDATE`, id).Scan(&o.Customer, &o.TotalCents, &o.Paid)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("order %s: no such order", id)
		}
		if err != nil {
			return err
		}
		o.Pay()
		if err := outboxevents.Track(ctx, o); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `UPDATE orders SET paid = $2 WHERE id = $1`, id, o.Paid)
		return err
	})
}

// WaitApplied waits until both handlers show n events applied, for at most
// a minute: the read model (each order's summary, plus one for each paid
// one) and the mailer (a mail each). Each handler applies its share in its
// own transaction, so the read model may be done while a mail is not yet.
func (s *Service) WaitApplied(ctx context.Context, n int) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for {
		var got int
		err := s.pool.QueryRow(ctx, `SELECT LEAST(
	(SELECT count(*) + count(*) FILTER (WHERE status = 'paid') FROM order_summaries),
	(SELECT count(*) FROM sent_mails))`).Scan(&got)
		if err == nil && got >= n {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %d events applied (%d so far): %w", n, got, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Summaries returns the read model, a line per order.
func (s *Service) Summaries(ctx context.Context) ([]string, error) {
	return s.lines(ctx, `SELECT format('order %s: %s, %s cents, %s', id, customer, total_cents, status) FROM order_summaries ORDER BY id`)
}

// Mails returns the mails sent, a line each, in the order they were sent.
func (s *Service) Mails(ctx context.Context) ([]string, error) {
	return s.lines(ctx, `SELECT format('mail to %s: %s', recipient, subject) FROM sent_mails ORDER BY seq`)
}

func (s *Service) lines(ctx context.Context, query string) ([]string, error) {
	rows, err := s.pool.Query(ctx, query)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}
