package outbox_test

import (
	"bytes"
	"context"
	"fmt"
	"os"

	"github.com/google/uuid"

	"github.com/go-outbox/outbox"
)

// A relay publishes through ClaimCheck; the consumer wraps its handler with
// ResolveClaimChecks. Here in-process Handlers stand in for the broker; with
// a broker, the same two wrappers go around the broker's publisher and the
// handler given to its consumer adapter:
//
//	pub, _ := outbox.ClaimCheck(natsPublisher, blobs, outbox.ClaimCheckConfig{})
//	relay, _ := outbox.NewRelay(store, pub, outbox.Config{})
//
//	outboxnats.Consume(ctx, js, outboxnats.ConsumerConfig{Stream: "ORDERS", Durable: "billing", Parked: inbox},
//		outbox.ResolveClaimChecks(blobs, outbox.ApplyOnce(inbox, apply)))
//	outboxkafka.Consume(ctx, seeds, outboxkafka.ConsumerConfig{Group: "billing", Topics: []string{"orders"}},
//		outbox.ResolveClaimChecks(blobs, handle))
//
// blobs is outboxs3.New(client, bucket) in production, the same bucket for
// the relay and every consumer.
func ExampleClaimCheck() {
	dir, _ := os.MkdirTemp("", "blobs")
	defer os.RemoveAll(dir)
	blobs := outbox.DirBlobStore(dir)

	var consumer outbox.Handlers
	consumer.Handle("orders.exported", outbox.ResolveClaimChecks(blobs, func(ctx context.Context, m outbox.Message) error {
		fmt.Printf("handler: %d bytes, claim check header: %q\n", len(m.Payload), m.Headers[outbox.HeaderClaimCheck])
		return nil
	}))
	// What the relay's publisher sends on, as the broker would carry it.
	wire := outbox.PublisherFunc(func(ctx context.Context, batch []outbox.Message) []error {
		for _, m := range batch {
			fmt.Printf("wire: %d bytes, claim check header: %t\n", len(m.Payload), m.Headers[outbox.HeaderClaimCheck] != "")
		}
		return consumer.Publish(ctx, batch)
	})
	pub, err := outbox.ClaimCheck(wire, blobs, outbox.ClaimCheckConfig{Threshold: 64 << 10})
	if err != nil {
		panic(err)
	}
	errs := pub.Publish(context.Background(), []outbox.Message{
		{ID: uuid.Must(uuid.NewV7()), Topic: "orders.exported", Payload: bytes.Repeat([]byte("x"), 5<<20)},
		{ID: uuid.Must(uuid.NewV7()), Topic: "orders.exported", Payload: []byte(`{"order":1}`)},
	})
	fmt.Println(errs)
	// Output:
	// wire: 0 bytes, claim check header: true
	// wire: 11 bytes, claim check header: false
	// handler: 5242880 bytes, claim check header: ""
	// handler: 11 bytes, claim check header: ""
	// [<nil> <nil>]
}
