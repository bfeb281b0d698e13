package outboxkafka_test

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/kafkatest"
	"github.com/go-outbox/outbox/outboxkafka"
)

// produceTo writes one outbox record of key to partition of topic and
// returns its id.
func produceTo(t *testing.T, c *kafkatest.Cluster, topic string, partition int32, key string) uuid.UUID {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.Seeds()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	id := uuid.Must(uuid.NewV7())
	r := &kgo.Record{Topic: topic, Partition: partition, Key: []byte(key), Value: []byte(key),
		Headers: []kgo.RecordHeader{{Key: outboxkafka.HeaderID, Value: []byte(id.String())}}}
	if err := cl.ProduceSync(ctxTimeout(t, 30*time.Second), r).FirstErr(); err != nil {
		t.Fatalf("produce to %s/%d: %v", topic, partition, err)
	}
	return id
}

// A record of partition 0 keeps failing and is retried; records written to
// partition 1 meanwhile are handled and their offsets committed, while
// partition 0's offset stays before the failing record. Before the fix every
// partition waited for the failing one: a poll's records were all handled
// before the next poll.
func TestARetryingRecordHoldsBackOnlyItsOwnPartition(t *testing.T) {
	t.Parallel()
	c := kafkatest.Start(t)
	topic, dead := c.Topic(t, 2, nil), c.Topic(t, 1, nil)
	cfg := outboxkafka.ConsumerConfig{Group: "billing-" + uuid.NewString()[:8], Topics: []string{topic}, DeadLetterTopic: dead,
		MaxDeliver: 1 << 30, BackoffBase: time.Millisecond, BackoffMax: 5 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)}
	poison := produceTo(t, c, topic, 0, "a")

	var (
		mu       sync.Mutex
		healed   bool
		failures int
		handled  = map[uuid.UUID]bool{}
	)
	failing := make(chan struct{})
	fn := func(_ context.Context, m outbox.Message) error {
		mu.Lock()
		defer mu.Unlock()
		if m.ID == poison && !healed {
			if failures++; failures == 1 {
				close(failing)
			}
			return errors.New("poison")
		}
		handled[m.ID] = true
		return nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- outboxkafka.Consume(ctx, c.Seeds(), cfg, fn, kgo.FetchMaxWait(100*time.Millisecond), kgo.AutoCommitInterval(100*time.Millisecond))
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Consume: %v", err)
		}
	})
	select {
	case <-failing:
	case <-time.After(30 * time.Second):
		t.Fatal("timed out waiting for the first attempt at partition 0's record")
	}

	var others []uuid.UUID
	for range 3 {
		others = append(others, produceTo(t, c, topic, 1, "b"))
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		committed := committedOffsets(t, c, cfg.Group, topic)
		if committed[1] == int64(len(others)) {
			if committed[0] > 0 {
				t.Fatalf("partition 0 committed at %d past its failing record", committed[0])
			}
			break
		}
		if time.Now().After(deadline) {
			mu.Lock()
			defer mu.Unlock()
			t.Fatalf("partition 1 committed at %d, want %d, while partition 0's record failed %d time(s); partition 1's records handled: %v",
				committed[1], len(others), failures, countHandled(handled, others))
		}
		time.Sleep(10 * time.Millisecond)
	}
	mu.Lock()
	stillFailing := !healed
	healed = true
	mu.Unlock()
	if !stillFailing {
		t.Fatal("partition 0's record recovered before partition 1 was committed")
	}
	eventually(t, "partition 0's record handled and committed", func() bool {
		return committedOffsets(t, c, cfg.Group, topic)[0] == 1
	})
}

func countHandled(handled map[uuid.UUID]bool, ids []uuid.UUID) int {
	n := 0
	for _, id := range ids {
		if handled[id] {
			n++
		}
	}
	return n
}

