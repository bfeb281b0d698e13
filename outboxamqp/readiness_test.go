package outboxamqp_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/amqptest"
	"github.com/go-outbox/outbox/internal/proxytest"
	"github.com/go-outbox/outbox/internal/readytest"
	"github.com/go-outbox/outbox/outboxamqp"
)

// Readiness follows the queue: not ready with the fix while the queue is
// missing, ready once it is declared and consumed, not ready again when it
// is deleted under the consumer, and stopped once Consume returned.
func TestReadinessSaysWhyWhileTheQueueIsMissingAndIsNilWhileConsuming(t *testing.T) {
	t.Parallel()
	url := amqptest.URL(t)
	d := amqptest.Declare(t, url)
	deleteQueue(t, url, d.Queue)
	ready := &outboxamqp.Readiness{}
	if err := ready.Ready(); err == nil || !strings.Contains(err.Error(), "not started") {
		t.Fatalf("Ready() before Consume = %v, want an error saying it has not started", err)
	}
	stop := consumeQueue(t, url, outboxamqp.ConsumerConfig{Queue: d.Queue, Name: "billing", Readiness: ready,
		BackoffBase: 10 * time.Millisecond, BackoffMax: 50 * time.Millisecond},
		func(context.Context, outbox.Message) error { return nil })

	readytest.WaitNotReady(t, ready, "not ready while the queue is missing", "billing", d.Queue, "not found", "not consuming since")
	declareQueue(t, url, d)
	readytest.WaitReady(t, ready, "ready once the queue is declared")
	deleteQueue(t, url, d.Queue)
	readytest.WaitNotReady(t, ready, "not ready once the queue is deleted", d.Queue, "deleted")
	declareQueue(t, url, d)
	readytest.WaitReady(t, ready, "ready again once the queue is declared again")
	stop()
	if err := ready.Ready(); err == nil || !strings.Contains(err.Error(), "stopped") {
		t.Fatalf("Ready() after Consume returned = %v, want an error saying it stopped", err)
	}
}

// A broker that cannot be reached makes the consumer not ready, saying it
// lost its connection, until it connects again.
func TestReadinessSaysTheConnectionIsLostWhileTheBrokerIsUnreachable(t *testing.T) {
	t.Parallel()
	url := amqptest.URL(t)
	d := amqptest.Declare(t, url)
	proxy := proxytest.ForURL(t, url)
	ready := &outboxamqp.Readiness{}
	consumeQueue(t, proxy.URL(url), outboxamqp.ConsumerConfig{Queue: d.Queue, Name: "billing", Readiness: ready,
		BackoffBase: 100 * time.Millisecond, BackoffMax: 200 * time.Millisecond},
		func(context.Context, outbox.Message) error { return nil })
	readytest.WaitReady(t, ready, "ready while consuming")

	// Cut drops the connection and lets new ones through: stalled at once
	// after, well within BackoffBase, the next connection hangs unanswered.
	proxy.Cut()
	proxy.Stall()
	readytest.WaitNotReady(t, ready, "not ready once the connection dropped", "billing", "connection")
	proxy.Release()
	readytest.WaitReady(t, ready, "ready once the broker answers again")
}
