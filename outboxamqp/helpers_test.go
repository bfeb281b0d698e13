package outboxamqp_test

import (
	"context"
	"testing"
	"time"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/amqptest"
	"github.com/go-outbox/outbox/outboxamqp"
	"github.com/go-outbox/outbox/publishertest"
	"github.com/go-outbox/outbox/relaytest"
)

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// dial returns a connected publisher, closed when the test ends.
func dial(t *testing.T, url string, cfg outboxamqp.Config) *outboxamqp.Publisher {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = relaytest.TestLogger(t)
	}
	p, err := outboxamqp.Dial(url, cfg)
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// open returns a publisher that connects on first use, closed when the test
// ends.
func open(t *testing.T, url string, cfg outboxamqp.Config) *outboxamqp.Publisher {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = relaytest.TestLogger(t)
	}
	p, err := outboxamqp.Open(url, cfg)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// harness publishes to a fresh exchange whose queue a consumer reads.
// Unroutable messages are permanent failures here, so that the suite's
// invalid message is one with a routing key no queue is bound for.
func harness(t *testing.T) publishertest.Harness {
	t.Helper()
	url := amqptest.URL(t)
	d := amqptest.Declare(t, url)
	cfg := outboxamqp.Config{Exchange: d.Exchange, UnroutablePermanent: true}
	consumer := amqptest.Consume(t, url, d.Queue)
	return publishertest.Harness{
		Publisher: dial(t, url, cfg),
		Topic:     d.RoutingKey,
		Receive:   receiver(consumer),
		Unreachable: func(t *testing.T) outbox.Publisher {
			c := cfg
			c.DialTimeout = 2 * time.Second
			return open(t, amqptest.ClosedURL(t), c)
		},
		Invalid: func() outbox.Message {
			return publishertest.Messages(d.RoutingKey+".unbound", 1)[0]
		},
	}
}

// receiver reads the consumer's next deliveries as the suite's Received.
func receiver(c *amqptest.Consumer) func(ctx context.Context, n int) ([]publishertest.Received, error) {
	return func(ctx context.Context, n int) ([]publishertest.Received, error) {
		ds, err := c.Next(ctx, n)
		if err != nil {
			return nil, err
		}
		out := make([]publishertest.Received, 0, len(ds))
		for _, d := range ds {
			m, err := outboxamqp.FromDelivery(d)
			if err != nil {
				return nil, err
			}
			out = append(out, publishertest.Received{ID: m.ID.String(), Topic: m.Topic, Key: m.Key, Payload: m.Payload, Headers: m.Headers})
		}
		return out, nil
	}
}

// waitFor polls cond until it holds or the timeout passes.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
