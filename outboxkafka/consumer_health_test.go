package outboxkafka_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/kafkatest"
	"github.com/go-outbox/outbox/outboxkafka"
	"github.com/go-outbox/outbox/publishertest"
	"github.com/go-outbox/outbox/relaytest"
)

// These tests check the rule of docs/consumers.md: what an operator must fix
// is logged at ERROR level at most once per ConfigErrorLogInterval, what
// passes by itself at WARN level, and the return at INFO level.

// healthConfig is a consumer of topics whose logs go to the returned
// capture, checking the cluster every 50ms.
func healthConfig(topics ...string) (outboxkafka.ConsumerConfig, *relaytest.LogCapture) {
	logs := &relaytest.LogCapture{}
	return outboxkafka.ConsumerConfig{Group: "billing-" + uuid.NewString()[:8], Topics: topics,
		BackoffBase: time.Millisecond, BackoffMax: 5 * time.Millisecond, CheckInterval: 50 * time.Millisecond,
		Logger: slog.New(logs)}, logs
}

// consumeWith runs Consume with opts (after a short metadata age, so that
// the client sees a topic created or deleted within tens of milliseconds)
// until the test ends.
func consumeWith(t *testing.T, seeds []string, cfg outboxkafka.ConsumerConfig, fn func(context.Context, outbox.Message) error, opts ...kgo.Opt) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	opts = append([]kgo.Opt{kgo.FetchMaxWait(100 * time.Millisecond), kgo.MetadataMinAge(20 * time.Millisecond)}, opts...)
	go func() { done <- outboxkafka.Consume(ctx, seeds, cfg, fn, opts...) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Consume: %v", err)
		}
	})
}

