package outboxnats_test

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/natstest"
	"github.com/go-outbox/outbox/outboxnats"
	"github.com/go-outbox/outbox/publishertest"
	"github.com/go-outbox/outbox/relaytest"
)

// running is a Consume under way: its handled messages, its logs, and its
// result once it returned.
type running struct {
	cancel context.CancelFunc
	done   chan error
	logs   *relaytest.LogCapture

	mu   sync.Mutex
	seen map[uuid.UUID]int
}

// startConsume runs Consume on js in the background, logging to a capture;
// the test's cleanup stops it and checks it returned.
func startConsume(t *testing.T, js jetstream.JetStream, cfg outboxnats.ConsumerConfig) *running {
	t.Helper()
	r := &running{done: make(chan error, 1), logs: &relaytest.LogCapture{}, seen: map[uuid.UUID]int{}}
	cfg.Logger = slog.New(r.logs)
	var ctx context.Context
	ctx, r.cancel = context.WithCancel(context.Background())
	go func() {
		r.done <- outboxnats.Consume(ctx, js, cfg, func(_ context.Context, m outbox.Message) error {
			r.mu.Lock()
			defer r.mu.Unlock()
			r.seen[m.ID]++
			return nil
		})
	}()
	t.Cleanup(func() {
		r.cancel()
		select {
		case <-r.done:
		case <-time.After(10 * time.Second):
			t.Errorf("Consume did not return within 10s after its context ended")
		}
	})
	return r
}

func (r *running) handled(id uuid.UUID) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.seen[id] > 0
}

// waitLog waits until a record at level or above holds every one of words,
// failing the test if Consume returns first or 20s pass.
func (r *running) waitLog(t *testing.T, what string, level slog.Level, words ...string) {
	t.Helper()
	r.waitFor(t, what, 20*time.Second, func() bool { return r.logs.Has(level, words...) })
}

// waitFor waits until cond holds, failing the test if Consume returns first
// or the deadline passes.
func (r *running) waitFor(t *testing.T, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.After(d)
	for !cond() {
		select {
		case err := <-r.done:
			r.done <- err // for the cleanup
			t.Fatalf("Consume returned %v while its context lives, before %s; logs:\n%s", err, what, r.logs)
		case <-deadline:
			t.Fatalf("timed out after %v waiting for %s; logs:\n%s", d, what, r.logs)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// waitHandled waits until m was handled, failing the test if Consume returns
// first or the deadline passes.
func (r *running) waitHandled(t *testing.T, m outbox.Message, d time.Duration) {
	t.Helper()
	r.waitFor(t, "message "+m.ID.String()+" was handled", d, func() bool { return r.handled(m.ID) })
}

// publishOne publishes one fresh message with topic through pub.
func publishOne(t *testing.T, pub *outboxnats.Publisher, topic string) outbox.Message {
	t.Helper()
	m := publishertest.Messages(topic, 1)[0]
	for _, err := range pub.Publish(ctxFor(t, 30*time.Second), []outbox.Message{m}) {
		if err != nil {
			t.Fatalf("publish %s: %v", m.ID, err)
		}
	}
	return m
}

// Consume creates its durable consumer, so when someone deletes it on the
// server Consume creates it again and goes on with the messages published
// afterwards, instead of returning nil and leaving the process idle.
func TestConsumeCreatesItsDurableConsumerAgainWhenItIsDeletedOnTheServer(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	admin := srv.JetStream(t)
	stream, prefix := newStream(t, admin, jetstream.StreamConfig{})
	pub := dial(t, srv, outboxnats.Config{SubjectPrefix: prefix, Stream: stream})
	r := startConsume(t, srv.JetStream(t), outboxnats.ConsumerConfig{Stream: stream, Durable: "billing", BackoffBase: 10 * time.Millisecond, BackoffMax: 50 * time.Millisecond})
	r.waitHandled(t, publishOne(t, pub, "orders.created"), 20*time.Second)

	if err := admin.DeleteConsumer(ctxFor(t, 10*time.Second), stream, "billing"); err != nil {
		t.Fatal(err)
	}
	r.waitLog(t, "a log that the consumer was deleted", slog.LevelWarn, "billing", "deleted")
	r.waitHandled(t, publishOne(t, pub, "orders.created"), 20*time.Second)
	r.waitLog(t, "an INFO log that the consumer is back", slog.LevelInfo, "billing", "back")
}

// A stream deleted under a running consumer needs an operator: Consume logs
// it at ERROR level naming the stream, and consumes again, saying so, once
// the stream is back.
func TestConsumeLogsAMissingStreamAtErrorAndGoesOnWhenItIsBack(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	admin := srv.JetStream(t)
	stream, prefix := newStream(t, admin, jetstream.StreamConfig{})
	pub := dial(t, srv, outboxnats.Config{SubjectPrefix: prefix, Stream: stream})
	r := startConsume(t, srv.JetStream(t), outboxnats.ConsumerConfig{Stream: stream, Durable: "billing", BackoffBase: 10 * time.Millisecond, BackoffMax: 50 * time.Millisecond})
	r.waitHandled(t, publishOne(t, pub, "orders.created"), 20*time.Second)

	if err := admin.DeleteStream(ctxFor(t, 10*time.Second), stream); err != nil {
		t.Fatal(err)
	}
	r.waitLog(t, "an ERROR log naming the missing stream", slog.LevelError, stream, "billing", "not found")
	if _, err := admin.CreateStream(ctxFor(t, 10*time.Second), jetstream.StreamConfig{Name: stream, Subjects: []string{prefix + ">"}}); err != nil {
		t.Fatal(err)
	}
	r.waitHandled(t, publishOne(t, pub, "orders.created"), 20*time.Second)
	r.waitLog(t, "an INFO log that the consumer is back", slog.LevelInfo, "billing", "back")
}

// When nats.go gives up reconnecting (its MaxReconnects spent) the
// connection is closed for good and nothing more can be consumed on it:
// Consume returns an error saying so, rather than nil, so that the process
// does not run on consuming nothing.
func TestConsumeReturnsAnErrorWhenTheConnectionIsClosedForGood(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	admin := srv.JetStream(t)
	stream, prefix := newStream(t, admin, jetstream.StreamConfig{})
	pub := dial(t, srv, outboxnats.Config{SubjectPrefix: prefix, Stream: stream})
	js, err := jetstream.New(srv.Connect(t, nats.MaxReconnects(1)))
	if err != nil {
		t.Fatal(err)
	}
	r := startConsume(t, js, outboxnats.ConsumerConfig{Stream: stream, Durable: "billing"})
	r.waitHandled(t, publishOne(t, pub, "orders.created"), 20*time.Second)

	srv.Shutdown()
	select {
	case err := <-r.done:
		r.done <- err // for the cleanup
		if err == nil {
			t.Fatalf("Consume returned nil while its context lives, after its connection closed for good; logs:\n%s", r.logs)
		}
		if !errors.Is(err, nats.ErrConnectionClosed) {
			t.Errorf("Consume returned %q; want an error matching nats.ErrConnectionClosed", err)
		}
		t.Logf("Consume returned: %v", err)
	case <-time.After(20 * time.Second):
		t.Fatalf("Consume did not return within 20s after its connection closed for good; logs:\n%s", r.logs)
	}
}
