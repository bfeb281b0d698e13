package outboxaws_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/google/uuid"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/awstest"
	"github.com/go-outbox/outbox/internal/consumetest"
	"github.com/go-outbox/outbox/outboxaws"
	"github.com/go-outbox/outbox/publishertest"
)

// Each message reaches the handler once with its id, topic, key, payload
// (base64 or text) and headers; a failure is retried in place; every
// message ends deleted.
func TestConsumeSQSHandsOverEachMessageOnceAndDeletesItAfterTheHandler(t *testing.T) {
	t.Parallel()
	srv := awstest.Start(t)
	queue := srv.Queue(t, "outboxaws-consume-", nil)
	c := srv.SQSConsumerClient(t)
	batch := publishertest.Messages("orders.created", 5)
	batch[3].Payload = []byte(`{"text":"payload"}`)
	publishSQS(t, srv, queue, batch...)
	r := startConsume(t, c, outboxaws.ConsumerSQSConfig{Queue: queue, Name: "billing", ParkQueue: queue + "-parked"},
		func(m outbox.Message, try int) error {
			if m.ID == batch[1].ID && try == 1 {
				return errors.New("database busy (injected)")
			}
			return nil
		})
	r.WaitHandled(t, batch...)
	r.WaitFor(t, "every message deleted", func() bool { return queueLength(t, c, queue) == 0 })
	if err := r.Stop(t); err != nil {
		t.Fatalf("ConsumeSQS: %v", err)
	}
	seen := map[uuid.UUID]outbox.Message{}
	for _, m := range batch {
		if n := r.HandledCount(m.ID); n != 1 {
			t.Errorf("message %s handled %d times, want once", m.ID, n)
		}
	}
	for _, m := range r.Handled() {
		seen[m.ID] = m
	}
	got := make([]publishertest.Received, 0, len(batch))
	for _, m := range batch {
		s := seen[m.ID]
		got = append(got, publishertest.Received{ID: s.ID.String(), Topic: s.Topic, Key: s.Key, Payload: s.Payload, Headers: s.Headers})
		if s.Topic != m.Topic {
			t.Errorf("message %s: topic %q, want %q", m.ID, s.Topic, m.Topic)
		}
	}
	publishertest.RequireReceived(t, publishertest.Harness{Receive: func(context.Context, int) ([]publishertest.Received, error) { return got, nil }}, batch)
	if n := r.TriesOf(batch[1].ID); n != 2 {
		t.Errorf("the failing message was tried %d times, want 2", n)
	}
}

