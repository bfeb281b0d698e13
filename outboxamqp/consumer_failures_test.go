package outboxamqp_test

import (
	"context"
	"log/slog"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/amqptest"
	"github.com/go-outbox/outbox/outboxamqp"
	"github.com/go-outbox/outbox/publishertest"
	"github.com/go-outbox/outbox/relaytest"
)

// running is a Consume under way: its handled messages, its logs, and its
// result once it returned.
type running struct {
	done chan error
	logs *relaytest.LogCapture

	mu   sync.Mutex
	seen map[uuid.UUID]int
}

// startConsume runs Consume in the background, logging to a capture; the
// test's cleanup stops it and checks that it returned.
func startConsume(t *testing.T, url string, cfg outboxamqp.ConsumerConfig) *running {
	t.Helper()
	r := &running{done: make(chan error, 1), logs: &relaytest.LogCapture{}, seen: map[uuid.UUID]int{}}
	cfg.Logger = slog.New(r.logs)
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		r.done <- outboxamqp.Consume(ctx, url, cfg, func(_ context.Context, m outbox.Message) error {
			r.mu.Lock()
			defer r.mu.Unlock()
			r.seen[m.ID]++
			return nil
		})
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-r.done:
		case <-time.After(10 * time.Second):
			t.Errorf("Consume did not return within 10s after its context ended; logs:\n%s", r.logs)
		}
	})
	return r
}

// waitFor waits until cond holds, failing the test if Consume returns first
// or 20s pass.
func (r *running) waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.After(20 * time.Second)
	for !cond() {
		select {
		case err := <-r.done:
			r.done <- err // for the cleanup
			t.Fatalf("Consume returned %v while its context lives, before %s; logs:\n%s", err, what, r.logs)
		case <-deadline:
			t.Fatalf("timed out after 20s waiting for %s; logs:\n%s", what, r.logs)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func (r *running) waitHandled(t *testing.T, m outbox.Message) {
	t.Helper()
	r.waitFor(t, "message "+m.ID.String()+" was handled", func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.seen[m.ID] > 0
	})
}

func (r *running) waitLog(t *testing.T, what string, level slog.Level, words ...string) {
	t.Helper()
	r.waitFor(t, what, func() bool { return r.logs.Has(level, words...) })
}

// publishOne publishes one fresh message to d.
func publishOne(t *testing.T, pub *outboxamqp.Publisher, d amqptest.Destination) outbox.Message {
	t.Helper()
	m := publishertest.Messages(d.RoutingKey, 1)[0]
	for _, err := range pub.Publish(ctxFor(t, 30*time.Second), []outbox.Message{m}) {
		if err != nil {
			t.Fatalf("publish %s: %v", m.ID, err)
		}
	}
	return m
}

// declareQueue declares d's queue (durable, as amqptest.Declare does) and
// binds it to d's exchange.
func declareQueue(t *testing.T, url string, d amqptest.Destination) {
	t.Helper()
	ch, err := amqptest.Dial(t, url).Channel()
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	if _, err := ch.QueueDeclare(d.Queue, true, false, false, false, nil); err != nil {
		t.Fatalf("declare queue %s: %v", d.Queue, err)
	}
	if err := ch.QueueBind(d.Queue, d.RoutingKey, d.Exchange, false, nil); err != nil {
		t.Fatalf("bind queue %s: %v", d.Queue, err)
	}
}

func deleteQueue(t *testing.T, url, queue string) {
	t.Helper()
	ch, err := amqptest.Dial(t, url).Channel()
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	if _, err := ch.QueueDelete(queue, false, false, false); err != nil {
		t.Fatalf("delete queue %s: %v", queue, err)
	}
}

// A queue deleted under a running consumer needs an operator: Consume logs
// it at ERROR level naming the queue, not as a lost connection, and once
// the queue is declared again it consumes again and says so.
func TestConsumeLogsADeletedQueueAtErrorAndConsumesAgainOnceItIsDeclared(t *testing.T) {
	t.Parallel()
	url := amqptest.URL(t)
	d := amqptest.Declare(t, url)
	pub := dial(t, url, outboxamqp.Config{Exchange: d.Exchange})
	r := startConsume(t, url, outboxamqp.ConsumerConfig{Queue: d.Queue, Name: "billing", BackoffBase: 10 * time.Millisecond, BackoffMax: 100 * time.Millisecond})
	r.waitHandled(t, publishOne(t, pub, d))

	deleteQueue(t, url, d.Queue)
	r.waitLog(t, "an ERROR log naming the deleted queue", slog.LevelError, d.Queue, "billing")
	declareQueue(t, url, d)
	r.waitHandled(t, publishOne(t, pub, d))
	r.waitLog(t, "an INFO log that the consumer is back", slog.LevelInfo, "billing", "back")
	if r.logs.Has(slog.LevelWarn, "lost its connection") {
		t.Errorf("the missing queue was logged as a lost connection:\n%s", r.logs)
	}
}

// A consumer started before its queue exists logs the missing queue at
// ERROR level, and starts consuming once the queue is declared.
func TestConsumeLogsAMissingQueueAtErrorAndStartsOnceItIsDeclared(t *testing.T) {
	t.Parallel()
	url := amqptest.URL(t)
	d := amqptest.Declare(t, url)
	deleteQueue(t, url, d.Queue)
	pub := dial(t, url, outboxamqp.Config{Exchange: d.Exchange})
	r := startConsume(t, url, outboxamqp.ConsumerConfig{Queue: d.Queue, Name: "billing", BackoffBase: 10 * time.Millisecond, BackoffMax: 100 * time.Millisecond})

	r.waitLog(t, "an ERROR log naming the missing queue", slog.LevelError, d.Queue, "not found")
	declareQueue(t, url, d)
	r.waitHandled(t, publishOne(t, pub, d))
	r.waitLog(t, "an INFO log that the consumer is back", slog.LevelInfo, "billing", "back")
}

// Refused credentials need an operator: Consume logs them at ERROR level,
// at most once per ConfigErrorLogInterval, and keeps trying.
func TestConsumeLogsRefusedCredentialsAtErrorOnce(t *testing.T) {
	t.Parallel()
	good := amqptest.URL(t)
	u, err := url.Parse(good)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword(u.User.Username(), "not-the-password")
	d := amqptest.Declare(t, good)
	r := startConsume(t, u.String(), outboxamqp.ConsumerConfig{Queue: d.Queue, Name: "billing", BackoffBase: 10 * time.Millisecond, BackoffMax: 20 * time.Millisecond})
	r.waitLog(t, "an ERROR log of the refused credentials", slog.LevelError, "billing", "credentials")
	// The broker answers a refused login after seconds: one more attempt,
	// not logged at ERROR level again, shows the bound.
	r.waitFor(t, "another attempt", func() bool { return count(r.logs, slog.LevelDebug, "still") >= 1 })
	if n := count(r.logs, slog.LevelError, "credentials"); n != 1 {
		t.Errorf("refused credentials logged %d times at ERROR level within ConfigErrorLogInterval; want once:\n%s", n, r.logs)
	}
	if r.logs.Has(slog.LevelWarn, "lost its connection") {
		t.Errorf("refused credentials were logged as a lost connection:\n%s", r.logs)
	}
}

// count counts the lines of logs at exactly level holding word.
func count(logs *relaytest.LogCapture, level slog.Level, word string) int {
	n := 0
	for _, line := range strings.Split(logs.String(), "\n") {
		if strings.HasPrefix(line, level.String()+" ") && strings.Contains(line, word) {
			n++
		}
	}
	return n
}
