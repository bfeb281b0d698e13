package e2e_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/amqptest"
	"github.com/go-outbox/outbox/internal/kafkatest"
	"github.com/go-outbox/outbox/outboxamqp"
	"github.com/go-outbox/outbox/outboxkafka"
	"github.com/go-outbox/outbox/publishertest"
)

// duplicateMessages is how many messages the duplicate tests publish, each
// twice.
const duplicateMessages = 50

// requireAppliedOnce publishes msgs twice, runs two consumers (start)
// through one inbox until every delivery reached the handler, and requires
// each message applied exactly once.
func requireAppliedOnce(t *testing.T, db *consumerDB, msgs []outbox.Message, publish func([]outbox.Message), start func(name string) (stop func())) {
	t.Helper()
	publish(msgs)
	publish(msgs)
	stops := []func(){start("first"), start("second")}
	waitFor(t, 60*time.Second, "both deliveries of every message handled", func() bool {
		for _, m := range msgs {
			if db.tried(m.ID) < 2 {
				return false
			}
		}
		return true
	})
	for _, stop := range stops {
		stop()
	}
	for _, m := range msgs {
		if n := db.applied(t, m.ID); n != 1 {
			t.Errorf("message %s delivered %d times, applied %d times; want once", m.ID, db.tried(m.ID), n)
		}
	}
}

// Every message published twice to RabbitMQ and read by two consumers of
// one queue, concurrently, is applied once through the inbox.
func TestRabbitMQDuplicatesAcrossTwoConsumersApplyOnce(t *testing.T) {
	t.Parallel()
	url := amqptest.URL(t)
	d := amqptest.Declare(t, url)
	db := newConsumerDB(t, "billing", uuid.Nil)
	p := openAMQP(t, url, outboxamqp.Config{Exchange: d.Exchange})
	requireAppliedOnce(t, db, publishertest.Messages(d.RoutingKey, duplicateMessages),
		func(msgs []outbox.Message) { publishAll(t, p, msgs) },
		func(string) func() {
			// Two processes of one consumer: one name, so one inbox.
			cfg := outboxamqp.ConsumerConfig{Queue: d.Queue, Name: db.consumer, Logger: slog.New(slog.DiscardHandler)}
			return running(t, func(ctx context.Context) error { return outboxamqp.Consume(ctx, url, cfg, db.handler) })
		})
}

// Every record published twice to Kafka and read by two members of one
// group (partitions handled concurrently) is applied once through the inbox.
func TestKafkaDuplicatesAcrossTwoGroupMembersApplyOnce(t *testing.T) {
	t.Parallel()
	c := kafkatest.Start(t)
	topic := c.Topic(t, 4, nil)
	db := newConsumerDB(t, "billing", uuid.Nil)
	p, err := outboxkafka.Open(c.Seeds(), outboxkafka.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	requireAppliedOnce(t, db, publishertest.Messages(topic, duplicateMessages),
		func(msgs []outbox.Message) { publishAll(t, p, msgs) },
		func(string) func() {
			cfg := outboxkafka.ConsumerConfig{Group: "billing", Topics: []string{topic}, DeadLetterTopic: topic + ".dead", Logger: slog.New(slog.DiscardHandler)}
			return running(t, func(ctx context.Context) error { return outboxkafka.Consume(ctx, c.Seeds(), cfg, db.handler) })
		})
}
