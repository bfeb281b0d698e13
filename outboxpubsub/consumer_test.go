package outboxpubsub_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/outboxpubsub"
	"github.com/go-outbox/outbox/publishertest"
)

// Each message reaches the handler with its id, topic, key, payload and
// headers; it is acknowledged only once the handler returned nil, and a
// failure is retried in place.
func TestConsumeHandsOverEachMessageAndAcknowledgesAfterTheHandler(t *testing.T) {
	t.Parallel()
	srv := server(t, nil)
	createTopic(t, srv, "orders")
	createSubscription(t, srv, "billing", "orders", subOptions{})
	batch := publishertest.Messages("orders.created", 5)
	publishTo(t, srv, "orders", false, batch...)
	release := make(chan struct{})
	r := startConsume(t, newClient(t, srv), fastRetries(outboxpubsub.ConsumerConfig{Subscription: "billing"}),
		func(ctx context.Context, m outbox.Message, try int) error {
			switch {
			case m.ID == batch[0].ID:
				select {
				case <-release:
				case <-ctx.Done():
					return ctx.Err()
				}
			case m.ID == batch[1].ID && try == 1:
				return errors.New("database busy (injected)")
			}
			return nil
		})
	r.WaitHandled(t, batch[1:]...)
	r.WaitFor(t, "the handled messages acknowledged", func() bool {
		for _, m := range batch[1:] {
			if acks(srv, m.ID) == 0 {
				return false
			}
		}
		return true
	})
	if n := acks(srv, batch[0].ID); n != 0 {
		t.Fatalf("message %s acknowledged %d times while its handler runs; want 0", batch[0].ID, n)
	}
	close(release)
	r.WaitFor(t, "the first message acknowledged after its handler", func() bool { return acks(srv, batch[0].ID) == 1 })
	got := make([]publishertest.Received, 0, len(batch))
	for _, m := range batch {
		h := r.HandledMessage(m.ID)
		got = append(got, publishertest.Received{ID: h.ID.String(), Topic: h.Topic, Key: h.Key, Payload: h.Payload, Headers: h.Headers})
	}
	publishertest.RequireReceived(t, publishertest.Harness{Receive: func(context.Context, int) ([]publishertest.Received, error) { return got, nil }}, batch)
	if n := r.TriesOf(batch[1].ID); n != 2 {
		t.Errorf("the failing message was tried %d times, want 2", n)
	}
}

// Each configuration mistake is refused before anything is received, with
// a *outbox.ConfigError naming the field.
func TestConsumeRefusesABadConfigurationNamingTheField(t *testing.T) {
	t.Parallel()
	ok := outboxpubsub.ConsumerConfig{Subscription: "billing"}
	for _, tc := range []struct {
		field  string
		change func(*outboxpubsub.ConsumerConfig)
		value  string
	}{
		{"Subscription", func(c *outboxpubsub.ConsumerConfig) { c.Subscription = "" }, `""`},
		{"Subscription", func(c *outboxpubsub.ConsumerConfig) { c.Subscription = "p/billing" }, `"p/billing"`},
		{"ParkTopic", func(c *outboxpubsub.ConsumerConfig) { c.ParkTopic = "goog-parked" }, "goog-parked"},
		{"MaxDeliver", func(c *outboxpubsub.ConsumerConfig) { c.MaxDeliver = -1 }, "-1"},
		{"Concurrency", func(c *outboxpubsub.ConsumerConfig) { c.Concurrency = -2 }, "-2"},
		{"BackoffBase", func(c *outboxpubsub.ConsumerConfig) { c.BackoffBase = -time.Millisecond }, "-1ms"},
		{"BackoffMax", func(c *outboxpubsub.ConsumerConfig) { c.BackoffMax = -time.Millisecond }, "-1ms"},
		{"BackoffMax", func(c *outboxpubsub.ConsumerConfig) { c.BackoffBase, c.BackoffMax = time.Second, time.Millisecond }, "1ms (BackoffBase 1s)"},
	} {
		cfg := ok
		tc.change(&cfg)
		// No client: a refused configuration touches none.
		err := outboxpubsub.Consume(t.Context(), nil, cfg, func(context.Context, outbox.Message) error { return nil })
		var cfgErr *outbox.ConfigError
		if !errors.As(err, &cfgErr) || cfgErr.Field != "outboxpubsub.ConsumerConfig."+tc.field || cfgErr.Value != tc.value || cfgErr.Fix == "" {
			t.Errorf("Consume with a bad %s (%s): %v; want a *outbox.ConfigError naming outboxpubsub.ConsumerConfig.%s with the value and a fix", tc.field, tc.value, err, tc.field)
		}
	}
}
