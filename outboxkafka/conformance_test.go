package outboxkafka_test

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/kafkatest"
	"github.com/go-outbox/outbox/outboxkafka"
	"github.com/go-outbox/outbox/publishertest"
)

// This file sorts first so that the suite's slowest case (an unreachable
// broker, bounded by a 5s context) starts early among the parallel tests.

func TestPublisherConformance(t *testing.T) {
	t.Parallel()
	publishertest.Run(t, harness)
}

// harness publishes with an Open publisher to a fresh one-partition topic
// named like the message topic.
func harness(t *testing.T) publishertest.Harness {
	c := kafkatest.Start(t)
	topic := c.Topic(t, 1, nil)
	p := openPublisher(t, c, outboxkafka.Config{})
	return publishertest.Harness{
		Publisher: p,
		Topic:     topic,
		Receive:   receiver(c.Consume(t, topic)),
		Unreachable: func(t *testing.T) outbox.Publisher {
			return openPublisher(t, nil, outboxkafka.Config{}, kgo.SeedBrokers(kafkatest.ClosedAddr(t)))
		},
		Invalid: func() outbox.Message {
			m := publishertest.Messages(topic, 1)[0]
			m.Payload = oversized
			return m
		},
	}
}
