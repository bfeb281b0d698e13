package typedconsumer_test

import (
	"context"
	"io"
	"log"
	"os"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/go-outbox/outbox/examples/typedconsumer"
	"github.com/go-outbox/outbox/internal/natstest"
	"github.com/go-outbox/outbox/outboxnats"
)

// Typed handlers consume the shop's events from NATS JetStream.
func Example_nats() {
	if err := consumeFromNATS(context.Background(), os.Stdout); err != nil {
		log.Fatal(err)
	}
	// Output:
	// read-model: o-1 ada@example.com 42.00 EUR paid
	// read-model: o-2 bob@example.com 19.99 EUR placed
	// mailer: to ada@example.com: Your order o-1 (42.00 EUR)
	// mailer: to ada@example.com: Payment received for order o-1
	// mailer: to bob@example.com: Your order o-2 (19.99 EUR)
}

func consumeFromNATS(ctx context.Context, out io.Writer) error {
	// An embedded NATS server with JetStream: nothing to install.
	dir, err := os.MkdirTemp("", "typedconsumer-nats-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	srv, err := natstest.Run(server.Options{StoreDir: dir, NoLog: true})
	if err != nil {
		return err
	}
	defer srv.Shutdown()

	shop, err := typedconsumer.Open(ctx)
	if err != nil {
		return err
	}
	defer shop.Close()
	if err := shop.PlaceOrders(ctx); err != nil {
		return err
	}

	// A stream that keeps the shop's events: their subjects are their
	// names, orders.placed and orders.paid.
	nc, err := nats.Connect(srv.URL())
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	if _, err := outboxnats.DeclareStream(ctx, js, outboxnats.Stream{Name: "ORDERS", Subjects: []string{"orders.>"}}); err != nil {
		return err
	}

	// The relay publishes with pub; the consumer hands each message to
	// the dispatcher, which runs the handlers of its event's type.
	pub, err := outboxnats.Dial(srv.URL(), outboxnats.Config{Stream: "ORDERS", Logger: shop.Logger})
	if err != nil {
		return err
	}
	defer pub.Close()
	consume := func(ctx context.Context) error {
		return outboxnats.Consume(ctx, js, outboxnats.ConsumerConfig{
			Stream: "ORDERS", Durable: "shop", Parked: shop.Inbox, Logger: shop.Logger,
		}, shop.Dispatcher.Deliver)
	}
	if err := shop.Run(ctx, pub, consume); err != nil {
		return err
	}
	return shop.Print(ctx, out)
}
