package outboxpubsub_test

import (
	"context"
	"log"

	"cloud.google.com/go/pubsub/v2"
	vkit "cloud.google.com/go/pubsub/v2/apiv1"
	"github.com/googleapis/gax-go/v2"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/outboxdriver"
	"github.com/go-outbox/outbox/outboxpubsub"
)

// A relay publishing every message to the topic "orders" of project
// "my-project", with each message's key as its ordering key; credentials
// come from GOOGLE_APPLICATION_CREDENTIALS or the metadata server. Check
// tells at start whether the topic exists.
func ExampleOpen() {
	ctx := context.Background()
	pub, err := outboxpubsub.Open(ctx, "pubsub://my-project/orders", outboxpubsub.Config{OrderingKeys: true})
	if err != nil {
		log.Fatal(err)
	}
	defer pub.Close()

	if err := pub.Check(ctx); err != nil {
		log.Printf("not publishing yet: %v", err) // e.g. the topic is missing
	}
	var store outboxdriver.Store // e.g. outboxpg.New(pool, outboxpg.Options{})
	relay, err := outbox.NewRelay(store, pub.ForRelay(), outbox.Config{})
	if err != nil {
		log.Fatal(err)
	}
	_ = relay.Run(ctx)
}

// A service that already has a Pub/Sub client shares it with the publisher;
// each outbox topic goes to the Pub/Sub topic "events-" + topic. The client
// is made with its Publish retries off: a default client retries
// UNAVAILABLE and other codes itself until Config.Timeout, so an outage
// would cost every batch the full timeout and never be reported
// unavailable (the relay would count an attempt instead of pausing).
func ExampleNew() {
	ctx := context.Background()
	noRetry := []gax.CallOption{gax.WithRetry(func() gax.Retryer { return gax.OnCodes(nil, gax.Backoff{}) })}
	client, err := pubsub.NewClientWithConfig(ctx, "my-project", &pubsub.ClientConfig{
		TopicAdminCallOptions: &vkit.TopicAdminCallOptions{Publish: noRetry},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	pub, err := outboxpubsub.New(client, outboxpubsub.Config{TopicPrefix: "events-"})
	if err != nil {
		log.Fatal(err)
	}
	defer pub.Close() // leaves client open
	_ = pub
}
