package outboxaws_test

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/awstest"
	"github.com/go-outbox/outbox/outboxaws"
	"github.com/go-outbox/outbox/publishertest"
)

// A message retried for longer than its visibility timeout, and the message
// of its key waiting behind it, stay hidden: the consumer extends their
// visibility, so SQS does not deliver them again meanwhile.
func TestAMessageRetriedPastItsVisibilityTimeoutIsNotDeliveredAgainMeanwhile(t *testing.T) {
	t.Parallel()
	srv := awstest.Start(t)
	queue := srv.Queue(t, "outboxaws-consume-", nil)
	c := srv.SQSConsumerClient(t)
	batch := publishertest.Messages("orders.created", 2)
	batch[1].Key = batch[0].Key
	publishSQS(t, srv, queue, batch...)
	var first atomic.Int64 // unix nanos of the first attempt
	r := startConsume(t, c, outboxaws.ConsumerSQSConfig{Queue: queue, Name: "billing", ParkQueue: queue + "-parked", MaxDeliver: 100,
		VisibilityTimeout: time.Second, BackoffBase: 100 * time.Millisecond, BackoffMax: 200 * time.Millisecond},
		func(m outbox.Message, _ int) error {
			if m.ID != batch[0].ID {
				return nil
			}
			first.CompareAndSwap(0, time.Now().UnixNano())
			if time.Since(time.Unix(0, first.Load())) < 2500*time.Millisecond {
				return errors.New("database busy (injected)")
			}
			return nil
		})
	r.WaitHandled(t, batch...)
	r.WaitFor(t, "every message deleted", func() bool { return queueLength(t, c, queue) == 0 })
	if n := r.CountLogs(slog.LevelWarn, "received a message it still holds"); n != 0 {
		t.Errorf("SQS delivered a held message again %d times; want its visibility extended; logs:\n%s", n, r.Logs)
	}
	if n := r.CountLogs(slog.LevelWarn, "acknowledgement failed"); n != 0 {
		t.Errorf("%d deletions failed (a receipt handle outdated by a redelivery); logs:\n%s", n, r.Logs)
	}
	for _, m := range batch {
		if n := r.HandledCount(m.ID); n != 1 {
			t.Errorf("message %s handled %d times, want once", m.ID, n)
		}
	}
}

// The deliveries to a process that died count towards MaxDeliver: SQS's
// ApproximateReceiveCount is the attempt.
func TestDeliveriesToAProcessThatDiedCountTowardsMaxDeliver(t *testing.T) {
	t.Parallel()
	srv := awstest.Start(t)
	queue := srv.Queue(t, "outboxaws-consume-", nil)
	park := srv.Queue(t, "outboxaws-parked-", nil)
	c := srv.SQSConsumerClient(t)
	batch := publishertest.Messages("orders.created", 1)
	publishSQS(t, srv, queue, batch...)
	cfg := outboxaws.ConsumerSQSConfig{Queue: queue, Name: "billing", ParkQueue: park, MaxDeliver: 2, VisibilityTimeout: time.Second, WaitTime: time.Second,
		BackoffBase: time.Millisecond, BackoffMax: 10 * time.Millisecond}
	ctx, crash := context.WithCancel(context.Background())
	defer crash()
	err := outboxaws.ConsumeSQS(ctx, c, cfg, func(context.Context, outbox.Message) error {
		crash() // the process dies in the handler: the attempt failed
		return errors.New("killed")
	})
	if err != nil {
		t.Fatal(err)
	}
	r := startConsume(t, c, cfg, func(outbox.Message, int) error { return errors.New("no such customer (injected)") })
	if _, err := awstest.Receive(ctxFor(t, 20*time.Second), c, park, 1); err != nil {
		t.Fatalf("park queue: %v; logs:\n%s", err, r.Logs)
	}
	if n := r.TriesOf(batch[0].ID); n != 1 {
		t.Errorf("the second process tried the message %d times before parking it, want 1 (MaxDeliver 2, one delivery to the dead process)", n)
	}
}
