package outboxkafka_test

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/outboxkafka"
)

// A relay publishes with a Publisher from Dial; here a message is published
// by hand to an in-process kfake cluster and read back.
func Example() {
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "orders"))
	if err != nil {
		panic(err)
	}
	defer cluster.Close()

	// Every message goes to the Kafka topic "orders"; the message topic
	// travels in the Outbox-Topic header.
	pub, err := outboxkafka.Dial(cluster.ListenAddrs(), outboxkafka.Config{Topic: "orders"})
	if err != nil {
		panic(err)
	}
	defer pub.Close()
	// relay, err := outbox.NewRelay(store, pub, outbox.Config{})

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m := outbox.Message{
		ID:      uuid.MustParse("01900000-0000-7000-8000-000000000001"),
		Topic:   "orders.created",
		Key:     "order-42",
		Payload: []byte(`{"total":42}`),
		Headers: map[string]string{"content-type": "application/json"},
	}
	errs := pub.Publish(ctx, []outbox.Message{m}) // one outcome per message
	fmt.Println("acknowledged:", errs[0] == nil)

	consumer, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...), kgo.ConsumeTopics("orders"))
	if err != nil {
		panic(err)
	}
	defer consumer.Close()
	r := consumer.PollFetches(ctx).Records()[0]
	fmt.Printf("%s key=%s value=%s\n", r.Topic, r.Key, r.Value)
	for _, h := range r.Headers {
		fmt.Printf("  %s: %s\n", h.Key, h.Value)
	}
	// Output:
	// acknowledged: true
	// orders key=order-42 value={"total":42}
	//   Outbox-Message-Id: 01900000-0000-7000-8000-000000000001
	//   Outbox-Topic: orders.created
	//   content-type: application/json
}