// waitLog waits up to within for a line at level (exactly) holding every one
// of words, and returns its position among the lines.
func waitLog(t *testing.T, logs *relaytest.LogCapture, within time.Duration, level slog.Level, words ...string) int {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		if i := findLog(logs, 0, level, words...); i >= 0 {
			return i
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s line with %q within %v; logged:\n%s", level, words, within, logs)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// findLog returns the position of the first line from the from-th at level
// holding every one of words, or -1.
func findLog(logs *relaytest.LogCapture, from int, level slog.Level, words ...string) int {
	lines := strings.Split(logs.String(), "\n")
next:
	for i := from; i < len(lines); i++ {
		if !strings.HasPrefix(lines[i], level.String()+" ") {
			continue
		}
		for _, w := range words {
			if !strings.Contains(lines[i], w) {
				continue next
			}
		}
		return i
	}
	return -1
}

// countLogs counts the lines at level holding every one of words.
func countLogs(logs *relaytest.LogCapture, level slog.Level, words ...string) int {
	n := 0
	for i := findLog(logs, 0, level, words...); i >= 0; i = findLog(logs, i+1, level, words...) {
		n++
	}
	return n
}

// A topic missing when Consume starts needs an operator: it is logged at
// ERROR level, naming it, within a few seconds, and once (not once per
// check). Once created, its records are consumed and the return is logged at
// INFO level.
func TestATopicMissingAtStartIsLoggedAtErrorThenConsumedOnceCreated(t *testing.T) {
	t.Parallel()
	c := kafkatest.StartFake(t) // a topic of a fixed name, created late
	topic := "orders-late-" + uuid.NewString()[:8]
	cfg, logs := healthConfig(topic)
	cfg.DeadLetterTopic = c.Topic(t, 1, nil)
	var handled atomic.Int32
	consumeWith(t, c.Seeds(), cfg, func(context.Context, outbox.Message) error { handled.Add(1); return nil })

	failed := waitLog(t, logs, 5*time.Second, slog.LevelError, topic, "create")
	// Several checks later, still one ERROR line.
	time.Sleep(10 * cfg.CheckInterval)
	if n := countLogs(logs, slog.LevelError, topic); n != 1 {
		t.Fatalf("%d ERROR lines naming topic %s within ConfigErrorLogInterval, want 1; logged:\n%s", n, topic, logs)
	}

	createTopic(t, c, topic)
	publish(t, c, topic, publishertest.Messages("", 1))
	eventually(t, "the record of the created topic handled", func() bool { return handled.Load() == 1 })
	deadline := time.Now().Add(5 * time.Second)
	for findLog(logs, failed+1, slog.LevelInfo, "back") < 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no INFO line saying the consumer is back after the topic was created; logged:\n%s", logs)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A topic deleted while it is consumed needs an operator too: ERROR, naming
// it.
func TestATopicDeletedWhileConsumedIsLoggedAtError(t *testing.T) {
	t.Parallel()
	c := kafkatest.StartFake(t) // the topic is deleted
	topic := c.Topic(t, 1, nil)
	cfg, logs := healthConfig(topic)
	cfg.DeadLetterTopic = c.Topic(t, 1, nil)
	var handled atomic.Int32
	consumeWith(t, c.Seeds(), cfg, func(context.Context, outbox.Message) error { handled.Add(1); return nil })
	publish(t, c, topic, publishertest.Messages("", 1))
	eventually(t, "the record handled", func() bool { return handled.Load() == 1 })

	deleteTopic(t, c, topic)
	waitLog(t, logs, 5*time.Second, slog.LevelError, topic)
}

// Brokers that stop answering while Consume runs are a failure that passes
// by itself: WARN, then INFO once they answer again and records come.
func TestABrokerLostWhileConsumingIsLoggedAtWarnAndItsReturnAtInfo(t *testing.T) {
	t.Parallel()
	c := kafkatest.StartFake(t) // the outage is injected into kfake
	topic := c.Topic(t, 1, nil)
	cfg, logs := healthConfig(topic)
	cfg.DeadLetterTopic = c.Topic(t, 1, nil)
	var down atomic.Bool
	c.Fake().ControlKey(-1, func(kmsg.Request) (kmsg.Response, error, bool) {
		c.Fake().KeepControl()
		if down.Load() {
			return nil, errors.New("kafkatest: cluster down"), true // closes the connection
		}
		return nil, nil, false
	})
	var handled sync.Map
	consumeWith(t, c.Seeds(), cfg, func(_ context.Context, m outbox.Message) error { handled.Store(m.ID, true); return nil })
	before, after := publishertest.Messages("", 1), publishertest.Messages("", 1)
	publish(t, c, topic, before)
	eventually(t, "the first record handled", func() bool { _, ok := handled.Load(before[0].ID); return ok })

	down.Store(true)
	lost := waitLog(t, logs, 10*time.Second, slog.LevelWarn)
	down.Store(false)
	// The first record may come again (its offset may not have been
	// committed before the outage): the inbox skips it.
	publish(t, c, topic, after)
	eventually(t, "the record published after the outage handled", func() bool { _, ok := handled.Load(after[0].ID); return ok })
	deadline := time.Now().Add(5 * time.Second)
	for findLog(logs, lost+1, slog.LevelInfo, "back") < 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no INFO line saying the consumer is back after the outage; logged:\n%s", logs)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// No broker answering at start passes by itself at first (WARN), then needs
// an operator: after three checks in a row, ERROR naming the seeds.
func TestAClusterUnreachableAtStartIsLoggedAtWarnThenError(t *testing.T) {
	t.Parallel()
	seed := kafkatest.ClosedAddr(t)
	cfg, logs := healthConfig("orders")
	cfg.DeadLetterTopic = "orders.dead"
	cfg.CheckInterval = 200 * time.Millisecond
	consumeWith(t, []string{seed}, cfg, func(context.Context, outbox.Message) error { return nil })
	warned := waitLog(t, logs, 5*time.Second, slog.LevelWarn, seed)
	if i := waitLog(t, logs, 10*time.Second, slog.LevelError, seed); i < warned {
		t.Fatalf("ERROR before WARN; logged:\n%s", logs)
	}
}

// A dead-letter topic missing when a record is parked needs an operator:
// ERROR naming it, once while parking is tried again and again (each
// attempt at DEBUG level); once it exists the record is parked and that is
// logged at INFO level.
func TestADeadLetterTopicMissingIsLoggedAtErrorOncePerInterval(t *testing.T) {
	t.Parallel()
	c := kafkatest.StartFake(t) // a topic of a fixed name, created late
	topic := c.Topic(t, 1, nil)
	cfg, logs := healthConfig(topic)
	cfg.DeadLetterTopic = "orders-dead-" + uuid.NewString()[:8]
	cfg.MaxDeliver = 1
	consumeWith(t, c.Seeds(), cfg, func(context.Context, outbox.Message) error { return errors.New("no such customer (injected)") },
		// Each attempt to park fails at the first unknown-topic answer.
		kgo.UnknownTopicRetries(0))
	publish(t, c, topic, publishertest.Messages("", 1))

	attempt := "dead_letter_topic=" + cfg.DeadLetterTopic
	eventually(t, "five attempts to park", func() bool {
		n := 0
		for _, level := range []slog.Level{slog.LevelDebug, slog.LevelInfo, slog.LevelWarn, slog.LevelError} {
			n += countLogs(logs, level, attempt)
		}
		return n >= 5
	})
	if n := countLogs(logs, slog.LevelError, cfg.DeadLetterTopic); n != 1 {
		t.Errorf("%d ERROR lines naming the dead-letter topic %s, want 1 within ConfigErrorLogInterval; logged:\n%s", n, cfg.DeadLetterTopic, logs)
	}
	if n := countLogs(logs, slog.LevelWarn, cfg.DeadLetterTopic); n != 0 {
		t.Errorf("%d WARN lines naming the dead-letter topic %s, want its ERROR line only; logged:\n%s", n, cfg.DeadLetterTopic, logs)
	}

	createTopic(t, c, cfg.DeadLetterTopic)
	if _, err := c.Consume(t, cfg.DeadLetterTopic).Next(ctxTimeout(t, 30*time.Second), 1); err != nil {
		t.Fatalf("the record was not parked once the dead-letter topic existed: %v", err)
	}
	waitLog(t, logs, 5*time.Second, slog.LevelInfo, cfg.DeadLetterTopic)
}

// deleteTopic deletes topic from c.
func deleteTopic(t *testing.T, c *kafkatest.Cluster, topic string) {
	t.Helper()
	admin, err := kgo.NewClient(kgo.SeedBrokers(c.Seeds()...))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	req := kmsg.NewPtrDeleteTopicsRequest()
	req.TimeoutMillis = 10_000
	rt := kmsg.NewDeleteTopicsRequestTopic()
	rt.Topic = kmsg.StringPtr(topic)
	req.Topics = append(req.Topics, rt)
	req.TopicNames = append(req.TopicNames, topic)
	resp, err := req.RequestWith(ctxTimeout(t, 10*time.Second), admin)
	if err == nil && len(resp.Topics) == 1 {
		err = kerr.ErrorForCode(resp.Topics[0].ErrorCode)
	}
	if err != nil {
		t.Fatalf("delete topic %s: %v", topic, err)
	}
}
