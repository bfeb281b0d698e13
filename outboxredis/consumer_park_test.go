package outboxredis_test

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

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/redistest"
	"github.com/go-outbox/outbox/outboxredis"
	"github.com/go-outbox/outbox/publishertest"
)

// A message whose handler keeps failing is parked after MaxDeliver
// attempts: appended to the park stream with all its fields and why, where
// from and by whom, logged at ERROR with its id, and acknowledged; the
// other messages go on.
func TestAMessageThatKeepsFailingIsParkedOnTheParkStreamAfterMaxDeliverAttempts(t *testing.T) {
	t.Parallel()
	c, stream := client(t)
	batch := publishertest.Messages("orders.created", 3)
	publish(t, redistest.URL(t), stream, batch...)
	ids := entries(t, c, stream)
	r := startConsume(t, c, fastRetries(outboxredis.ConsumerConfig{Stream: stream, Group: "billing", MaxDeliver: 3}),
		func(m outbox.Message, _ int) error {
			if m.ID == batch[0].ID {
				return errors.New("no such customer (injected)")
			}
			return nil
		})
	park := stream + outboxredis.ParkStreamSuffix
	t.Cleanup(func() { _ = c.Del(context.Background(), park).Err() })
	r.WaitHandled(t, batch[1], batch[2])
	r.WaitFor(t, "the failing message parked", func() bool { return len(entries(t, c, park)) == 1 })
	r.WaitFor(t, "every entry acknowledged", func() bool { return pendingCount(t, c, stream, "billing") == 0 })
	if n := r.TriesOf(batch[0].ID); n != 3 {
		t.Errorf("the failing message was tried %d times, want MaxDeliver = 3", n)
	}
	x := entries(t, c, park)[0]
	if got := received(x); got.ID != batch[0].ID.String() || got.Key != batch[0].Key || string(got.Payload) != string(batch[0].Payload) || got.Headers["x-seq"] != "0" {
		t.Errorf("parked entry %v; want the fields of message %s", x.Values, batch[0].ID)
	}
	for field, want := range map[string]string{
		outboxredis.FieldParkedFrom:   stream + "/" + ids[0].ID,
		outboxredis.FieldParkedBy:     "billing",
		outboxredis.FieldParkedReason: "parked after 3 attempt(s): no such customer (injected)",
	} {
		if got, _ := x.Values[field].(string); got != want {
			t.Errorf("parked entry: %s = %q, want %q", field, got, want)
		}
	}
	if !r.Logs.Has(slog.LevelError, "parked", batch[0].ID.String(), "no such customer") {
		t.Errorf("no ERROR log naming the parked message; logs:\n%s", r.Logs)
	}
}

// A park stream key holding another type refuses the XADD: the entry stays
// unacknowledged (never acknowledged without its copy on the park stream),
// an ERROR log names the park stream's key, and once the key is deleted the
// entry, taken over again after ClaimAfter, is parked.
func TestAParkStreamOfAnotherTypeLeavesTheEntryUnacknowledgedUntilItIsFixed(t *testing.T) {
	t.Parallel()
	c, stream := client(t)
	park := redistest.Stream(t, c, "outboxredis.parked.")
	if err := c.Set(ctxFor(t, 5*time.Second), park, "not a stream", 0).Err(); err != nil {
		t.Fatal(err)
	}
	m := publishertest.Messages("orders.created", 1)[0]
	publish(t, redistest.URL(t), stream, m)
	r := startConsume(t, c, fastRetries(outboxredis.ConsumerConfig{Stream: stream, Group: "billing", MaxDeliver: 2, ClaimAfter: 300 * time.Millisecond, ParkStream: park}),
		func(outbox.Message, int) error { return errors.New("no such customer (injected)") })
	r.WaitFor(t, "an ERROR log naming the park stream's key", func() bool {
		return r.Logs.Has(slog.LevelError, "park", park, "rename or delete that key")
	})
	if n := pendingCount(t, c, stream, "billing"); n != 1 {
		t.Fatalf("%d entries unacknowledged after the park failed; want the entry still pending", n)
	}
	if err := c.Del(ctxFor(t, 5*time.Second), park).Err(); err != nil {
		t.Fatal(err)
	}
	r.WaitFor(t, "the message parked once the key is gone", func() bool {
		xs, err := c.XRange(ctxFor(t, 5*time.Second), park, "-", "+").Result()
		return err == nil && len(xs) == 1 && received(xs[0]).ID == m.ID.String()
	})
	r.WaitFor(t, "the entry acknowledged", func() bool { return pendingCount(t, c, stream, "billing") == 0 })
}

