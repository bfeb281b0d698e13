package e2e_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/kafkatest"
	"github.com/go-outbox/outbox/outboxkafka"
	"github.com/go-outbox/outbox/publishertest"
	"github.com/go-outbox/outbox/relaytest"
)

// With Parked set to an inbox table on PostgreSQL (and no dead-letter
// topic), a Kafka record that keeps failing is parked in the consumer's
// database after MaxDeliver attempts and its offset committed: the next
// member of the group does not get it again; once the handler is fixed, an
// operator's retry request makes the running member apply it, and its parked
// row is gone.
func TestKafkaRecordThatKeepsFailingIsParkedInTheConsumersDatabaseAndRetriedFromThere(t *testing.T) {
	t.Parallel()
	batch := publishertest.Messages("", 3)
	for i := range batch {
		batch[i].Key = "customer-7" // one partition: the sentinel below comes after them
	}
	poison := batch[0].ID
	group := "billing-" + uuid.NewString()[:8] // fresh on a shared cluster (TEST_KAFKA_SEEDS)
	db := newConsumerDB(t, group, poison)
	c := kafkatest.Start(t)
	topic := c.Topic(t, 2, nil)
	publishKafka(t, c, topic, batch)
	logs := &relaytest.LogCapture{}
	// The records share a key, and this test is about parking and
	// retrying, not key order: the others go on past the parked one
	// (e2e/parked_keyorder_test.go has the default, which holds them).
	cfg := outboxkafka.ConsumerConfig{Group: group, Topics: []string{topic}, MaxDeliver: 3, BackoffBase: time.Millisecond, BackoffMax: 5 * time.Millisecond,
		Logger: slog.New(logs), Parked: db.table, SkipParkedInKeyOrder: true}
	consume := func(cfg outboxkafka.ConsumerConfig) (stop func()) {
		return running(t, func(ctx context.Context) error {
			return outboxkafka.Consume(ctx, c.Seeds(), cfg, db.handler, kgo.FetchMaxWait(100*time.Millisecond))
		})
	}

	stop := consume(cfg)
	waitFor(t, 30*time.Second, "the failing record parked in the consumer's database", func() bool { _, ok := db.parked(t, poison); return ok })
	waitFor(t, 30*time.Second, "the other records applied", func() bool { return db.applied(t, batch[1].ID) == 1 && db.applied(t, batch[2].ID) == 1 })
	stop() // commits the marked offsets
	p, _ := db.parked(t, poison)
	db.requireParked(t, p, batch[0], 3)
	if !logs.Has(slog.LevelError, "parked", poison.String(), "no such customer") {
		t.Errorf("no ERROR log naming the parked record and its error:\n%s", logs)
	}

	db.fix()
	cfg.Logger = relaytest.TestLogger(t)
	stop = consume(cfg)
	sentinel := publishertest.Messages("", 1)
	sentinel[0].Key = "customer-7"
	publishKafka(t, c, topic, sentinel)
	waitFor(t, 30*time.Second, "the next member at the new record", func() bool { return db.applied(t, sentinel[0].ID) == 1 })
	if n := db.tried(poison); n != 3 {
		t.Fatalf("the parked record reached the handler %d times before its retry; want MaxDeliver = 3: its offset must be committed", n)
	}
	db.requestRetry(t, poison)
	waitFor(t, 30*time.Second, "the retried record applied and unparked", func() bool {
		_, stillParked := db.parked(t, poison)
		return db.applied(t, poison) == 1 && !stillParked
	})
	stop()
	if n := db.tried(poison); n != 4 {
		t.Fatalf("the parked record reached the handler %d times in all; want MaxDeliver = 3 and the retry", n)
	}
}

// publishKafka publishes msgs to topic, failing the test on any error.
func publishKafka(t *testing.T, c *kafkatest.Cluster, topic string, msgs []outbox.Message) {
	t.Helper()
	for i := range msgs {
		msgs[i].Topic = topic
	}
	p, err := outboxkafka.Open(c.Seeds(), outboxkafka.Config{Logger: relaytest.TestLogger(t)})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer func() { _ = p.Close() }()
	for i, err := range p.Publish(ctxFor(t, 30*time.Second), msgs) {
		if err != nil {
			t.Fatalf("publish %s: %v", msgs[i].ID, err)
		}
	}
}
