package outboxkafka_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/kafkatest"
	"github.com/go-outbox/outbox/outboxkafka"
	"github.com/go-outbox/outbox/publishertest"
	"github.com/go-outbox/outbox/relaytest"
)

// groupSetup is a two-partition topic and its dead-letter topic, with msgs
// published to the first.
func groupSetup(t *testing.T, msgs []outbox.Message) (*kafkatest.Cluster, outboxkafka.ConsumerConfig) {
	t.Helper()
	return groupSetupOn(t, kafkatest.Start(t), msgs)
}

// groupSetupOn is groupSetup on the cluster c.
func groupSetupOn(t *testing.T, c *kafkatest.Cluster, msgs []outbox.Message) (*kafkatest.Cluster, outboxkafka.ConsumerConfig) {
	t.Helper()
	topic, dead := c.Topic(t, 2, nil), c.Topic(t, 1, nil)
	publish(t, c, topic, msgs)
	return c, outboxkafka.ConsumerConfig{Group: "billing-" + uuid.NewString()[:8], Topics: []string{topic}, DeadLetterTopic: dead,
		BackoffBase: time.Millisecond, BackoffMax: 5 * time.Millisecond, Logger: relaytest.TestLogger(t)}
}

func publish(t *testing.T, c *kafkatest.Cluster, topic string, msgs []outbox.Message) {
	t.Helper()
	for i := range msgs {
		msgs[i].Topic = topic
	}
	for i, err := range openPublisher(t, c, outboxkafka.Config{}).Publish(ctxTimeout(t, 30*time.Second), msgs) {
		if err != nil {
			t.Fatalf("publish %s: %v", msgs[i].ID, err)
		}
	}
}

// consumeGroup runs Consume until stop is called, which waits for it.
func consumeGroup(t *testing.T, c *kafkatest.Cluster, cfg outboxkafka.ConsumerConfig, fn func(context.Context, outbox.Message) error) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- outboxkafka.Consume(ctx, c.Seeds(), cfg, fn, kgo.FetchMaxWait(100*time.Millisecond)) }()
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

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Each record reaches the handler as the publisher sent it, a failure is
// retried in place, and the offsets of handled records are committed: the
// next member of the group starts after them.
func TestConsumeHandsOverEachRecordAndCommitsItsOffsetAfterTheHandler(t *testing.T) {
	t.Parallel()
	batch := publishertest.Messages("", 6)
	c, cfg := groupSetup(t, batch)
	var (
		mu    sync.Mutex
		seen  = map[uuid.UUID]outbox.Message{}
		tries = map[uuid.UUID]int{}
	)
	stop := consumeGroup(t, c, cfg, func(_ context.Context, m outbox.Message) error {
		mu.Lock()
		defer mu.Unlock()
		tries[m.ID]++
		if m.ID == batch[1].ID && tries[m.ID] == 1 {
			return errors.New("database busy (injected)")
		}
		seen[m.ID] = m
		return nil
	})
	eventually(t, "every record handled", func() bool { mu.Lock(); defer mu.Unlock(); return len(seen) == len(batch) })
	stop()
	for _, m := range batch {
		s := seen[m.ID]
		if s.Topic != m.Topic || s.Key != m.Key || string(s.Payload) != string(m.Payload) {
			t.Errorf("message %s handed over as %+v", m.ID, s)
		}
	}
	if tries[batch[1].ID] != 2 {
		t.Errorf("the failing record was tried %d times, want 2", tries[batch[1].ID])
	}
	// A record published now is the only one the next member gets.
	sentinel := publishertest.Messages("", 1)
	publish(t, c, cfg.Topics[0], sentinel)
	var again []uuid.UUID
	var got atomic.Bool
	stop = consumeGroup(t, c, cfg, func(_ context.Context, m outbox.Message) error {
		mu.Lock()
		defer mu.Unlock()
		again = append(again, m.ID)
		got.Store(m.ID == sentinel[0].ID)
		return nil
	})
	eventually(t, "the new record", got.Load)
	stop()
	if len(again) != 1 {
		t.Fatalf("the next member got %v; want only the new record %s: the handled records' offsets were committed", again, sentinel[0].ID)
	}
}

