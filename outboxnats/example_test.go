package outboxnats_test

import (
	"cmp"
	"context"
	"log"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/outboxdriver"
	"github.com/go-outbox/outbox/outboxnats"
)

// A relay publishing to the stream ORDERS: topic "created" goes to subject
// "orders.created". The duplicate window covers outages of up to ten minutes.
func ExampleDial() {
	pub, err := outboxnats.Dial("nats://relay:secret@127.0.0.1:4222", outboxnats.Config{
		SubjectPrefix: "orders.",
		Stream:        "ORDERS",
	})
	if err != nil {
		log.Fatal(err)
	}
	defer pub.Close()

	ctx := context.Background()
	if _, err := pub.JetStream().CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name:       "ORDERS",
		Subjects:   []string{"orders.>"},
		Duplicates: 10 * time.Minute,
	}); err != nil {
		log.Fatal(err)
	}

	var store outboxdriver.Store // e.g. outboxpg.New(pool, outboxpg.Options{})
	relay, err := outbox.NewRelay(store, pub, outbox.Config{})
	if err != nil {
		log.Fatal(err)
	}
	_ = relay.Run(ctx)
}

// A service that already has a NATS connection shares it with the publisher.
func ExampleNew() {
	nc, err := nats.Connect(nats.DefaultURL, nats.MaxReconnects(-1))
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncTimeout(outboxnats.AckTimeoutDefault))
	if err != nil {
		log.Fatal(err)
	}
	pub, err := outboxnats.New(js, outboxnats.Config{
		// Route by event type and aggregate, "events.order.created.o-42", so
		// consumers can filter one aggregate. Keys must then be subject-safe
		// (no spaces, dots or wildcards); a message without key goes to
		// ".none".
		Subject: func(m outbox.Message) string { return "events." + m.Topic + "." + cmp.Or(m.Key, "none") },
	})
	if err != nil {
		log.Fatal(err)
	}
	defer pub.Close() // leaves nc open
	_ = pub
}
