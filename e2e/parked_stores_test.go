package e2e_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/google/uuid"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/amqptest"
	"github.com/go-outbox/outbox/internal/kafkatest"
	"github.com/go-outbox/outbox/outboxamqp"
	"github.com/go-outbox/outbox/outboxkafka"
	"github.com/go-outbox/outbox/publishertest"
	"github.com/go-outbox/outbox/relaytest"
)

// parkingDB is a consumer's own database with an inbox table that keeps
// parked messages, on any store: the adapters' Parked tests (here and in
// parked_broker_test.go) run on each store that implements it (consumerDB
// on PostgreSQL, mysqlConsumerDB on MySQL). Its handler fails on one message, the poison, until fix.
type parkingDB interface {
	// handler counts the call, then applies m through the inbox.
	handler(ctx context.Context, m outbox.Message) error
	// fix deploys the fix: the handler no longer fails on the poison.
	fix()
	// tried returns how many times message id reached the handler.
	tried(id uuid.UUID) int
	// applied returns how many effects message id left.
	applied(t *testing.T, id uuid.UUID) int
	// parked returns the parked row of message id, if there is one.
	parked(t *testing.T, id uuid.UUID) (outbox.ParkedMessage, bool)
	// parkStore is what the adapter's Parked is set to.
	parkStore() outbox.ParkStore
	// requestRetry requests the retry of the parked messages ids (all the
	// consumer's when none), as `outbox inbox parked retry` does, and
	// fails the test unless exactly one, the poison, was parked.
	requestRetry(t *testing.T, ids ...uuid.UUID)
	// requireParked fails the test unless p is the poison m parked after
	// attempts with the handler's error.
	requireParked(t *testing.T, p outbox.ParkedMessage, m outbox.Message, attempts int)
}

// parkGate is a parkingDB that can hold the commit of the poison's first
// Park in the database, so that a test can look at the broker meanwhile.
type parkGate interface {
	// gateFirstPark, called before the consumer starts, arms the gate and
	// returns hold: it waits until the poison's first Park is under way,
	// keeps it waiting for a lock in the database, runs whileHeld, then
	// lets it commit.
	gateFirstPark() (hold func(t *testing.T, whileHeld func()))
}

// newParkingDB returns a parkingDB for consumer (the adapter's Group,
// Durable or Name) whose handler fails on poison.
type newParkingDB func(t *testing.T, consumer string, poison uuid.UUID) parkingDB

// consumerDB (PostgreSQL) fits the bodies below too (parked_pg_test.go).
var _ parkingDB = (*consumerDB)(nil)

func (c *consumerDB) parkStore() outbox.ParkStore { return c.table }