// A member that goes away before its record was handled (the handler has
// not returned) leaves its offset uncommitted: the next member gets the
// record again.
func TestARecordNotHandledIsDeliveredAgain(t *testing.T) {
	t.Parallel()
	batch := publishertest.Messages("", 1)
	c, cfg := groupSetup(t, batch)
	var deliveries atomic.Int32
	stop := consumeGroup(t, c, cfg, func(ctx context.Context, _ outbox.Message) error {
		deliveries.Add(1)
		<-ctx.Done() // committed; the process dies before the offset
		return ctx.Err()
	})
	eventually(t, "the first delivery", func() bool { return deliveries.Load() == 1 })
	stop()
	stop = consumeGroup(t, c, cfg, func(context.Context, outbox.Message) error { deliveries.Add(1); return nil })
	eventually(t, "the redelivery", func() bool { return deliveries.Load() == 2 })
	stop()
}

// A key's records are handled in order (one partition, one after the
// other), the partitions concurrently.
func TestConsumeKeepsEachKeysOrderWhilePartitionsRunConcurrently(t *testing.T) {
	t.Parallel()
	var batch []outbox.Message
	for i := range 40 {
		m := publishertest.Messages("", 1)[0]
		m.Key = fmt.Sprintf("k%d", i%8)
		batch = append(batch, m)
	}
	c, cfg := groupSetup(t, batch)
	var (
		mu                  sync.Mutex
		order               = map[string][]uuid.UUID{}
		running, maxRunning int
		handled             int
	)
	stop := consumeGroup(t, c, cfg, func(_ context.Context, m outbox.Message) error {
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
	eventually(t, "every record handled", func() bool { mu.Lock(); defer mu.Unlock(); return handled == len(batch) })
	stop()
	position := map[string]int{}
	for _, m := range batch {
		i := position[m.Key]
		if got := order[m.Key]; len(got) <= i || got[i] != m.ID {
			t.Fatalf("key %s: record %s handled out of order (%v)", m.Key, m.ID, got)
		}
		position[m.Key]++
	}
	if maxRunning < 2 {
		t.Errorf("at most %d record(s) handled at once; want the two partitions handled concurrently", maxRunning)
	}
}

// A record whose handler keeps failing is parked in the dead-letter topic
// after MaxDeliver attempts, with the reason; the others go on.
func TestARecordThatKeepsFailingIsParkedInTheDeadLetterTopic(t *testing.T) {
	t.Parallel()
	batch := publishertest.Messages("", 3)
	c, cfg := groupSetup(t, batch)
	cfg.MaxDeliver = 3
	var attempts, others atomic.Int32
	stop := consumeGroup(t, c, cfg, func(_ context.Context, m outbox.Message) error {
		if m.ID == batch[0].ID {
			attempts.Add(1)
			return errors.New("no such customer (injected)")
		}
		others.Add(1)
		return nil
	})
	parked, err := c.Consume(t, cfg.DeadLetterTopic).Next(ctxTimeout(t, 30*time.Second), 1)
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "the other records handled", func() bool { return others.Load() == 2 })
	stop()
	reason := ""
	m, err := outboxkafka.FromRecord(parked[0])
	if err == nil {
		reason = m.Headers[outboxkafka.HeaderParkReason]
	}
	if err != nil || m.ID != batch[0].ID || reason == "" || attempts.Load() != 3 {
		t.Fatalf("parked record %v (%v), reason %q, after %d attempts; want message %s with its reason after MaxDeliver = 3", m.ID, err, reason, attempts.Load(), batch[0].ID)
	}
}

// A record that keeps failing while the dead-letter topic refuses it (the
// broker denies the write) is not skipped: its partition waits at it, so no
// offset past it is committed and a later record of its partition, arrived
// meanwhile, is neither handled nor committed before it. The next member of
// the group gets it again, parks it once the topic takes it, then goes on.
func TestARecordThatCannotBeParkedHoldsItsPartitionAndComesAgain(t *testing.T) {
	t.Parallel()
	poison := publishertest.Messages("", 1)[0]
	poison.Key = "customer-7" // one partition: the later record below comes after it
	// Faults are injected into kfake.
	c, cfg := groupSetupOn(t, kafkatest.StartFake(t), []outbox.Message{poison})
	cfg.MaxDeliver = 2
	refused := c.Fake().Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: cfg.DeadLetterTopic, Err: kerr.TopicAuthorizationFailed, Count: -1})
	var (
		mu    sync.Mutex
		tries = map[uuid.UUID]int{}
	)
	handler := func(_ context.Context, m outbox.Message) error {
		mu.Lock()
		defer mu.Unlock()
		tries[m.ID]++
		if m.ID == poison.ID {
			return errors.New("no such customer (injected)")
		}
		return nil
	}
	tried := func(id uuid.UUID) int { mu.Lock(); defer mu.Unlock(); return tries[id] }

	stop := consumeGroup(t, c, cfg, handler)
	if err := refused.Wait(ctxTimeout(t, 30*time.Second), 1); err != nil {
		t.Fatalf("the record was not parked after MaxDeliver attempts: %v", err)
	}
	// Published after the refusal, so that it comes in a later fetch than
	// the record ahead of it.
	later := publishertest.Messages("", 1)[0]
	later.Key = poison.Key
	publish(t, c, cfg.Topics[0], []outbox.Message{later})
	eventually(t, "more refused attempts to park, or the later record handled", func() bool {
		return refused.Hits() >= 5 || tried(later.ID) > 0
	})
	stop() // commits the marked offsets
	if n := tried(later.ID); n != 0 {
		t.Errorf("the later record %s was handled %d time(s) while the record %s ahead of it in its partition was neither handled nor parked", later.ID, n, poison.ID)
	}
	for p, off := range committedOffsets(t, c, cfg.Group, cfg.Topics[0]) {
		if off > 0 {
			t.Fatalf("partition %d committed at offset %d while its record at offset 0 (%s) could not be parked; want nothing committed past it, or it never comes again", p, off, poison.ID)
		}
	}

	refused.Remove() // the operator grants the write
	stop = consumeGroup(t, c, cfg, handler)
	parked, err := c.Consume(t, cfg.DeadLetterTopic).Next(ctxTimeout(t, 30*time.Second), 1)
	if err != nil {
		t.Fatalf("the record was not parked by the next member: %v", err)
	}
	if m, err := outboxkafka.FromRecord(parked[0]); err != nil || m.ID != poison.ID {
		t.Fatalf("parked %v (%v); want %s", m.ID, err, poison.ID)
	}
	eventually(t, "the later record handled", func() bool { return tried(later.ID) == 1 })
	stop()
	if n := tried(poison.ID); n != 4 {
		t.Errorf("the record was tried %d times; want MaxDeliver = 2 by each member: the second got it again", n)
	}
	committed := committedOffsets(t, c, cfg.Group, cfg.Topics[0])
	var total int64
	for _, off := range committed {
		total += max(off, 0)
	}
	if total != 2 {
		t.Fatalf("committed offsets %v; want 2 in the records' partition (both handled), nothing in the other", committed)
	}
}

