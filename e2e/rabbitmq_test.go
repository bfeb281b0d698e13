package e2e_test

import (
	"context"
	"sync"
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

func TestEndToEndFromPostgreSQLThroughTheRelayToRabbitMQ(t *testing.T) {
	t.Parallel()
	o := newPGOutbox(t)
	url := amqptest.URL(t)
	d := amqptest.Declare(t, url)
	consumer := amqptest.Consume(t, url, d.Queue)
	h := publishertest.Harness{
		Publisher: openAMQP(t, url, outboxamqp.Config{Exchange: d.Exchange}),
		Topic:     d.RoutingKey,
		Receive: func(ctx context.Context, n int) ([]publishertest.Received, error) {
			ds, err := consumer.Next(ctx, n)
			if err != nil {
				return nil, err
			}
			out := make([]publishertest.Received, 0, len(ds))
			for _, d := range ds {
				m, err := outboxamqp.FromDelivery(d)
				if err != nil {
					return nil, err
				}
				out = append(out, publishertest.Received{ID: m.ID.String(), Topic: m.Topic, Key: m.Key, Payload: m.Payload, Headers: m.Headers})
			}
			return out, nil
		},
	}
	publishertest.EndToEnd(t, h, o.store, o.write)
}

// openAMQP returns a publisher that connects on first use, closed when the
// test ends.
func openAMQP(t *testing.T, url string, cfg outboxamqp.Config) *outboxamqp.Publisher {
	t.Helper()
	cfg.Logger = relaytest.TestLogger(t)
	p, err := outboxamqp.Open(url, cfg)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// RabbitMQ is stopped for real in the middle of a relay run and started
// again: the relay retries, every committed message reaches the queue at
// least once, and every message the store marks published was confirmed by
// the broker (it is in the queue). Not parallel: it takes the broker away.
func TestRabbitMQStoppedAndRestartedMidRunLosesNothing(t *testing.T) {
	broker := amqptest.Restartable(t)
	start := time.Now()
	o := newPGOutbox(t)
	d := amqptest.Declare(t, broker.URL)
	consumer := amqptest.Consume(t, broker.URL, d.Queue)
	rec := newOutcomes(openAMQP(t, broker.URL, outboxamqp.Config{Exchange: d.Exchange, ConfirmTimeout: 2 * time.Second, DialTimeout: 2 * time.Second}))
	relaytest.StartRelay(t, o.store, rec, outbox.Config{
		BatchSize: 20, Workers: 4, LeaseDuration: 10 * time.Second, MaxAttempts: 10000,
		BackoffBase: 20 * time.Millisecond, BackoffMax: 300 * time.Millisecond,
		ActivePollInterval: 5 * time.Millisecond, PollInterval: 50 * time.Millisecond,
		Retention: time.Hour, // keep published rows, to check their state
	})

	ctx := ctxFor(t, 3*time.Minute)
	var (
		mu      sync.Mutex
		written []uuid.UUID
	)
	writeErr := make(chan error, 1)
	stopWriting := make(chan struct{})
	// A steady stream of commits, so that batches are in flight when the
	// broker goes.
	go func() {
		defer close(writeErr)
		for {
			select {
			case <-stopWriting:
				return
			case <-time.After(10 * time.Millisecond):
			}
			batch := publishertest.Messages(d.RoutingKey, 10)
			if err := o.writeBatch(ctx, batch); err != nil {
				writeErr <- err
				return
			}
			mu.Lock()
			for _, m := range batch {
				written = append(written, m.ID)
			}
			mu.Unlock()
		}
	}()
	received := func() int { return len(consumer.All()) }

	waitFor(t, 30*time.Second, "200 messages in the queue before the outage", func() bool { return received() >= 200 })
	okBefore, failedBefore := rec.counts()
	broker.Stop(t)
	_, failedAtStop := rec.counts()
	waitFor(t, 30*time.Second, "retryable failures during the outage", func() bool { _, f := rec.counts(); return f > failedAtStop })
	broker.Start(t)
	restarted := time.Now()
	n := received()
	waitFor(t, 60*time.Second, "200 more messages after the restart", func() bool { return received() >= n+200 })
	close(stopWriting)
	if err := <-writeErr; err != nil {
		t.Fatalf("write: %v", err)
	}
	mu.Lock()
	all := append([]uuid.UUID(nil), written...)
	mu.Unlock()

	waitFor(t, 60*time.Second, "the outbox to drain after the restart", func() bool {
		st, err := o.store.Stats(ctx)
		return err == nil && st.Pending == 0
	})
	st, err := o.store.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Dead != 0 || st.Published != int64(len(all)) {
		t.Fatalf("stats %+v after the run; want all %d messages published, none dead", st, len(all))
	}
	rec.mu.Lock()
	if len(rec.permanent) > 0 {
		t.Fatalf("%d permanent outcomes, e.g. %v; a broker outage must be retryable", len(rec.permanent), rec.permanent[0])
	}
	t.Logf("a retryable failure of the outage: %v", rec.lastErr)
	rec.mu.Unlock()

	// Every message reaches the queue; the last copies may still be on the
	// way to the consumer.
	count := func(ds []amqp.Delivery) map[string]int {
		seen := map[string]int{}
		for _, dv := range ds {
			seen[dv.MessageId]++
		}
		return seen
	}
	inQueue := func() map[string]int { return count(consumer.All()) }
	if err := consumer.WaitFor(ctx, func(ds []amqp.Delivery) bool {
		seen := count(ds)
		for _, id := range all {
			if seen[id.String()] == 0 {
				return false
			}
		}
		return true
	}); err != nil {
		seen := inQueue()
		lost := 0
		for _, id := range all {
			if seen[id.String()] == 0 {
				if lost++; lost <= 5 {
					m, _ := o.store.Get(ctx, id)
					t.Errorf("message %s (status %s, %d attempts) never reached the queue", id, m.Status, m.Attempts)
				}
			}
		}
		t.Fatalf("%d of %d messages lost: %v", lost, len(all), err)
	}
	seen := inQueue()
	duplicates := 0
	for _, id := range all {
		m, err := o.store.Get(ctx, id)
		if err != nil {
			t.Fatalf("message %s: %v", id, err)
		}
		if m.Status != outbox.StatusPublished {
			t.Errorf("message %s has status %s, want published", id, m.Status)
		}
		duplicates += seen[id.String()] - 1
	}
	_, failedAll := rec.counts()
	t.Logf("%d messages; %d confirmed before the stop; retryable failures: %d while stopping, %d in all; %d duplicates in the queue; consumer connected %d times; drained %v after the restart; %v in all",
		len(all), okBefore, failedAtStop-failedBefore, failedAll, duplicates, consumer.Connects(),
		time.Since(restarted).Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
}