// testRabbitMQParkedAndRetried: a RabbitMQ message that keeps failing is
// parked after MaxDeliver attempts and acknowledged (neither requeued when
// the consumer stops nor dead-lettered); after the fix a retry request
// makes the next consumer process apply it once.
func testRabbitMQParkedAndRetried(t *testing.T, newDB newParkingDB) {
	url := amqptest.URL(t)
	d := amqptest.Declare(t, url)
	ch, err := amqptest.Dial(t, url).Channel()
	if err != nil {
		t.Fatal(err)
	}
	deadLetters, queue := d.Queue+".parked", d.Queue+".consumed"
	t.Cleanup(func() {
		_, _ = ch.QueueDelete(queue, false, false, false)
		_, _ = ch.QueueDelete(deadLetters, false, false, false)
		_ = ch.Close()
	})
	if _, err := ch.QueueDeclare(deadLetters, false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare(queue, false, false, false, false, amqp.Table{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": deadLetters}); err != nil {
		t.Fatal(err)
	}
	if err := ch.QueueBind(queue, d.RoutingKey, d.Exchange, false, nil); err != nil {
		t.Fatal(err)
	}
	depth := func(name string) int {
		q, err := ch.QueueDeclarePassive(name, false, false, false, false, nil)
		if err != nil {
			t.Fatal(err)
		}
		return q.Messages
	}

	batch := publishertest.Messages(d.RoutingKey, 3)
	poison := batch[0].ID
	for i, err := range openAMQP(t, url, outboxamqp.Config{Exchange: d.Exchange}).Publish(ctxFor(t, 30*time.Second), batch) {
		if err != nil {
			t.Fatalf("publish %s: %v", batch[i].ID, err)
		}
	}
	db := newDB(t, "billing", poison)
	logs := &relaytest.LogCapture{}
	consume := func(cfg outboxamqp.ConsumerConfig) (stop func()) {
		return running(t, func(ctx context.Context) error { return outboxamqp.Consume(ctx, url, cfg, db.handler) })
	}
	cfg := outboxamqp.ConsumerConfig{Queue: queue, Name: "billing", MaxDeliver: 3, BackoffBase: time.Millisecond, BackoffMax: 5 * time.Millisecond,
		Logger: slog.New(logs), Parked: db.parkStore()}

	stop := consume(cfg)
	waitFor(t, 20*time.Second, "the failing message parked in the consumer's database", func() bool { _, ok := db.parked(t, poison); return ok })
	waitFor(t, 20*time.Second, "the other messages applied", func() bool { return db.applied(t, batch[1].ID) == 1 && db.applied(t, batch[2].ID) == 1 })
	stop() // the broker requeues what was not acknowledged
	p, _ := db.parked(t, poison)
	db.requireParked(t, p, batch[0], 3)
	if !logs.Has(slog.LevelError, "parked", poison.String(), "no such customer") {
		t.Errorf("no ERROR log naming the parked message and its error:\n%s", logs)
	}
	if n, dead := depth(queue), depth(deadLetters); n != 0 || dead != 0 {
		t.Fatalf("after the consumer stopped: %d messages back in the queue, %d in the dead-letter exchange's queue; want 0 and 0 (parked in the database, acknowledged)", n, dead)
	}

	db.fix()
	cfg.Logger = relaytest.TestLogger(t)
	stop = consume(cfg)
	db.requestRetry(t, poison)
	waitFor(t, 20*time.Second, "the retried message applied and unparked", func() bool {
		_, stillParked := db.parked(t, poison)
		return db.applied(t, poison) == 1 && !stillParked
	})
	stop()
	if n := db.tried(poison); n != 4 {
		t.Fatalf("the parked message reached the handler %d times in all; want 3 attempts and the retry: the broker must not deliver it again", n)
	}
	for _, m := range batch {
		if n := db.applied(t, m.ID); n != 1 {
			t.Fatalf("message %s applied %d times; want once", m.ID, n)
		}
	}
}

// testKafkaParkedAndRetried: a Kafka record that keeps failing is parked
// after MaxDeliver attempts and its offset committed (the next member does
// not get it again); after the fix a retry request makes the running member
// apply it once.
func testKafkaParkedAndRetried(t *testing.T, newDB newParkingDB) {
	batch := publishertest.Messages("", 3)
	for i := range batch {
		batch[i].Key = "customer-7" // one partition: the sentinel below comes after them
	}
	poison := batch[0].ID
	group := "billing-" + uuid.NewString()[:8] // fresh on a shared cluster (TEST_KAFKA_SEEDS)
	db := newDB(t, group, poison)
	c := kafkatest.Start(t)
	topic := c.Topic(t, 2, nil)
	publishKafka(t, c, topic, batch)
	// Parking and retrying, not key order: the others go on past the
	// parked one.
	cfg := outboxkafka.ConsumerConfig{Group: group, Topics: []string{topic}, MaxDeliver: 3, BackoffBase: time.Millisecond, BackoffMax: 5 * time.Millisecond,
		Logger: relaytest.TestLogger(t), Parked: db.parkStore(), SkipParkedInKeyOrder: true}
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

	db.fix()
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
