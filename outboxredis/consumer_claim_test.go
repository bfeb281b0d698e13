package outboxredis_test

import (
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/redistest"
	"github.com/go-outbox/outbox/outboxredis"
	"github.com/go-outbox/outbox/publishertest"
)

// readAs reads the stream's new entries as consumer of group, as a process
// does before it dies: they are given to it and stay unacknowledged.
func readAs(t *testing.T, c redis.UniversalClient, stream, group, consumer string) []string {
	t.Helper()
	ctx := ctxFor(t, 5*time.Second)
	if err := c.XGroupCreateMkStream(ctx, stream, group, "0").Err(); err != nil && !redis.HasErrorPrefix(err, "BUSYGROUP") {
		t.Fatal(err)
	}
	streams, err := c.XReadGroup(ctx, &redis.XReadGroupArgs{Group: group, Consumer: consumer, Streams: []string{stream, ">"}, Count: 100, Block: -1}).Result()
	if err != nil {
		t.Fatalf("XREADGROUP as %s: %v", consumer, err)
	}
	var ids []string
	for _, s := range streams {
		for _, x := range s.Messages {
			ids = append(ids, x.ID)
		}
	}
	return ids
}

// An entry a consumer was given and never acknowledged (it died) is taken
// over by another consumer of the group once it idled for ClaimAfter, not
// before, and its earlier delivery counts as an attempt: with MaxDeliver 2
// a failing message is parked after one attempt of its own.
func TestAnEntryADeadConsumerWasGivenIsTakenOverAfterClaimAfterCountingItsDelivery(t *testing.T) {
	t.Parallel()
	c, stream := client(t)
	park := redistest.Stream(t, c, "outboxredis.parked.")
	batch := publishertest.Messages("orders.created", 2)
	publish(t, redistest.URL(t), stream, batch...)
	given := time.Now() // before the delivery: its idle time counts from later
	if ids := readAs(t, c, stream, "billing", "dead"); len(ids) != 2 {
		t.Fatalf("the dead consumer was given %d entries, want 2", len(ids))
	}
	const claimAfter = 500 * time.Millisecond
	var firstTry atomic.Int64
	r := startConsume(t, c, fastRetries(outboxredis.ConsumerConfig{Stream: stream, Group: "billing", Consumer: "alive", ClaimAfter: claimAfter, MaxDeliver: 2, ParkStream: park}),
		func(m outbox.Message, _ int) error {
			firstTry.CompareAndSwap(0, int64(time.Since(given)))
			if m.ID == batch[1].ID {
				return errors.New("no such customer (injected)")
			}
			return nil
		})
	r.WaitHandled(t, batch[0])
	r.WaitFor(t, "the failing message parked", func() bool { return len(entries(t, c, park)) == 1 })
	r.WaitFor(t, "every entry acknowledged", func() bool { return pendingCount(t, c, stream, "billing") == 0 })
	if d := time.Duration(firstTry.Load()); d < claimAfter {
		t.Errorf("the handler was given a dead consumer's entry %v after its delivery; want it taken over only after ClaimAfter %v", d, claimAfter)
	}
	if n := r.TriesOf(batch[1].ID); n != 1 {
		t.Errorf("the failing message was tried %d times in the new consumer; want 1: its delivery to the dead one counts as the first of MaxDeliver 2", n)
	}
	if why, _ := entries(t, c, park)[0].Values[outboxredis.FieldParkedReason].(string); !strings.Contains(why, "after 2 attempt") {
		t.Errorf("parked-reason %q; want it to count 2 attempts", why)
	}
	if !r.Logs.Has(slog.LevelWarn, "took over", "entries=2") {
		t.Errorf("no WARN log of the 2 entries taken over; logs:\n%s", r.Logs)
	}
}

// A process started again under the name of one that died handles the
// entries that one was given first, at once, without waiting for
// ClaimAfter, then the entries nobody was given.
func TestAProcessRestartedUnderItsConsumerNameHandlesItsOwnPendingEntriesFirst(t *testing.T) {
	t.Parallel()
	c, stream := client(t)
	old := publishertest.Messages("orders.created", 3)
	for i := range old {
		old[i].Key = "order-1"
	}
	publish(t, redistest.URL(t), stream, old...)
	readAs(t, c, stream, "billing", "worker-1")
	fresh := publishertest.Messages("orders.created", 3)
	for i := range fresh {
		fresh[i].Key = "order-1"
	}
	publish(t, redistest.URL(t), stream, fresh...)

	started := time.Now()
	r := startConsume(t, c, outboxredis.ConsumerConfig{Stream: stream, Group: "billing", Consumer: "worker-1", ClaimAfter: time.Hour, Concurrency: 1}, nil)
	all := append(slices.Clone(old), fresh...)
	r.WaitHandled(t, all...)
	if d := time.Since(started); d > 10*time.Second {
		t.Errorf("the own pending entries took %v; want them handled at once (ClaimAfter is an hour)", d)
	}
	var want []uuid.UUID
	for _, m := range all {
		want = append(want, m.ID)
	}
	if got := r.HandledIDs(); !slices.Equal(got, want) {
		t.Errorf("handled %v; want the own pending entries first, then the new ones, in stream order: %v", got, want)
	}
	r.WaitFor(t, "every entry acknowledged", func() bool { return pendingCount(t, c, stream, "billing") == 0 })
}

