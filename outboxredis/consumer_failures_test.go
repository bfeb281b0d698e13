package outboxredis_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/redistest"
	"github.com/go-outbox/outbox/outboxredis"
	"github.com/go-outbox/outbox/publishertest"
	"github.com/go-outbox/outbox/relaytest"
)

// fastReconnects are backoffs short enough for tests, also between two
// attempts to read the group again.
func fastReconnects(cfg outboxredis.ConsumerConfig) outboxredis.ConsumerConfig {
	cfg.BackoffBase, cfg.BackoffMax = 10*time.Millisecond, 50*time.Millisecond
	return cfg
}

// A consumer group deleted under a running consumer (XGROUP DESTROY) is
// created again, said at WARN level, and the entries appended afterwards are
// consumed, instead of Consume idling or returning.
func TestConsumeCreatesItsGroupAgainWhenItIsDeleted(t *testing.T) {
	t.Parallel()
	c, stream := client(t)
	r := startConsume(t, c, fastReconnects(outboxredis.ConsumerConfig{Stream: stream, Group: "billing"}), nil)
	first := publishertest.Messages("orders.created", 1)[0]
	publish(t, redistest.URL(t), stream, first)
	r.WaitHandled(t, first)

	if err := c.XGroupDestroy(ctxFor(t, 5*time.Second), stream, "billing").Err(); err != nil {
		t.Fatal(err)
	}
	r.WaitFor(t, "a WARN log that the group no longer exists", func() bool { return r.Logs.Has(slog.LevelWarn, "billing", "no longer exists") })
	second := publishertest.Messages("orders.created", 1)[0]
	publish(t, redistest.URL(t), stream, second)
	r.WaitHandled(t, second)
	r.WaitFor(t, "an INFO log that the consumer is back", func() bool { return r.Logs.Has(slog.LevelInfo, "back") })
	r.WaitFor(t, "every entry acknowledged in the new group", func() bool { return pendingCount(t, c, stream, "billing") == 0 })
}

// A stream key holding another type needs an operator: Readiness says so,
// an ERROR log names the key and the fix, once however often the read is
// tried again, and once the key is deleted Consume creates the stream and
// its group and consumes.
func TestAStreamKeyOfAnotherTypeIsLoggedOnceWithTheFixAndConsumingResumesOnceItIsDeleted(t *testing.T) {
	t.Parallel()
	c, stream := client(t)
	if err := c.Set(ctxFor(t, 5*time.Second), stream, "not a stream", 0).Err(); err != nil {
		t.Fatal(err)
	}
	ready := &outboxredis.Readiness{}
	r := startConsume(t, c, fastReconnects(outboxredis.ConsumerConfig{Stream: stream, Group: "billing", Readiness: ready}), nil)
	r.WaitFor(t, "Readiness naming the key of another type", func() bool {
		err := ready.Ready()
		return err != nil && strings.Contains(err.Error(), "holds another type") && strings.Contains(err.Error(), stream)
	})
	r.WaitFor(t, "the read tried again a few times", func() bool { return r.CountLogs(slog.LevelDebug, "still cannot read") >= 3 })
	if n := r.CountLogs(slog.LevelError, stream, "rename or delete that key"); n != 1 {
		t.Fatalf("%d ERROR logs naming the key and the fix; want exactly 1 within ConfigErrorLogInterval; logs:\n%s", n, r.Logs)
	}

	if err := c.Del(ctxFor(t, 5*time.Second), stream).Err(); err != nil {
		t.Fatal(err)
	}
	r.WaitFor(t, "Readiness nil once the key is gone", func() bool { return ready.Ready() == nil })
	m := publishertest.Messages("orders.created", 1)[0]
	publish(t, redistest.URL(t), stream, m)
	r.WaitHandled(t, m)
	if !r.Logs.Has(slog.LevelInfo, "back") {
		t.Errorf("no INFO log that the consumer is back; logs:\n%s", r.Logs)
	}
}

