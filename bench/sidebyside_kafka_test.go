package bench

import (
	"context"
	"log/slog"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/kafkatest"
	"github.com/go-outbox/outbox/outboxkafka"
)

// BenchmarkSideBySideKafka publishes batches of 100 messages to a topic of
// three partitions on kfake (in-process; TEST_KAFKA_SEEDS for a real
// cluster) through outboxkafka.Publisher and through a bare franz-go client
// of the same library: the same records (key, payload, the outbox-id and
// outbox-topic headers), produced at once and each acknowledged by every
// in-sync replica (ProduceSync over the batch). Both share one client,
// built as outboxkafka.Open builds its own: idempotent, acks=all, no
// linger. kfake keeps every record in memory, so the run is short.
func BenchmarkSideBySideKafka(b *testing.B) {
	c := kafkatest.Start(b)
	topic := c.Topic(b, 3, nil)
	client, err := kgo.NewClient(kgo.SeedBrokers(c.Seeds()...), kgo.ProducerLinger(0), kgo.MetadataMinAge(outboxkafka.MetadataMinAgeDefault))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(client.Close)
	pub, err := outboxkafka.New(client, outboxkafka.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = pub.Close() })
	sideBySide{
		publisher: func(ctx context.Context, msgs []outbox.Message) error {
			return firstError(msgs, pub.Publish(ctx, onTopic(msgs, topic)))
		},
		bare: func(ctx context.Context, msgs []outbox.Message) error {
			return bareProduce(ctx, client, onTopic(msgs, topic))
		},
	}.run(b)
}

// onTopic sets every message's topic, which is the Kafka topic.
func onTopic(msgs []outbox.Message, topic string) []outbox.Message {
	for i := range msgs {
		msgs[i].Topic = topic
	}
	return msgs
}

// bareProduce is what an application would write without the publisher:
// the batch's records produced at once, waiting for every one's
// acknowledgement.
func bareProduce(ctx context.Context, client *kgo.Client, msgs []outbox.Message) error {
	records := make([]*kgo.Record, len(msgs))
	for i, m := range msgs {
		records[i] = &kgo.Record{Topic: m.Topic, Key: []byte(m.Key), Value: m.Payload, Headers: []kgo.RecordHeader{
			{Key: outboxkafka.HeaderID, Value: []byte(m.ID.String())},
			{Key: outboxkafka.HeaderTopic, Value: []byte(m.Topic)},
		}}
	}
	return client.ProduceSync(ctx, records...).FirstErr()
}
