package relaytest

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/outboxdriver"
)

// observed records what a relay told its Observer.
type observed struct {
	mu        sync.Mutex
	exchanges []outbox.Exchange
	published map[uuid.UUID]int // batch sizes seen by Publishing's done, by first id
	outcomes  map[uuid.UUID][]outbox.Outcome
}

type ctxKey struct{}

func (o *observed) Exchanged(_ context.Context, e outbox.Exchange) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.exchanges = append(o.exchanges, e)
}

func (o *observed) Publishing(ctx context.Context, _ string, batch []outbox.Message) (context.Context, func([]error)) {
	ctx = context.WithValue(ctx, ctxKey{}, batch[0].ID)
	return ctx, func(results []error) {
		o.mu.Lock()
		defer o.mu.Unlock()
		o.published[batch[0].ID] = len(results)
	}
}

func (o *observed) Settled(_ context.Context, _ string, m *outbox.Message, outcome outbox.Outcome, _ error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.outcomes[m.ID] = append(o.outcomes[m.ID], outcome)
}

func (o *observed) outcomesOf(id uuid.UUID) []outbox.Outcome {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]outbox.Outcome(nil), o.outcomes[id]...)
}

// testObserver publishes one message that succeeds, one that fails once and
// one that fails permanently: the observer hears every exchange, gets the
// publisher's context, and each message's outcomes in order.
func testObserver(t *testing.T, h Harness) {
	ctx := context.Background()
	ok, flaky, bad := newMessage("ok", 1), newMessage("flaky", 2), newMessage("bad", 3)
	if err := h.Write(ctx, true, ok, flaky, bad); err != nil {
		t.Fatal(err)
	}
	obs := &observed{published: map[uuid.UUID]int{}, outcomes: map[uuid.UUID][]outbox.Outcome{}}
	var (
		mu        sync.Mutex
		failed    bool
		ctxPassed = true
	)
	rec := NewRecorder()
	pub := outbox.PublisherFunc(func(ctx context.Context, batch []outbox.Message) []error {
		mu.Lock()
		if ctx.Value(ctxKey{}) != batch[0].ID {
			ctxPassed = false
		}
		mu.Unlock()
		return rec.Publish(ctx, batch)
	})
	rec.Fail = func(m outbox.Message) error {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case m.ID == bad.ID:
			return outbox.Permanent(errors.New("refused (injected)"))
		case m.ID == flaky.ID && !failed:
			failed = true
			return errors.New("timeout (injected)")
		}
		return nil
	}
	StartRelay(t, h.Store, pub, outbox.Config{Observer: obs, PollInterval: 20 * time.Millisecond, ActivePollInterval: 5 * time.Millisecond,
		BackoffBase: time.Millisecond, BackoffMax: 5 * time.Millisecond})
	want := map[uuid.UUID][]outbox.Outcome{
		ok.ID:    {outbox.OutcomePublished},
		flaky.ID: {outbox.OutcomeRetried, outbox.OutcomePublished},
		bad.ID:   {outbox.OutcomeDead},
	}
	deadline := time.Now().Add(20 * time.Second)
	for id, w := range want {
		for len(obs.outcomesOf(id)) < len(w) {
			if time.Now().After(deadline) {
				t.Fatalf("message %s: outcomes %v, want %v", id, obs.outcomesOf(id), w)
			}
			time.Sleep(5 * time.Millisecond)
		}
		if got := obs.outcomesOf(id); !equalOutcomes(got, w) {
			t.Errorf("message %s: outcomes %v, want %v", id, got, w)
		}
	}
	waitEmpty(t, h, 10*time.Second)
	// The observer hears of an exchange once the store call returned, a
	// moment after the table changed.
	recordedSoFar := func() (n int) {
		obs.mu.Lock()
		defer obs.mu.Unlock()
		for _, e := range obs.exchanges {
			n += e.Recorded
		}
		return n
	}
	for deadline := time.Now().Add(10 * time.Second); recordedSoFar() < 4 && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	obs.mu.Lock()
	defer obs.mu.Unlock()
	mu.Lock()
	defer mu.Unlock()
	if !ctxPassed {
		t.Error("the publisher did not get the context Observer.Publishing returned")
	}
	var claimed, recorded int
	for _, e := range obs.exchanges {
		if e.Table != h.Store.Name() || e.Duration <= 0 {
			t.Errorf("exchange %+v: want the table %s and a duration", e, h.Store.Name())
		}
		claimed += e.Claimed
		recorded += e.Recorded
	}
	// Four claims of a message (the flaky one twice) and four outcomes.
	if claimed != 4 || recorded != 4 {
		t.Errorf("exchanges claimed %d and recorded %d messages, want 4 and 4", claimed, recorded)
	}
	if len(obs.published) == 0 {
		t.Error("Publishing's done was never called")
	}
}

func equalOutcomes(a, b []outbox.Outcome) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// testReady checks Relay.Ready: an error before Run, nil once the store
// answered, an error once the store has not answered for longer than the
// window, and an error after Run returned.
func testReady(t *testing.T, h Harness) {
	store := &hangingStore{Store: h.Store, up: make(chan struct{})}
	down := &failingProbe{hangingStore: store}
	relay, err := outbox.NewRelay(down, NewRecorder(), outbox.Config{PollInterval: 20 * time.Millisecond, ActivePollInterval: 5 * time.Millisecond,
		LeaseDuration: 200 * time.Millisecond, Logger: TestLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	if err := relay.Ready(); err == nil {
		t.Fatal("Ready before Run = nil, want an error")
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- relay.Run(ctx) }()
	waitReady := func(want bool) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for (relay.Ready() == nil) != want {
			if time.Now().After(deadline) {
				t.Fatalf("Ready = %v after 10s, want ready %v", relay.Ready(), want)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	waitReady(true)
	down.failing.Store(true)
	store.down.Store(true)
	waitReady(false)
	t.Logf("not ready: %v", relay.Ready())
	down.failing.Store(false)
	store.down.Store(false)
	waitReady(true)
	cancel()
	close(store.up)
	<-done
	if err := relay.Ready(); err == nil {
		t.Fatal("Ready after Run returned = nil, want an error")
	}
}

// failingProbe is a hangingStore whose NextDue fails while failing is set.
type failingProbe struct {
	*hangingStore
	failing atomic.Bool
}

func (s *failingProbe) NextDue(ctx context.Context) (time.Duration, bool, error) {
	if s.failing.Load() {
		return 0, false, errors.New("connection refused (injected)")
	}
	return s.hangingStore.NextDue(ctx)
}

var _ outboxdriver.Store = (*failingProbe)(nil)
