package outboxamqp_test

import (
	"context"
	"fmt"
	"log"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/outboxamqp"
	"github.com/go-outbox/outbox/outboxdriver"
)

// A relay publishing an outbox table to the exchange "events", each message
// with its topic as routing key.
func Example() {
	var store outboxdriver.Store // e.g. outboxpg.New(pool, outboxpg.Options{})

	pub, err := outboxamqp.Dial("amqp://relay:secret@rabbitmq:5672/prod", outboxamqp.Config{Exchange: "events"})
	if err != nil {
		log.Fatal(err) // names the broker as amqp://relay@rabbitmq:5672/prod
	}
	defer pub.Close()
	relay, err := outbox.NewRelay(store, pub, outbox.Config{})
	if err != nil {
		log.Fatal(err)
	}
	_ = relay.Run(context.Background())
}

// Routing by something else than the topic: here every message of an
// aggregate type goes to "<type>.events", whatever its event name.
func ExampleConfig_routingKey() {
	cfg := outboxamqp.Config{
		Exchange: "events",
		RoutingKey: func(m outbox.Message) string {
			return m.Headers["aggregate-type"] + ".events"
		},
	}
	fmt.Println(cfg.RoutingKey(outbox.Message{Topic: "order.paid", Headers: map[string]string{"aggregate-type": "order"}}))
	// Output: order.events
}

// A consumer turns deliveries back into outbox messages, and deduplicates
// on the id.
func ExampleFromDelivery() {
	d := amqp.Delivery{
		MessageId:   "0193c1c5-3f5a-7e6b-9a61-2a8f7d1e4b10",
		Type:        "order.paid",
		ContentType: "application/json",
		Headers:     amqp.Table{outboxamqp.HeaderKey: "order-42"},
		Body:        []byte(`{"amount":10}`),
	}
	m, err := outboxamqp.FromDelivery(d)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(m.ID, m.Topic, m.Key, m.Headers["content-type"], string(m.Payload))
	// Output: 0193c1c5-3f5a-7e6b-9a61-2a8f7d1e4b10 order.paid order-42 application/json {"amount":10}
}
