package outboxnats_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/natstest"
	"github.com/go-outbox/outbox/outboxnats"
	"github.com/go-outbox/outbox/publishertest"
	"github.com/go-outbox/outbox/relaytest"
)

// consumerSetup is a stream with msgs published to it by the Publisher.
func consumerSetup(t *testing.T, msgs []outbox.Message) (jetstream.JetStream, string) {
	t.Helper()
	srv := natstest.Start(t)
	admin := srv.JetStream(t)
	stream, prefix := newStream(t, admin, jetstream.StreamConfig{})
	pub := dial(t, srv, outboxnats.Config{SubjectPrefix: prefix, Stream: stream})
	for i, err := range pub.Publish(ctxFor(t, 30*time.Second), msgs) {
		if err != nil {
			t.Fatalf("publish %s: %v", msgs[i].ID, err)
		}
	}
	return admin, stream
}

// consume runs Consume until stop is called, which waits for it to return.
func consume(t *testing.T, js jetstream.JetStream, cfg outboxnats.ConsumerConfig, fn func(context.Context, outbox.Message) error) (stop func()) {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = relaytest.TestLogger(t)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- outboxnats.Consume(ctx, js, cfg, fn) }()
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

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Each message reaches the handler with its id, topic, key, payload and
// headers; a failure is retried in place; every message ends acknowledged.
func TestConsumeHandsOverEachMessageAndAcknowledgesAfterTheHandler(t *testing.T) {
	t.Parallel()
	batch := publishertest.Messages("orders.created", 5)
	js, stream := consumerSetup(t, batch)
	var (
		mu    sync.Mutex
		seen  = map[uuid.UUID]outbox.Message{}
		tries = map[uuid.UUID]int{}
	)
	stop := consume(t, js, outboxnats.ConsumerConfig{Stream: stream, Durable: "billing", BackoffBase: time.Millisecond, BackoffMax: 5 * time.Millisecond},
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
	waitUntil(t, "every message handled", func() bool { mu.Lock(); defer mu.Unlock(); return len(seen) == len(batch) })
	stop()
	got := make([]publishertest.Received, 0, len(batch))
	for _, m := range batch {
		s := seen[m.ID]
		got = append(got, publishertest.Received{ID: s.ID.String(), Topic: s.Topic, Key: s.Key, Payload: s.Payload, Headers: s.Headers})
	}
	publishertest.RequireReceived(t, publishertest.Harness{Receive: func(context.Context, int) ([]publishertest.Received, error) { return got, nil }}, batch)
	if tries[batch[1].ID] != 2 {
		t.Errorf("the failing message was tried %d times, want 2", tries[batch[1].ID])
	}
	cons, err := js.Consumer(ctxFor(t, 10*time.Second), stream, "billing")
	if err != nil {
		t.Fatal(err)
	}
	info, err := cons.Info(ctxFor(t, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if info.NumAckPending != 0 || info.AckFloor.Stream != uint64(len(batch)) {
		t.Fatalf("consumer: %d awaiting acknowledgement, ack floor %d; want every message acknowledged", info.NumAckPending, info.AckFloor.Stream)
	}
}

// A process that dies after its handler committed but before the
// acknowledgement went out gets the message again: with an inbox, the
// redelivery is skipped.
func TestAMessageNotAcknowledgedIsDeliveredAgain(t *testing.T) {
	t.Parallel()
	batch := publishertest.Messages("orders.created", 1)
	js, stream := consumerSetup(t, batch)
	cfg := outboxnats.ConsumerConfig{Stream: stream, Durable: "billing", AckWait: 500 * time.Millisecond}
	var deliveries atomic.Int32
	ctx, crash := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- outboxnats.Consume(ctx, js, cfg, func(context.Context, outbox.Message) error {
			deliveries.Add(1)
			crash() // the process dies before the acknowledgement
			return nil
		})
	}()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	stop := consume(t, js, cfg, func(context.Context, outbox.Message) error { deliveries.Add(1); return nil })
	waitUntil(t, "the redelivery", func() bool { return deliveries.Load() == 2 })
	stop()
}

// Messages of one key are handled one at a time in stream order, while
// different keys are handled concurrently.
func TestConsumeKeepsEachKeysOrderWhileKeysRunConcurrently(t *testing.T) {
	t.Parallel()
	var batch []outbox.Message
	for i := range 40 {
		m := publishertest.Messages("orders.created", 1)[0]
		m.Key = fmt.Sprintf("k%d", i%4)
		batch = append(batch, m)
	}
	js, stream := consumerSetup(t, batch)
	var (
		mu                  sync.Mutex
		order               = map[string][]uuid.UUID{}
		running, maxRunning int
		handled             int
	)
	stop := consume(t, js, outboxnats.ConsumerConfig{Stream: stream, Durable: "billing", Concurrency: 4},
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
	waitUntil(t, "every message handled", func() bool { mu.Lock(); defer mu.Unlock(); return handled == len(batch) })
	stop()
	for i, m := range batch {
		want := 0
		for _, earlier := range batch[:i] {
			if earlier.Key == m.Key {
				want++
			}
		}
		if got := order[m.Key]; len(got) <= want || got[want] != m.ID {
			t.Fatalf("key %s: message %s handled out of order (%v)", m.Key, m.ID, got)
		}
	}
	if maxRunning < 2 {
		t.Errorf("at most %d message(s) handled at once; want keys handled concurrently", maxRunning)
	}
}

// A message whose handler keeps failing is parked after MaxDeliver attempts,
// logged with its id and error; the others go on.
func TestAMessageThatKeepsFailingIsParkedAfterMaxDeliverAttempts(t *testing.T) {
	t.Parallel()
	batch := publishertest.Messages("orders.created", 3)
	js, stream := consumerSetup(t, batch)
	logs := &relaytest.LogCapture{}
	var (
		mu       sync.Mutex
		attempts = map[uuid.UUID]int{}
	)
	stop := consume(t, js, outboxnats.ConsumerConfig{Stream: stream, Durable: "billing", MaxDeliver: 3,
		BackoffBase: time.Millisecond, BackoffMax: 5 * time.Millisecond, Logger: slog.New(logs)},
		func(_ context.Context, m outbox.Message) error {
			mu.Lock()
			defer mu.Unlock()
			attempts[m.ID]++
			if m.ID == batch[0].ID {
				return errors.New("no such customer (injected)")
			}
			return nil
		})
	waitUntil(t, "the failing message parked", func() bool {
		return logs.Has(slog.LevelError, "parked", batch[0].ID.String(), "no such customer")
	})
	waitUntil(t, "the other messages handled", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return attempts[batch[1].ID] == 1 && attempts[batch[2].ID] == 1
	})
	stop()
	mu.Lock()
	defer mu.Unlock()
	if attempts[batch[0].ID] != 3 {
		t.Fatalf("the failing message was tried %d times, want MaxDeliver = 3", attempts[batch[0].ID])
	}
}

// A pause between attempts as long as AckWait would make the server deliver
// the message again meanwhile: such a BackoffMax is refused, naming both.
func TestConsumeRefusesABackoffMaxNotUnderAckWait(t *testing.T) {
	err := outboxnats.Consume(t.Context(), nil, outboxnats.ConsumerConfig{Stream: "ORDERS", Durable: "billing", AckWait: time.Second, BackoffMax: 2 * time.Second},
		func(context.Context, outbox.Message) error { return nil })
	var cfgErr *outbox.ConfigError
	if !errors.As(err, &cfgErr) || cfgErr.Field != "outboxnats.ConsumerConfig.BackoffMax" || !strings.Contains(err.Error(), "AckWait 1s") {
		t.Fatalf("Consume with BackoffMax 2s and AckWait 1s: %v; want a *outbox.ConfigError naming BackoffMax and AckWait", err)
	}
}
