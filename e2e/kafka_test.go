package e2e_test

import (
	"context"
	"testing"

	"github.com/go-outbox/outbox/internal/kafkatest"
	"github.com/go-outbox/outbox/outboxkafka"
	"github.com/go-outbox/outbox/publishertest"
)

func TestEndToEndFromPostgreSQLThroughTheRelayToKafka(t *testing.T) {
	t.Parallel()
	o := newPGOutbox(t)
	c := kafkatest.Start(t)
	topic := c.Topic(t, 1, nil)
	consumer := c.Consume(t, topic)
	p, err := outboxkafka.Open(c.Seeds(), outboxkafka.Config{})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = p.Close() })
	h := publishertest.Harness{
		Publisher: p,
		Topic:     topic,
		Receive: func(ctx context.Context, n int) ([]publishertest.Received, error) {
			records, err := consumer.Next(ctx, n)
			out := make([]publishertest.Received, len(records))
			for i, r := range records {
				out[i] = publishertest.Received{Topic: r.Topic, Key: string(r.Key), Payload: r.Value, Headers: map[string]string{}}
				for _, h := range r.Headers {
					out[i].Headers[h.Key] = string(h.Value)
				}
				out[i].ID = out[i].Headers[outboxkafka.HeaderID]
			}
			return out, err
		},
	}
	publishertest.EndToEnd(t, h, o.store, o.write)
}
