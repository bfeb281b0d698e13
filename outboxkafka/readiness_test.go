package outboxkafka_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/google/uuid"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/kafkatest"
	"github.com/go-outbox/outbox/internal/readytest"
	"github.com/go-outbox/outbox/outboxkafka"
)

// Readiness follows the topics: the fix while a topic is missing, nil once
// it exists, the fix again once it is deleted, and stopped once Consume
// returned.
func TestReadinessSaysWhyWhileATopicIsMissingAndIsNilWhileConsuming(t *testing.T) {
	t.Parallel()
	c := kafkatest.StartFake(t) // a topic of a fixed name, created late, then deleted
	topic := "orders-late-" + uuid.NewString()[:8]
	cfg, _ := healthConfig(topic)
	cfg.DeadLetterTopic = c.Topic(t, 1, nil)
	ready := &outboxkafka.Readiness{}
	if err := ready.Ready(); err == nil || !strings.Contains(err.Error(), "not started") {
		t.Fatalf("Ready() before Consume = %v, want an error saying it has not started", err)
	}
	cfg.Readiness = ready
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- outboxkafka.Consume(ctx, c.Seeds(), cfg, func(context.Context, outbox.Message) error { return nil })
	}()
	t.Cleanup(func() { cancel(); <-done })

	readytest.WaitNotReady(t, ready, "not ready while the topic is missing", cfg.Group, topic, "not found", "not consuming since")
	createTopic(t, c, topic)
	readytest.WaitReady(t, ready, "ready once the topic exists")
	deleteTopic(t, c, topic)
	readytest.WaitNotReady(t, ready, "not ready once the topic is deleted", topic, "not found")
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Consume: %v", err)
	}
	done <- nil // for the cleanup
	if err := ready.Ready(); err == nil || !strings.Contains(err.Error(), "stopped") {
		t.Fatalf("Ready() after Consume returned = %v, want an error saying it stopped", err)
	}
}

// A cluster that stops answering makes the consumer not ready at its next
// check, saying so, until it answers again.
func TestReadinessSaysTheClusterDoesNotAnswerWhileItIsDown(t *testing.T) {
	t.Parallel()
	c := kafkatest.StartFake(t) // the outage is injected into kfake
	topic := c.Topic(t, 1, nil)
	cfg, _ := healthConfig(topic)
	cfg.DeadLetterTopic = c.Topic(t, 1, nil)
	cfg.Readiness = &outboxkafka.Readiness{}
	var down atomic.Bool
	c.Fake().ControlKey(-1, func(kmsg.Request) (kmsg.Response, error, bool) {
		c.Fake().KeepControl()
		if down.Load() {
			return nil, errors.New("kafkatest: cluster down"), true // closes the connection
		}
		return nil, nil, false
	})
	consumeWith(t, c.Seeds(), cfg, func(context.Context, outbox.Message) error { return nil })
	readytest.WaitReady(t, cfg.Readiness, "ready while consuming")

	down.Store(true)
	readytest.WaitNotReady(t, cfg.Readiness, "not ready while the cluster is down", cfg.Group, "answer")
	down.Store(false)
	readytest.WaitReady(t, cfg.Readiness, "ready once the cluster answers again")
}