// A record retrying in one member does not hold up the group: a second
// member joins, gets a partition and handles its records while the first
// member's record still fails. Before the fix the first member blocked the
// rebalance until every record of its last poll was handled.
func TestARetryingRecordDoesNotHoldUpARebalance(t *testing.T) {
	t.Parallel()
	c := kafkatest.Start(t)
	topic, dead := c.Topic(t, 2, nil), c.Topic(t, 1, nil)
	cfg := outboxkafka.ConsumerConfig{Group: "billing-" + uuid.NewString()[:8], Topics: []string{topic}, DeadLetterTopic: dead,
		MaxDeliver: 1 << 30, BackoffBase: time.Millisecond, BackoffMax: 5 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)}
	poison := produceTo(t, c, topic, 0, "a")

	var (
		mu       sync.Mutex
		byMember = map[uuid.UUID]string{}
	)
	failing := make(chan struct{})
	var once sync.Once
	member := func(name string) func(context.Context, outbox.Message) error {
		return func(_ context.Context, m outbox.Message) error {
			mu.Lock()
			defer mu.Unlock()
			if m.ID == poison && name == "first" {
				once.Do(func() { close(failing) })
				return errors.New("poison in the first member")
			}
			byMember[m.ID] = name
			return nil
		}
	}
	start := func(name string) {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			done <- outboxkafka.Consume(ctx, c.Seeds(), cfg, member(name), kgo.FetchMaxWait(100*time.Millisecond),
				kgo.AutoCommitInterval(100*time.Millisecond), kgo.HeartbeatInterval(100*time.Millisecond))
		}()
		t.Cleanup(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Consume (%s member): %v", name, err)
			}
		})
	}
	start("first")
	select {
	case <-failing:
	case <-time.After(30 * time.Second):
		t.Fatal("timed out waiting for the first attempt at partition 0's record")
	}
	start("second")
	deadline := time.Now().Add(20 * time.Second)
	for {
		// Records keep coming to partition 1, whichever member has it.
		produceTo(t, c, topic, 1, "b")
		mu.Lock()
		second := 0
		for _, name := range byMember {
			second += b2i(name == "second")
		}
		mu.Unlock()
		if second > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the second member handled nothing in 20 s while the first retried partition 0's record: the rebalance waited for it")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// A partition held back by a failing record with more records behind it
// than Consume queues (its fetching pauses, then resumes) loses none: once
// the record recovers, every record is handled once, in offset order, and
// committed.
func TestAPartitionHeldBackWithAFullQueueLosesNoRecord(t *testing.T) {
	t.Parallel()
	c := kafkatest.Start(t)
	topic, dead := c.Topic(t, 2, nil), c.Topic(t, 1, nil)
	cfg := outboxkafka.ConsumerConfig{Group: "billing-" + uuid.NewString()[:8], Topics: []string{topic}, DeadLetterTopic: dead,
		MaxDeliver: 1 << 30, BackoffBase: time.Millisecond, BackoffMax: 2 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)}
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.Seeds()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var ids []uuid.UUID
	var records []*kgo.Record
	for range 1500 {
		id := uuid.Must(uuid.NewV7())
		ids = append(ids, id)
		records = append(records, &kgo.Record{Topic: topic, Key: []byte("a"), Value: []byte("a"),
			Headers: []kgo.RecordHeader{{Key: outboxkafka.HeaderID, Value: []byte(id.String())}}})
	}
	if err := cl.ProduceSync(ctxTimeout(t, 30*time.Second), records...).FirstErr(); err != nil {
		t.Fatal(err)
	}

	var (
		mu       sync.Mutex
		failures int
		handled  []uuid.UUID
	)
	failing := make(chan struct{})
	fn := func(_ context.Context, m outbox.Message) error {
		mu.Lock()
		defer mu.Unlock()
		if m.ID == ids[0] && failures < 200 {
			if failures++; failures == 1 {
				close(failing)
			}
			return errors.New("poison, for a while")
		}
		handled = append(handled, m.ID)
		return nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- outboxkafka.Consume(ctx, c.Seeds(), cfg, fn, kgo.FetchMaxWait(100*time.Millisecond), kgo.AutoCommitInterval(100*time.Millisecond))
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Consume: %v", err)
		}
	})
	select {
	case <-failing:
	case <-time.After(30 * time.Second):
		t.Fatal("timed out waiting for the first attempt at the first record")
	}
	eventually(t, "every record committed", func() bool {
		return committedOffsets(t, c, cfg.Group, topic)[0] == int64(len(ids))
	})
	mu.Lock()
	defer mu.Unlock()
	if len(handled) != len(ids) {
		t.Fatalf("handled %d records, want %d once each", len(handled), len(ids))
	}
	for i, id := range handled {
		if id != ids[i] {
			t.Fatalf("record %d handled as %s, want %s: the partition's order broke", i, id, ids[i])
		}
	}
}
