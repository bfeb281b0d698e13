package outboxamqp_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/amqptest"
	"github.com/go-outbox/outbox/outboxamqp"
	"github.com/go-outbox/outbox/publishertest"
	"github.com/go-outbox/outbox/relaytest"
)

// queueWithParking is a destination whose queue dead-letters to a parking
// queue, with msgs published to it.
func queueWithParking(t *testing.T, msgs []outbox.Message) (url string, d amqptest.Destination, parked string) {
	t.Helper()
	url = amqptest.URL(t)
	d = amqptest.Declare(t, url)
	ch, err := amqptest.Dial(t, url).Channel()
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	// The queue Declare made has no dead-letter exchange: make one that has.
	parked, queue := d.Queue+".parked", d.Queue+".consumed"
	if _, err := ch.QueueDeclare(parked, false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare(queue, false, false, false, false, amqp.Table{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": parked}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ch, err := amqptest.Dial(t, url).Channel()
		if err != nil {
			return
		}
		defer ch.Close()
		_, _ = ch.QueueDelete(queue, false, false, false)
		_, _ = ch.QueueDelete(parked, false, false, false)
	})
	if err := ch.QueueBind(queue, d.RoutingKey, d.Exchange, false, nil); err != nil {
		t.Fatal(err)
	}
	d.Queue = queue
	pub := dial(t, url, outboxamqp.Config{Exchange: d.Exchange})
	for i := range msgs {
		msgs[i].Topic = d.RoutingKey
	}
	for i, err := range pub.Publish(ctxFor(t, 30*time.Second), msgs) {
		if err != nil {
			t.Fatalf("publish %s: %v", msgs[i].ID, err)
		}
	}
	return url, d, parked
}

// consumeQueue runs Consume until stop is called, which waits for it.
func consumeQueue(t *testing.T, url string, cfg outboxamqp.ConsumerConfig, fn func(context.Context, outbox.Message) error) (stop func()) {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = relaytest.TestLogger(t)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- outboxamqp.Consume(ctx, url, cfg, fn) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Consume: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// queueDepth returns the messages ready in queue.
func queueDepth(t *testing.T, url, queue string) int {
	t.Helper()
	ch, err := amqptest.Dial(t, url).Channel()
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	q, err := ch.QueueDeclarePassive(queue, false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	return q.Messages
}

// Each message reaches the handler as the publisher sent it, a failure is
// retried in place, and every message is acknowledged: a new consumer finds
// the queue empty.
func TestConsumeHandsOverEachMessageAndAcknowledgesAfterTheHandler(t *testing.T) {
	t.Parallel()
	batch := publishertest.Messages("", 5)
	url, d, _ := queueWithParking(t, batch)
	var (
		mu    sync.Mutex
		seen  = map[uuid.UUID]outbox.Message{}
		tries = map[uuid.UUID]int{}
	)
	stop := consumeQueue(t, url, outboxamqp.ConsumerConfig{Queue: d.Queue, Name: "billing", BackoffBase: time.Millisecond, BackoffMax: 5 * time.Millisecond},
		func(_ context.Context, m outbox.Message) error {
			mu.Lock()
			defer mu.Unlock()
			tries[m.ID]++
			if m.ID == batch[1].ID && tries[m.ID] == 1 {
				return errors.New("database busy (injected)")
			}
			seen[m.ID] = m
			return nil
		})
	waitFor(t, 20*time.Second, "every message handled", func() bool { mu.Lock(); defer mu.Unlock(); return len(seen) == len(batch) })
	stop()
	for _, m := range batch {
		s := seen[m.ID]
		if s.Topic != m.Topic || s.Key != m.Key || string(s.Payload) != string(m.Payload) {
			t.Errorf("message %s handed over as %+v", m.ID, s)
		}
	}
	if tries[batch[1].ID] != 2 {
		t.Errorf("the failing message was tried %d times, want 2", tries[batch[1].ID])
	}
	if n := queueDepth(t, url, d.Queue); n != 0 {
		t.Fatalf("%d messages back in the queue after the consumer stopped; want every one acknowledged", n)
	}
}

// A consumer that goes away after its handler's commit but before the
// acknowledgement (here: stopped while the handler has not returned) leaves
// the message to the broker, which delivers it again.
func TestAMessageNotAcknowledgedIsDeliveredAgain(t *testing.T) {
	t.Parallel()
	batch := publishertest.Messages("", 1)
	url, d, _ := queueWithParking(t, batch)
	cfg := outboxamqp.ConsumerConfig{Queue: d.Queue, Name: "billing"}
	var deliveries atomic.Int32
	stopFirst := consumeQueue(t, url, cfg, func(ctx context.Context, _ outbox.Message) error {
		deliveries.Add(1)
		<-ctx.Done() // committed; the process dies before acknowledging
		return ctx.Err()
	})
	waitFor(t, 20*time.Second, "the first delivery", func() bool { return deliveries.Load() == 1 })
	stopFirst()
	stop := consumeQueue(t, url, cfg, func(context.Context, outbox.Message) error { deliveries.Add(1); return nil })
	waitFor(t, 20*time.Second, "the redelivery", func() bool { return deliveries.Load() == 2 })
	stop()
}

// Messages of one key are handled one at a time in queue order, different
// keys concurrently.
func TestConsumeKeepsEachKeysOrderWhileKeysRunConcurrently(t *testing.T) {
	t.Parallel()
	var batch []outbox.Message
	for i := range 40 {
		m := publishertest.Messages("", 1)[0]
		m.Key = fmt.Sprintf("k%d", i%4)
		batch = append(batch, m)
	}
	url, d, _ := queueWithParking(t, batch)
	var (
		mu                  sync.Mutex
		order               = map[string][]uuid.UUID{}
		running, maxRunning int
		handled             int
	)
	stop := consumeQueue(t, url, outboxamqp.ConsumerConfig{Queue: d.Queue, Name: "billing", Concurrency: 4},
		func(_ context.Context, m outbox.Message) error {
			mu.Lock()
			running++
			maxRunning = max(maxRunning, running)
			mu.Unlock()
			time.Sleep(2 * time.Millisecond) // a handler's transaction
			mu.Lock()
			defer mu.Unlock()
			running--
			order[m.Key] = append(order[m.Key], m.ID)
			handled++
			return nil
		})
	waitFor(t, 20*time.Second, "every message handled", func() bool { mu.Lock(); defer mu.Unlock(); return handled == len(batch) })
	stop()
	position := map[string]int{}
	for _, m := range batch {
		i := position[m.Key]
		if got := order[m.Key]; len(got) <= i || got[i] != m.ID {
			t.Fatalf("key %s: message %s handled out of order (%v)", m.Key, m.ID, got)
		}
		position[m.Key]++
	}
	if maxRunning < 2 {
		t.Errorf("at most %d message(s) handled at once; want keys handled concurrently", maxRunning)
	}
}

// A message whose handler keeps failing is parked after MaxDeliver attempts
// in the queue's dead-letter exchange, and logged with its id and error.
func TestAMessageThatKeepsFailingIsParkedInTheDeadLetterExchange(t *testing.T) {
	t.Parallel()
	batch := publishertest.Messages("", 2)
	url, d, parked := queueWithParking(t, batch)
	logs := &relaytest.LogCapture{}
	var attempts atomic.Int32
	stop := consumeQueue(t, url, outboxamqp.ConsumerConfig{Queue: d.Queue, Name: "billing", MaxDeliver: 3,
		BackoffBase: time.Millisecond, BackoffMax: 5 * time.Millisecond, Logger: slog.New(logs)},
		func(_ context.Context, m outbox.Message) error {
			if m.ID == batch[0].ID {
				attempts.Add(1)
				return errors.New("no such customer (injected)")
			}
			return nil
		})
	waitFor(t, 20*time.Second, "the failing message parked", func() bool { return queueDepth(t, url, parked) == 1 })
	stop()
	if n := attempts.Load(); n != 3 {
		t.Errorf("the failing message was tried %d times, want MaxDeliver = 3", n)
	}
	if !logs.Has(slog.LevelError, "parked", batch[0].ID.String(), "no such customer") {
		t.Errorf("no ERROR log naming the parked message and its error:\n%s", logs)
	}
}
