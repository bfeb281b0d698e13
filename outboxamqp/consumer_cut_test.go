package outboxamqp_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/amqptest"
	"github.com/go-outbox/outbox/internal/proxytest"
	"github.com/go-outbox/outbox/outboxamqp"
	"github.com/go-outbox/outbox/publishertest"
	"github.com/go-outbox/outbox/relaytest"
)

// A connection that drops while Consume reads is a failure that passes by
// itself: logged at WARN level as a lost connection, never at ERROR level
// as a deleted queue. amqp091 closes the cancel notifications with the
// channel, and before the fix a closed one read as the broker's
// basic.cancel about half of the time. Ten cuts make a miss unlikely
// (one in a thousand).
func TestAConnectionCutWhileConsumingIsLoggedAsALostConnectionNotAsADeletedQueue(t *testing.T) {
	t.Parallel()
	url := amqptest.URL(t)
	d := amqptest.Declare(t, url)
	proxy := proxytest.ForURL(t, url)
	logs := &relaytest.LogCapture{}
	consumeQueue(t, proxy.URL(url), outboxamqp.ConsumerConfig{Queue: d.Queue, Name: "billing", Logger: slog.New(logs),
		BackoffBase: time.Millisecond, BackoffMax: 5 * time.Millisecond},
		func(context.Context, outbox.Message) error { return nil })
	consumers := func() int {
		ch, err := amqptest.Dial(t, url).Channel()
		if err != nil {
			t.Fatal(err)
		}
		defer ch.Close()
		q, err := ch.QueueDeclarePassive(d.Queue, true, false, false, false, nil)
		if err != nil {
			t.Fatal(err)
		}
		return q.Consumers
	}
	waitFor(t, 20*time.Second, "the consumer on the queue", func() bool { return consumers() == 1 })
	const cuts = 10
	for i := 1; i <= cuts; i++ {
		proxy.Cut()
		waitFor(t, 20*time.Second, "the consumer back after the cut", func() bool {
			return strings.Count(logs.String(), "consumer is back") == i
		})
	}
	if logs.Has(slog.LevelError) {
		t.Fatalf("a cut connection logged at ERROR level:\n%s", logs)
	}
	if n := strings.Count(logs.String(), "lost its connection"); n != cuts {
		t.Fatalf("%d WARN lines \"lost its connection\" for %d cuts:\n%s", n, cuts, logs)
	}
}

// A message waiting in place for an unavailable destination (no attempt
// counts) does not keep the consumer from connecting again after a cut:
// the lanes of the lost channel stop, the broker requeues the message, and
// the other keys go on. Before the fix the consumer waited for that
// message's handler for good and read nothing more.
func TestAMessageWaitingForAnUnavailableDestinationDoesNotKeepTheConsumerFromReconnecting(t *testing.T) {
	t.Parallel()
	url := amqptest.URL(t)
	d := amqptest.Declare(t, url)
	proxy := proxytest.ForURL(t, url)
	msgs := publishertest.Messages(d.RoutingKey, 2)
	msgs[0].Key, msgs[1].Key = "tenant-down", "tenant-up"
	var mu sync.Mutex
	tried, applied := map[uuid.UUID]int{}, map[uuid.UUID]int{}
	logs := &relaytest.LogCapture{}
	consumeQueue(t, proxy.URL(url), outboxamqp.ConsumerConfig{Queue: d.Queue, Name: "billing", Logger: slog.New(logs),
		BackoffBase: time.Millisecond, BackoffMax: 5 * time.Millisecond},
		func(_ context.Context, m outbox.Message) error {
			mu.Lock()
			defer mu.Unlock()
			tried[m.ID]++
			if m.Key == "tenant-down" {
				return outbox.Unavailable(errors.New("tenant's API down (injected)"))
			}
			applied[m.ID]++
			return nil
		})
	count := func(of map[uuid.UUID]int, id uuid.UUID) int { mu.Lock(); defer mu.Unlock(); return of[id] }
	publish := func(m outbox.Message) {
		if err := open(t, url, outboxamqp.Config{Exchange: d.Exchange}).Publish(ctxFor(t, 20*time.Second), []outbox.Message{m})[0]; err != nil {
			t.Fatal(err)
		}
	}
	publish(msgs[0])
	waitFor(t, 20*time.Second, "the message of the down tenant tried again and again", func() bool { return count(tried, msgs[0].ID) >= 3 })
	proxy.Cut()
	waitFor(t, 20*time.Second, "the consumer back after the cut", func() bool { return strings.Contains(logs.String(), "consumer is back") })
	publish(msgs[1])
	waitFor(t, 20*time.Second, "the other tenant's message applied after the cut", func() bool { return count(applied, msgs[1].ID) == 1 })
}