// A message whose handler keeps failing is tried MaxDeliver times, then
// sent to the park queue with its body and attributes and why, and deleted
// from the queue; the others go on.
func TestAMessageThatKeepsFailingIsParkedOnTheParkQueueWithItsAttributes(t *testing.T) {
	t.Parallel()
	srv := awstest.Start(t)
	queue := srv.Queue(t, "outboxaws-consume-", nil)
	park := srv.Queue(t, "outboxaws-parked-", nil)
	c := srv.SQSConsumerClient(t)
	batch := publishertest.Messages("orders.created", 3)
	publishSQS(t, srv, queue, batch...)
	r := startConsume(t, c, outboxaws.ConsumerSQSConfig{Queue: queue, Name: "billing", ParkQueue: park, MaxDeliver: 3},
		func(m outbox.Message, _ int) error {
			if m.ID == batch[0].ID {
				return errors.New("no such customer (injected)")
			}
			return nil
		})
	r.WaitHandled(t, batch[1:]...)
	parked, err := awstest.Receive(ctxFor(t, 20*time.Second), c, park, 1)
	if err != nil {
		t.Fatalf("park queue: %v; logs:\n%s", err, r.Logs)
	}
	r.WaitFor(t, "every message deleted from the queue", func() bool { return queueLength(t, c, queue) == 0 })
	if n := r.TriesOf(batch[0].ID); n != 3 {
		t.Errorf("the failing message was tried %d times, want MaxDeliver = 3", n)
	}
	p := parked[0]
	m, err := outboxaws.FromSQSMessage(p)
	if err != nil {
		t.Fatalf("the parked message is no outbox message: %v", err)
	}
	headers := map[string]string{}
	for k, v := range m.Headers {
		if !strings.HasPrefix(k, "outbox-parked-") {
			headers[k] = v
		}
	}
	if m.ID != batch[0].ID || m.Topic != batch[0].Topic || m.Key != batch[0].Key || string(m.Payload) != string(batch[0].Payload) || fmt.Sprint(headers) != fmt.Sprint(batch[0].Headers) {
		t.Errorf("parked message %+v, want %+v", m, batch[0])
	}
	attr := func(name string) string { return aws.ToString(p.MessageAttributes[name].StringValue) }
	if why := attr(outboxaws.AttrParkedReason); !strings.Contains(why, "parked after 3 attempt(s)") || !strings.Contains(why, "no such customer") {
		t.Errorf("%s = %q, want the attempts and the last error", outboxaws.AttrParkedReason, why)
	}
	if by := attr(outboxaws.AttrParkedBy); by != "billing" {
		t.Errorf("%s = %q, want the consumer's name", outboxaws.AttrParkedBy, by)
	}
	if from := attr(outboxaws.AttrParkedFrom); !strings.HasPrefix(from, queue+"/") {
		t.Errorf("%s = %q, want the queue and the SQS message id", outboxaws.AttrParkedFrom, from)
	}
	if !r.Logs.Has(slog.LevelError, "parked", batch[0].ID.String()) {
		t.Errorf("no ERROR log naming the parked message; logs:\n%s", r.Logs)
	}
}

// A message that is no outbox message (no outbox-id attribute) cannot be
// handled: it is sent to the park queue with why at once and deleted, and
// the messages behind it go on.
func TestAMessageThatIsNoOutboxMessageIsParkedAtOnce(t *testing.T) {
	t.Parallel()
	srv := awstest.Start(t)
	queue := srv.Queue(t, "outboxaws-consume-", nil)
	park := srv.Queue(t, "outboxaws-parked-", nil)
	c := srv.SQSConsumerClient(t)
	if _, err := c.SendMessage(ctxFor(t, 5*time.Second), &sqs.SendMessageInput{QueueUrl: aws.String(queue), MessageBody: aws.String(`{"order":42}`)}); err != nil {
		t.Fatal(err)
	}
	batch := publishertest.Messages("orders.created", 1)
	publishSQS(t, srv, queue, batch...)
	r := startConsume(t, c, outboxaws.ConsumerSQSConfig{Queue: queue, Name: "billing", ParkQueue: park}, nil)
	r.WaitHandled(t, batch...)
	parked, err := awstest.Receive(ctxFor(t, 20*time.Second), c, park, 1)
	if err != nil {
		t.Fatalf("park queue: %v; logs:\n%s", err, r.Logs)
	}
	r.WaitFor(t, "every message deleted from the queue", func() bool { return queueLength(t, c, queue) == 0 })
	if body := aws.ToString(parked[0].Body); body != `{"order":42}` {
		t.Errorf("parked body %q, want the message's", body)
	}
	if why := aws.ToString(parked[0].MessageAttributes[outboxaws.AttrParkedReason].StringValue); !strings.Contains(why, "not an outbox message") {
		t.Errorf("%s = %q, want it to say it is not an outbox message", outboxaws.AttrParkedReason, why)
	}
	if n := len(r.HandledIDs()); n != 1 {
		t.Errorf("the handler was given %d messages, want only the outbox one", n)
	}
}