// committedOffsets returns the offsets group committed in each partition
// of topic; -1 means none.
func committedOffsets(t *testing.T, c *kafkatest.Cluster, group, topic string) map[int32]int64 {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.Seeds()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	req := kmsg.NewPtrOffsetFetchRequest()
	g := kmsg.NewOffsetFetchRequestGroup()
	g.Group = group
	rt := kmsg.NewOffsetFetchRequestGroupTopic()
	rt.Topic, rt.Partitions = topic, []int32{0, 1}
	g.Topics = append(g.Topics, rt)
	req.Groups = append(req.Groups, g)
	resp, err := req.RequestWith(ctxTimeout(t, 30*time.Second), cl)
	if err == nil && len(resp.Groups) != 1 {
		err = fmt.Errorf("%d groups in the response", len(resp.Groups))
	}
	if err == nil {
		err = kerr.ErrorForCode(resp.Groups[0].ErrorCode)
	}
	if err != nil {
		t.Fatalf("committed offsets of group %s: %v", group, err)
	}
	out := map[int32]int64{}
	for _, rt := range resp.Groups[0].Topics {
		for _, p := range rt.Partitions {
			if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
				t.Fatalf("committed offset of group %s in %s/%d: %v", group, topic, p.Partition, err)
			}
			out[p.Partition] = p.Offset
		}
	}
	return out
}