// Consume returns nil once its context ends, within about one blocking read
// (readBlock, 1s) even while no entry comes, and its Readiness says it
// stopped.
func TestConsumeReturnsNilPromptlyWhenItsContextEnds(t *testing.T) {
	t.Parallel()
	c, stream := client(t)
	ready := &outboxredis.Readiness{}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- outboxredis.Consume(ctx, c, outboxredis.ConsumerConfig{Stream: stream, Group: "billing", Readiness: ready, Logger: relaytest.TestLogger(t)},
			func(context.Context, outbox.Message) error { return nil })
	}()
	deadline := time.Now().Add(10 * time.Second)
	for ready.Ready() != nil {
		if time.Now().After(deadline) {
			t.Fatalf("Consume not ready after 10s: %v", ready.Ready())
		}
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond) // into a blocking read
	cancel()
	stopped := time.Now()
	select {
	case err := <-done:
		took := time.Since(stopped)
		t.Logf("Consume returned %v after its context ended", took)
		if took > 1500*time.Millisecond {
			t.Errorf("Consume took %v to return after its context ended; want at most about one blocking read (1s)", took)
		}
		if err != nil {
			t.Errorf("Consume returned %v once its context ended; want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Consume did not return within 10s after its context ended")
	}
	if err := ready.Ready(); err == nil || !strings.Contains(err.Error(), "stopped") {
		t.Errorf("Readiness after Consume returned: %v; want it stopped", err)
	}
}

// A closed client can read nothing more: Consume returns an error matching
// redis.ErrClosed, so that the process does not run on consuming nothing.
func TestConsumeReturnsAnErrorWhenItsClientIsClosed(t *testing.T) {
	t.Parallel()
	shared, stream := client(t)
	opts, err := redis.ParseURL(redistest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(opts)
	m := publishertest.Messages("orders.created", 1)[0]
	publish(t, redistest.URL(t), stream, m)
	r := startConsume(t, c, fastReconnects(outboxredis.ConsumerConfig{Stream: stream, Group: "billing"}), nil)
	r.WaitHandled(t, m)
	r.WaitFor(t, "the entry acknowledged", func() bool { return pendingCount(t, shared, stream, "billing") == 0 })

	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-r.Done():
		r.Done() <- nil // for the cleanup
		if !errors.Is(err, redis.ErrClosed) {
			t.Fatalf("Consume returned %v after its client was closed; want an error matching redis.ErrClosed", err)
		}
		t.Logf("Consume returned: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatalf("Consume did not return within 10s after its client was closed; logs:\n%s", r.Logs)
	}
}

// A Redis server that stops and starts again (empty: it keeps nothing on
// disk) under a running consumer: Readiness turns to an error while it is
// down and back to nil, the group and stream are created again, and every
// message published before and after is handled.
func TestConsumeGoesOnAcrossARedisRestartAndReadinessFollows(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	opts, err := redis.ParseURL(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(opts)
	t.Cleanup(func() { _ = c.Close() })
	const stream = "orders"
	ready := &outboxredis.Readiness{}
	r := startConsume(t, c, fastReconnects(outboxredis.ConsumerConfig{Stream: stream, Group: "billing", Readiness: ready}), nil)
	before := publishertest.Messages("orders.created", 5)
	publish(t, srv.URL, stream, before...)
	r.WaitHandled(t, before...)
	r.WaitFor(t, "Readiness nil", func() bool { return ready.Ready() == nil })

	srv.Stop()
	r.WaitFor(t, "Readiness saying the read stopped", func() bool { return ready.Ready() != nil })
	t.Logf("Readiness while Redis is down: %v", ready.Ready())
	srv.Restart(t)
	r.WaitFor(t, "Readiness nil again", func() bool { return ready.Ready() == nil })
	after := publishertest.Messages("orders.created", 5)
	publish(t, srv.URL, stream, after...)
	r.WaitHandled(t, after...)
	r.WaitFor(t, "every entry acknowledged", func() bool { return pendingCount(t, c, stream, "billing") == 0 })
	if !r.Logs.Has(slog.LevelInfo, "back") {
		t.Errorf("no INFO log that the consumer is back; logs:\n%s", r.Logs)
	}
}