// memParked is a ParkStore in memory, as the inbox tables keep parked
// messages, for Consume's Parked.
type memParked struct {
	mu     sync.Mutex
	parked map[uuid.UUID]*parkedEntry
	parks  atomic.Int32
}

type parkedEntry struct {
	consumer, reason string
	m                outbox.Message
	attempts         int
	retry            bool
}

func (p *memParked) Park(_ context.Context, consumer string, m outbox.Message, attempts int, reason string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.parked == nil {
		p.parked = map[uuid.UUID]*parkedEntry{}
	}
	p.parked[m.ID] = &parkedEntry{consumer: consumer, m: m, attempts: attempts, reason: reason}
	p.parks.Add(1)
	return nil
}

func (p *memParked) TakeRetries(_ context.Context, consumer string, limit int) ([]outbox.Message, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []outbox.Message
	for _, e := range p.parked {
		if e.consumer == consumer && e.retry && len(out) < limit {
			e.retry = false
			out = append(out, e.m)
		}
	}
	return out, nil
}

func (p *memParked) Unpark(_ context.Context, consumer string, id uuid.UUID) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if e := p.parked[id]; e != nil && e.consumer == consumer {
		delete(p.parked, id)
	}
	return nil
}

// get returns a copy of the parked message id, if any.
func (p *memParked) get(id uuid.UUID) (parkedEntry, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	e := p.parked[id]
	if e == nil {
		return parkedEntry{}, false
	}
	return *e, true
}

// requestRetry is what `outbox inbox parked retry` does.
func (p *memParked) requestRetry(id uuid.UUID) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.parked[id].retry = true
}

// With Parked set, a message that keeps failing goes to the consumer's
// database under Group instead of the park stream, is acknowledged, and
// comes back to the handler when an operator asks for its retry.
func TestAMessageThatKeepsFailingGoesToParkedWhenSetAndIsRetriedFromThere(t *testing.T) {
	t.Parallel()
	c, stream := client(t)
	m := publishertest.Messages("orders.created", 1)[0]
	publish(t, redistest.URL(t), stream, m)
	store := &memParked{}
	var fixed atomic.Bool
	r := startConsume(t, c, fastRetries(outboxredis.ConsumerConfig{Stream: stream, Group: "billing", MaxDeliver: 2, Parked: store}),
		func(outbox.Message, int) error {
			if !fixed.Load() {
				return errors.New("no such customer (injected)")
			}
			return nil
		})
	r.WaitFor(t, "the message parked in the store", func() bool { _, ok := store.get(m.ID); return ok })
	r.WaitFor(t, "the entry acknowledged", func() bool { return pendingCount(t, c, stream, "billing") == 0 })
	e, _ := store.get(m.ID)
	if e.consumer != "billing" || e.attempts != 2 || !strings.Contains(e.reason, "no such customer") {
		t.Errorf("parked as %q after %d attempts (%q); want under the group billing after MaxDeliver 2 attempts with the handler's error", e.consumer, e.attempts, e.reason)
	}
	if n, err := c.Exists(ctxFor(t, 5*time.Second), stream+outboxredis.ParkStreamSuffix).Result(); err != nil || n != 0 {
		t.Errorf("the park stream exists (%d, %v); want nothing appended to it when Parked is set", n, err)
	}
	if r.HandledCount(m.ID) != 0 {
		t.Fatalf("the handler succeeded with the message before its retry")
	}

	fixed.Store(true)
	store.requestRetry(m.ID)
	r.WaitHandled(t, m)
	r.WaitFor(t, "the message unparked", func() bool { _, ok := store.get(m.ID); return !ok })
	if n := store.parks.Load(); n != 1 {
		t.Errorf("the message was parked %d times, want once", n)
	}
}
