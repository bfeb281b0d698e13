package e2e_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/go-outbox/outbox/internal/natstest"
	"github.com/go-outbox/outbox/outboxnats"
	"github.com/go-outbox/outbox/publishertest"
	"github.com/go-outbox/outbox/relaytest"
)

// With Parked set to an inbox table on PostgreSQL, a JetStream message that
// keeps failing is parked in the consumer's database after MaxDeliver
// attempts and acknowledged on the server (not terminated, nothing awaiting
// acknowledgement); a retry request while the handler still fails parks it
// again with the new attempts; once the handler is fixed, the next retry
// request makes the running consumer apply it, and its parked row is gone,
// after exactly MaxDeliver attempts and two rounds of retries.
func TestNATSMessageThatKeepsFailingIsParkedInTheConsumersDatabaseAndRetriedFromThere(t *testing.T) {
	t.Parallel()
	batch := publishertest.Messages("orders.created", 3)
	poison := batch[0].ID
	db := newConsumerDB(t, "billing", poison)
	srv := natstest.Start(t)
	js := srv.JetStream(t)
	stream, prefix := natstest.NewStream(t, js, jetstream.StreamConfig{})
	for i, err := range dialNATS(t, srv, outboxnats.Config{SubjectPrefix: prefix, Stream: stream}).Publish(ctxFor(t, 30*time.Second), batch) {
		if err != nil {
			t.Fatalf("publish %s: %v", batch[i].ID, err)
		}
	}
	logs := &relaytest.LogCapture{}
	cfg := outboxnats.ConsumerConfig{Stream: stream, Durable: "billing", MaxDeliver: 3, BackoffBase: time.Millisecond, BackoffMax: 5 * time.Millisecond,
		Logger: slog.New(logs), Parked: db.table}
	stop := running(t, func(ctx context.Context) error { return outboxnats.Consume(ctx, js, cfg, db.handler) })
	waitFor(t, 20*time.Second, "the failing message parked in the consumer's database", func() bool { _, ok := db.parked(t, poison); return ok })
	waitFor(t, 20*time.Second, "the other messages applied", func() bool { return db.applied(t, batch[1].ID) == 1 && db.applied(t, batch[2].ID) == 1 })
	p, _ := db.parked(t, poison)
	db.requireParked(t, p, batch[0], 3)
	if !logs.Has(slog.LevelError, "parked", poison.String(), "no such customer") {
		t.Errorf("no ERROR log naming the parked message and its error:\n%s", logs)
	}
	cons, err := js.Consumer(ctxFor(t, 10*time.Second), stream, "billing")
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "every message acknowledged on the server", func() bool {
		info, err := cons.Info(ctxFor(t, 10*time.Second))
		return err == nil && info.NumAckPending == 0 && info.AckFloor.Stream == uint64(len(batch))
	})

	// Retried while the cause is still there: parked again.
	before := p.ParkedAt
	db.requestRetry(t)
	waitFor(t, 20*time.Second, "the retried message parked again", func() bool {
		again, ok := db.parked(t, poison)
		return ok && !again.RetryRequested && again.ParkedAt.After(before)
	})
	if n := db.tried(poison); n != 6 {
		t.Fatalf("the failing message was tried %d times; want MaxDeliver = 3, and 3 more on the retry", n)
	}

	db.fix()
	db.requestRetry(t, poison)
	waitFor(t, 20*time.Second, "the retried message applied and unparked", func() bool {
		_, stillParked := db.parked(t, poison)
		return db.applied(t, poison) == 1 && !stillParked
	})
	stop()
	if n := db.tried(poison); n != 7 {
		t.Fatalf("the parked message reached the handler %d times in all; want 3 attempts, 3 on the first retry and 1 on the second: the server must not deliver it again", n)
	}
}
