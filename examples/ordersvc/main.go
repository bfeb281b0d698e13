// Command ordersvc is a newcomer's orders service, end to end: placing or
// paying an order writes the order's row and its typed events (OrderPlaced,
// OrderPaid) to PostgreSQL in one transaction; a relay publishes the events
// to RabbitMQ; a consumer applies each event once per handler (a read model
// and a mailer), each with its own inbox record, in each order's order.
// main_test.go tests it with the outboxtest kit.
//
// It needs a PostgreSQL and a RabbitMQ server:
//
//	eval "$(scripts/pg-up)"; eval "$(scripts/rabbitmq-up)"
//	DATABASE_URL=$TEST_DATABASE_URL AMQP_URL=$TEST_AMQP_URL go run ./examples/ordersvc
package main

import (
	"context"
	"fmt"
	"io"
	"log"
	"os"
	"os/signal"

	"github.com/jackc/pgx/v5/pgxpool"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	cfg := Config{AMQPURL: os.Getenv("AMQP_URL"), Exchange: "orders", Queue: "orders-service"}
	if os.Getenv("DATABASE_URL") == "" || cfg.AMQPURL == "" {
		log.Fatal("set DATABASE_URL (postgres://...) and AMQP_URL (amqp://...)")
	}
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	if err := demo(ctx, pool, cfg, os.Stdout); err != nil {
		log.Fatal(err)
	}
}

// demo starts the service, places and pays two orders, waits until the
// consumer has applied every event, and prints the read model and the mails.
func demo(ctx context.Context, pool *pgxpool.Pool, cfg Config, out io.Writer) error {
	svc, err := Start(ctx, pool, cfg)
	if err != nil {
		return err
	}
	defer svc.Stop()

	if err := svc.PlaceOrder(ctx, "o-1", "ada@example.com", 4200); err != nil {
		return err
	}
	if err := svc.PlaceOrder(ctx, "o-2", "bob@example.com", 1999); err != nil {
		return err
	}
	if err := svc.PayOrder(ctx, "o-1"); err != nil {
		return err
	}
	if err := svc.WaitApplied(ctx, 3); err != nil {
		return err
	}
	summaries, err := svc.Summaries(ctx)
	if err != nil {
		return err
	}
	for _, s := range summaries {
		fmt.Fprintln(out, s)
	}
	mails, err := svc.Mails(ctx)
	if err != nil {
		return err
	}
	for _, m := range mails {
		fmt.Fprintln(out, m)
	}
	return nil
}
