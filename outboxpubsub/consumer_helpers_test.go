package outboxpubsub_test

import (
	"context"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"cloud.google.com/go/pubsub/v2/pstest"
	"github.com/google/uuid"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/consumetest"
	"github.com/go-outbox/outbox/outboxpubsub"
)

// newClient returns a client for the fake, closed when the test ends.
func newClient(t *testing.T, srv *pstest.Server) *pubsub.Client {
	t.Helper()
	c, err := pubsub.NewClient(ctxFor(t, 10*time.Second), project, clientOptions(srv.Addr)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// subOptions are the settings of a test subscription.
type subOptions struct {
	ackDeadline int32 // seconds; 0 means the fake's default
	deadLetter  string
	ordered     bool
}

// createSubscription creates subscription sub on topic (ids) on the fake.
func createSubscription(t *testing.T, srv *pstest.Server, sub, topic string, o subOptions) {
	t.Helper()
	c := newClient(t, srv)
	s := &pubsubpb.Subscription{Name: subName(sub), Topic: fullName(topic), EnableMessageOrdering: o.ordered, AckDeadlineSeconds: o.ackDeadline}
	if o.deadLetter != "" {
		s.DeadLetterPolicy = &pubsubpb.DeadLetterPolicy{DeadLetterTopic: fullName(o.deadLetter), MaxDeliveryAttempts: 5}
	}
	if _, err := c.SubscriptionAdminClient.CreateSubscription(ctxFor(t, 10*time.Second), s); err != nil {
		t.Fatalf("create subscription %s: %v", sub, err)
	}
}

func subName(sub string) string { return "projects/" + project + "/subscriptions/" + sub }

// publishTo publishes msgs to topic on the fake with the Publisher, keys as
// ordering keys if ordered.
func publishTo(t *testing.T, srv *pstest.Server, topic string, ordered bool, msgs ...outbox.Message) {
	t.Helper()
	p := open(t, srv.Addr, "pubsub://"+project, outboxpubsub.Config{Topic: topic, OrderingKeys: ordered})
	for i, err := range p.Publish(ctxFor(t, 10*time.Second), msgs) {
		if err != nil {
			t.Fatalf("publish %s: %v", msgs[i].ID, err)
		}
	}
}

// acks is how many acknowledgements the fake received for the message
// carrying outbox id id.
func acks(srv *pstest.Server, id uuid.UUID) int {
	n := 0
	for _, m := range srv.Messages() {
		if m.Attributes[outboxpubsub.AttrID] == id.String() {
			n += m.Acks
		}
	}
	return n
}

// startConsume runs Consume on c in the background (see consumetest.Start),
// allowed 15s to stop and 30s for each wait, more than the defaults. fail,
// if set, gives each attempt's outcome from the message and its attempt
// number in this process (nil: success).
func startConsume(t *testing.T, c *pubsub.Client, cfg outboxpubsub.ConsumerConfig, fail func(ctx context.Context, m outbox.Message, try int) error) *consumetest.Run {
	t.Helper()
	// A message on its way to a process when it stopped is unknown to its
	// client, so neither acknowledged nor handed back: Pub/Sub sends it
	// again once the stream's ack deadline passes, which the client sets to
	// 60 s. Waits allow for that.
	o := consumetest.Options{Fail: fail, StopWithin: 15 * time.Second, WaitWithin: 90 * time.Second}
	return consumetest.Start(t, &cfg.Logger, o, func(ctx context.Context, fn func(context.Context, outbox.Message) error) error {
		return outboxpubsub.Consume(ctx, c, cfg, fn)
	})
}

// fastRetries are backoffs short enough for tests.
func fastRetries(cfg outboxpubsub.ConsumerConfig) outboxpubsub.ConsumerConfig {
	cfg.BackoffBase, cfg.BackoffMax = time.Millisecond, 20*time.Millisecond
	return cfg
}
