package e2e_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/go-outbox/outbox/internal/amqptest"
	"github.com/go-outbox/outbox/outboxamqp"
	"github.com/go-outbox/outbox/publishertest"
	"github.com/go-outbox/outbox/relaytest"
)

// With Parked set to an inbox table on PostgreSQL, a RabbitMQ message that
// keeps failing is parked in the consumer's database after MaxDeliver
// attempts and acknowledged on the broker (not in the queue's dead-letter
// exchange, not requeued when the consumer stops); once the handler is
// fixed, an operator's retry request makes the running consumer apply it,
// and its parked row is gone, after exactly MaxDeliver attempts and the
// retry.
func TestRabbitMQMessageThatKeepsFailingIsParkedInTheConsumersDatabaseAndRetriedFromThere(t *testing.T) {
	t.Parallel()
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
	db := newConsumerDB(t, "billing", poison)
	logs := &relaytest.LogCapture{}
	consume := func(cfg outboxamqp.ConsumerConfig) (stop func()) {
		return running(t, func(ctx context.Context) error { return outboxamqp.Consume(ctx, url, cfg, db.handler) })
	}
	cfg := outboxamqp.ConsumerConfig{Queue: queue, Name: "billing", MaxDeliver: 3, BackoffBase: time.Millisecond, BackoffMax: 5 * time.Millisecond,
		Logger: slog.New(logs), Parked: db.table}

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
}
