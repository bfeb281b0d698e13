package typedconsumer_test

import (
	"context"
	"io"
	"log"
	"os"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/go-outbox/outbox/examples/typedconsumer"
	"github.com/go-outbox/outbox/outboxkafka"
)

// Typed handlers consume the shop's events from Kafka.
func Example_kafka() {
	if err := consumeFromKafka(context.Background(), os.Stdout); err != nil {
		log.Fatal(err)
	}
	// Output:
	// read-model: o-1 ada@example.com 42.00 EUR paid
	// read-model: o-2 bob@example.com 19.99 EUR placed
	// mailer: to ada@example.com: Your order o-1 (42.00 EUR)
	// mailer: to ada@example.com: Payment received for order o-1
	// mailer: to bob@example.com: Your order o-2 (19.99 EUR)
}

func consumeFromKafka(ctx context.Context, out io.Writer) error {
	// An in-process Kafka cluster (kfake, from franz-go): nothing to
	// install.
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		return err
	}
	defer cluster.Close()
	seeds := cluster.ListenAddrs()

	shop, err := typedconsumer.Open(ctx)
	if err != nil {
		return err
	}
	defer shop.Close()
	if err := shop.PlaceOrders(ctx); err != nil {
		return err
	}

	// One topic for every event of the shop: an order's events share a
	// partition (their key, the order's id, picks it), which keeps them
	// in order.
	if _, err := outboxkafka.DeclareTopics(ctx, seeds, []outboxkafka.Topic{{Name: "orders", Partitions: 2}}); err != nil {
		return err
	}

	// The relay publishes with pub; the consumer hands each record to the
	// dispatcher, which runs the handlers of its event's type.
	pub, err := outboxkafka.Dial(seeds, outboxkafka.Config{Topic: "orders", Logger: shop.Logger})
	if err != nil {
		return err
	}
	defer pub.Close()
	consume := func(ctx context.Context) error {
		return outboxkafka.Consume(ctx, seeds, outboxkafka.ConsumerConfig{
			Group: "shop", Topics: []string{"orders"}, Parked: shop.Inbox, Logger: shop.Logger,
		}, shop.Dispatcher.Deliver)
	}
	if err := shop.Run(ctx, pub, consume); err != nil {
		return err
	}
	return shop.Print(ctx, out)
}