// A process that dies after its handler's transaction committed, before
// the deletion, leaves the message in the queue: SQS delivers it again once
// its visibility timeout passed, to the next process, whose inbox skips it.
func TestAMessageNotDeletedComesAgainAfterTheVisibilityTimeoutAndTheInboxAppliesItOnce(t *testing.T) {
	t.Parallel()
	srv := awstest.Start(t)
	queue := srv.Queue(t, "outboxaws-consume-", nil)
	c := srv.SQSConsumerClient(t)
	batch := publishertest.Messages("orders.created", 1)
	publishSQS(t, srv, queue, batch...)
	store := newMemInbox()
	inbox, err := outbox.NewInbox(store, "billing")
	if err != nil {
		t.Fatal(err)
	}
	var deliveries sync.Map // id -> count, over both processes
	count := func(id uuid.UUID) int {
		n, _ := deliveries.Load(id)
		i, _ := n.(int)
		return i
	}
	apply := inbox.Apply(func(_ context.Context, _ *memTx, m outbox.Message) error {
		deliveries.Store(m.ID, count(m.ID)+1)
		return nil
	})
	cfg := outboxaws.ConsumerSQSConfig{Queue: queue, Name: "billing", ParkQueue: queue + "-parked", VisibilityTimeout: time.Second, WaitTime: time.Second,
		BackoffBase: time.Millisecond, BackoffMax: 10 * time.Millisecond}
	ctx, crash := context.WithCancel(context.Background())
	defer crash()
	var handed sync.Map
	err = outboxaws.ConsumeSQS(ctx, c, cfg, func(ctx context.Context, m outbox.Message) error {
		err := apply(ctx, m) // commits
		handed.Store(m.ID, true)
		crash() // the process dies before the deletion
		return err
	})
	if err != nil {
		t.Fatalf("ConsumeSQS: %v", err)
	}
	if _, ok := handed.Load(batch[0].ID); !ok || store.appliedCount(batch[0].ID) != 1 {
		t.Fatalf("the first process did not apply the message")
	}
	if n := queueLength(t, c, queue); n != 1 {
		t.Fatalf("the queue holds %d messages after the crash, want the undeleted one", n)
	}
	var second sync.Map
	r := startConsume(t, c, cfg, func(m outbox.Message, _ int) error {
		second.Store(m.ID, true)
		return apply(context.Background(), m)
	})
	r.WaitFor(t, "the message delivered again", func() bool { _, ok := second.Load(batch[0].ID); return ok })
	r.WaitFor(t, "the message deleted", func() bool { return queueLength(t, c, queue) == 0 })
	if n := store.appliedCount(batch[0].ID); n != 1 {
		t.Errorf("message %s applied %d times, want once", batch[0].ID, n)
	}
	if n := count(batch[0].ID); n != 1 {
		t.Errorf("the handler's changes ran %d times, want once (the inbox skips the redelivery)", n)
	}
}

// Messages of one key are handled one at a time in the order received,
// while different keys are handled concurrently.
func TestConsumeSQSKeepsEachKeysOrderWhileKeysRunConcurrently(t *testing.T) {
	t.Parallel()
	srv := awstest.Start(t)
	queue := srv.Queue(t, "outboxaws-consume-", nil)
	c := srv.SQSConsumerClient(t)
	batch := consumetest.KeyedBatch("orders.created", 40, 4)
	// One request at a time: goaws then keeps the order sent.
	for i := 0; i < len(batch); i += 10 {
		publishSQS(t, srv, queue, batch[i:i+10]...)
	}
	keys := consumetest.NewKeyOrder()
	r := startConsume(t, c, outboxaws.ConsumerSQSConfig{Queue: queue, Name: "billing", ParkQueue: queue + "-parked", Concurrency: 4},
		func(m outbox.Message, try int) error {
			keys.Enter(m.Key)
			defer keys.Leave(m.Key)
			time.Sleep(2 * time.Millisecond) // a handler's transaction
			if m.ID == batch[4].ID && try == 1 {
				return errors.New("database busy (injected)") // its key waits for it
			}
			return nil
		})
	r.WaitHandled(t, batch...)
	keys.Require(t, batch, r.HandledIDs())
}
