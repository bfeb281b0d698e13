package outboxotel_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
)

// parkedCounts is an inbox table's parked counts, changed by the test, and
// how often they were read.
type parkedCounts struct {
	calls atomic.Int32

	mu      sync.Mutex
	parked  map[string]int64
	waiting map[string]int64
}

func (p *parkedCounts) set(parked, waiting map[string]int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.parked, p.waiting = parked, waiting
}

func (p *parkedCounts) ParkedCounts(context.Context) (map[string]int64, error) {
	p.calls.Add(1)
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.parked, nil
}

func (p *parkedCounts) WaitingCounts(context.Context) (map[string]int64, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.waiting, nil
}

// The inbox gauges show each consumer's parked messages and those waiting
// behind a parked one of their key, read once per cache period however
// often they are collected; a consumer named, or seen once, shows 0 when it
// has none rather than vanishing.
func TestInboxGaugesCountParkedAndWaitingMessagesPerConsumerAtABoundedRate(t *testing.T) {
	s := newSDK(t) // StatsCacheFor: an hour
	table := &parkedCounts{}
	table.set(map[string]int64{"billing": 3, "shipping": 1}, map[string]int64{"billing": 2})
	if _, err := s.obs.WatchInbox(table, "billing", "audit"); err != nil {
		t.Fatal(err)
	}
	for range 5 {
		s.collect(t)
	}
	got := s.collect(t)
	if n := table.calls.Load(); n != 1 {
		t.Fatalf("6 collections read the parked counts %d times, want once (cached)", n)
	}
	for _, c := range []struct {
		name, consumer string
		want           float64
	}{
		{"outbox.inbox.parked.messages", "billing", 3},
		{"outbox.inbox.parked.messages", "shipping", 1},
		{"outbox.inbox.parked.messages", "audit", 0},
		{"outbox.inbox.waiting.messages", "billing", 2},
		{"outbox.inbox.waiting.messages", "shipping", 0},
		{"outbox.inbox.waiting.messages", "audit", 0},
	} {
		v, ok := got[c.name][attrs("consumer", c.consumer)]
		if !ok || v != c.want {
			t.Errorf("%s{consumer=%s} = %v (present %v), want %v; all: %v", c.name, c.consumer, v, ok, c.want, got[c.name])
		}
	}
}

// A consumer seen once goes on being shown, at 0, once its parked messages
// are retried or discarded.
func TestInboxGaugesShowZeroForAConsumerWhoseParkedMessagesAreGone(t *testing.T) {
	s := newSDKCachingFor(t, 0)
	table := &parkedCounts{}
	table.set(map[string]int64{"shipping": 2}, nil)
	if _, err := s.obs.WatchInbox(table); err != nil {
		t.Fatal(err)
	}
	if v := s.collect(t)["outbox.inbox.parked.messages"][attrs("consumer", "shipping")]; v != 2 {
		t.Fatalf("parked{consumer=shipping} = %v, want 2", v)
	}
	table.set(map[string]int64{}, nil)
	v, ok := s.collect(t)["outbox.inbox.parked.messages"][attrs("consumer", "shipping")]
	if !ok || v != 0 {
		t.Fatalf("parked{consumer=shipping} after its messages went = %v (present %v), want 0", v, ok)
	}
}

// ready is a readiness check the test sets.
type ready struct {
	mu  sync.Mutex
	err error
}

func (r *ready) set(err error) { r.mu.Lock(); r.err = err; r.mu.Unlock() }
func (r *ready) Ready() error  { r.mu.Lock(); defer r.mu.Unlock(); return r.err }

// The consumer's ready gauge is 1 while its readiness check is nil, 0
// otherwise.
func TestConsumerReadyGaugeFollowsItsReadiness(t *testing.T) {
	s := newSDK(t)
	r := &ready{err: errors.New("connecting")}
	if _, err := s.obs.WatchConsumer(r, "billing"); err != nil {
		t.Fatal(err)
	}
	billing := attrs("consumer", "billing")
	if v, ok := s.collect(t)["outbox.consumer.ready"][billing]; !ok || v != 0 {
		t.Fatalf("ready{consumer=billing} while not ready = %v (present %v), want 0", v, ok)
	}
	r.set(nil)
	if v := s.collect(t)["outbox.consumer.ready"][billing]; v != 1 {
		t.Fatalf("ready{consumer=billing} while ready = %v, want 1", v)
	}
}