// While a handler retries a message for longer than ClaimAfter, its
// consumer tells Redis it is still working on it (XCLAIM to itself, JUSTID),
// so another consumer of the group never takes it over, and the retries
// count no delivery.
func TestAMessageRetriedLongerThanClaimAfterIsNotTakenOverByAnotherConsumer(t *testing.T) {
	t.Parallel()
	c, stream := client(t)
	m := publishertest.Messages("orders.created", 1)[0]
	publish(t, redistest.URL(t), stream, m)
	const claimAfter = 300 * time.Millisecond
	cfg := outboxredis.ConsumerConfig{Stream: stream, Group: "billing", ClaimAfter: claimAfter, MaxDeliver: 1000,
		BackoffBase: 10 * time.Millisecond, BackoffMax: 50 * time.Millisecond}
	var firstTry atomic.Int64
	cfg.Consumer = "a"
	a := startConsume(t, c, cfg, func(outbox.Message, int) error {
		firstTry.CompareAndSwap(0, time.Now().UnixNano())
		if time.Since(time.Unix(0, firstTry.Load())) < 4*claimAfter {
			return errors.New("database busy (injected)")
		}
		return nil
	})
	a.WaitFor(t, "consumer a trying the message", func() bool { return a.TriesOf(m.ID) > 0 })
	cfg.Consumer = "b"
	b := startConsume(t, c, cfg, nil)
	a.WaitHandled(t, m)
	a.WaitFor(t, "the entry acknowledged", func() bool { return pendingCount(t, c, stream, "billing") == 0 })
	if n := b.TriesOf(m.ID); n != 0 {
		t.Errorf("consumer b was given the message %d times while consumer a retried it", n)
	}
	if b.Logs.Has(slog.LevelWarn, "took over") {
		t.Errorf("consumer b took over an entry; logs:\n%s", b.Logs)
	}
	if n := a.TriesOf(m.ID); n < 5 {
		t.Errorf("consumer a tried the message %d times; want it retried for longer than ClaimAfter", n)
	}
}

// Entries that wait in a process for a worker, none of them failing, are
// not taken over by another consumer of the group, however long the wait
// adds up to: the process keeps every entry it holds. (Two consumers with
// one worker each, a handler of 100 ms and ClaimAfter 1 s: the last of a
// window of entries waits longer than ClaimAfter.)
func TestEntriesWaitingForAWorkerAreNotTakenOverByAnotherConsumer(t *testing.T) {
	t.Parallel()
	c, stream := client(t)
	msgs := publishertest.Messages("orders.created", 40)
	publish(t, redistest.URL(t), stream, msgs...)
	cfg := outboxredis.ConsumerConfig{Stream: stream, Group: "billing", ClaimAfter: time.Second, Concurrency: 1}
	slow := func(outbox.Message, int) error { time.Sleep(100 * time.Millisecond); return nil }
	cfg.Consumer = "a"
	a := startConsume(t, c, cfg, slow)
	cfg.Consumer = "b"
	b := startConsume(t, c, cfg, slow)
	a.WaitFor(t, "every message handled", func() bool { return len(a.HandledIDs())+len(b.HandledIDs()) >= len(msgs) })
	a.WaitFor(t, "every entry acknowledged", func() bool { return pendingCount(t, c, stream, "billing") == 0 })
	for _, m := range msgs {
		if na, nb := a.TriesOf(m.ID), b.TriesOf(m.ID); na+nb != 1 {
			t.Errorf("message %s handled %d times by a and %d by b; want once in all", m.ID, na, nb)
		}
	}
	if a.Logs.Has(slog.LevelWarn, "took over") || b.Logs.Has(slog.LevelWarn, "took over") {
		t.Errorf("a consumer took over entries the other held:\n%s\n%s", a.Logs, b.Logs)
	}
}
