package typedconsumer_test

import (
	"context"
	"io"
	"log"
	"os"

	"github.com/go-outbox/outbox/examples/typedconsumer"
	"github.com/go-outbox/outbox/outboxamqp"
)

// Typed handlers consume the shop's events from RabbitMQ. It needs a broker,
// so it is compiled but not run here (TestRabbitMQExampleRuns runs it):
//
//	docker run -d -p 5672:5672 rabbitmq:4
//	TEST_AMQP_URL=amqp://guest:guest@localhost:5672/ go test -run RabbitMQ ./typedconsumer
func Example_rabbitmq() {
	url := os.Getenv("TEST_AMQP_URL")
	if err := consumeFromRabbitMQ(context.Background(), url, "shop", os.Stdout); err != nil {
		log.Fatal(err)
	}
}

// consumeFromRabbitMQ uses the exchange and the queue named name.
func consumeFromRabbitMQ(ctx context.Context, url, name string, out io.Writer) error {
	shop, err := typedconsumer.Open(ctx)
	if err != nil {
		return err
	}
	defer shop.Close()
	if err := shop.PlaceOrders(ctx); err != nil {
		return err
	}

	// A queue bound to the exchange the relay publishes to, with the
	// events' names as routing keys.
	err = outboxamqp.DeclareQueue(ctx, url, outboxamqp.Queue{
		Name: name, Exchange: name, Bindings: []string{"orders.placed", "orders.paid"},
	})
	if err != nil {
		return err
	}

	// The relay publishes with pub; the consumer hands each message to
	// the dispatcher, which runs the handlers of its event's type.
	pub, err := outboxamqp.Dial(url, outboxamqp.Config{Exchange: name, Logger: shop.Logger})
	if err != nil {
		return err
	}
	defer pub.Close()
	consume := func(ctx context.Context) error {
		return outboxamqp.Consume(ctx, url, outboxamqp.ConsumerConfig{
			Queue: name, Name: "shop", Parked: shop.Inbox, Logger: shop.Logger,
		}, shop.Dispatcher.Deliver)
	}
	if err := shop.Run(ctx, pub, consume); err != nil {
		return err
	}
	return shop.Print(ctx, out)
}
