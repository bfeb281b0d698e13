package eventstest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/outboxevents"
)

// keyTable is the operator's side of an inbox table that holds a key behind
// a parked message (outbox.KeyParkStore), as `outbox inbox parked` uses it.
type keyTable interface {
	parkedTable
	outbox.KeyParkStore
}

// keyedHandler is handler A of the key-order tests: it fails for good on
// the event it is told to until fixed, and otherwise records an effect and
// the order it applied the events in.
type keyedHandler struct {
	mu      sync.Mutex
	applied []string        // labels, in the order A applied them
	poison  map[string]bool // labels A fails for good on
	runs    map[string]int  // label -> times A was run on it, failing or not
}

// failOn makes A fail for good on the events of labels, and on no other.
func (k *keyedHandler) failOn(labels ...string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.poison = map[string]bool{}
	for _, l := range labels {
		k.poison[l] = true
	}
}

func (k *keyedHandler) order() []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return slices.Clone(k.applied)
}

func (k *keyedHandler) ran(l string) int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.runs[l]
}

// label names an event of the key-order tests: its order and its sequence
// number within the order (TotalCents).
func label(e OrderPlaced) string { return fmt.Sprintf("%s#%d", e.OrderID, e.TotalCents) }

// keyOrderSetup adds handler "A", which fails permanently on the events of
// poison (until told otherwise), and handler "B", which fails when bFails
// (if not nil) returns an error; both record effects "A/<label>" and
// "B/<label>".
func keyOrderSetup[TTx any](t *testing.T, h Harness[TTx], d *outboxevents.Dispatcher[TTx], bFails func() error, poison ...string) *keyedHandler {
	t.Helper()
	a := &keyedHandler{runs: map[string]int{}}
	a.failOn(poison...)
	err := outboxevents.Handle(d, "A", func(ctx context.Context, tx TTx, e OrderPlaced) error {
		a.mu.Lock()
		defer a.mu.Unlock()
		a.runs[label(e)]++
		if a.poison[label(e)] {
			return outbox.Permanent(errors.New("no such account (injected)"))
		}
		if err := h.Effect(ctx, tx, "A/"+label(e)); err != nil {
			return err
		}
		a.applied = append(a.applied, label(e))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	handle(t, d, h, "B", label, bFails)
	return a
}

// event returns the n-th event of order id as a message of key id; its id
// is later than those made before it.
func event(t *testing.T, r *outboxevents.Registry, id string, n int) outbox.Message {
	t.Helper()
	m, err := r.Message(OrderPlaced{OrderID: id, TotalCents: n}, id)
	if err != nil {
		t.Fatal(err)
	}
	return *m
}

// publish hands m to d alone, as a relay would, and wants it published.
func publish[TTx any](t *testing.T, d *outboxevents.Dispatcher[TTx], m outbox.Message, why string) {
	t.Helper()
	if err := d.Publish(t.Context(), []outbox.Message{m})[0]; err != nil {
		t.Fatalf("event %s (key %q, %s): %v; want published (nil)", m.ID, m.Key, why, err)
	}
}

// requestRetry asks for the retry of consumer's parked message id, as
// `outbox inbox parked retry` does.
func requestRetry(t *testing.T, table parkedTable, consumer string, id uuid.UUID) {
	t.Helper()
	if n, err := table.RequestRetry(t.Context(), consumer, id); err != nil || n != 1 {
		t.Fatalf("request the retry of %s's parked share %s: %d, %v; want 1 requested", consumer, id, n, err)
	}
}

// startRetries runs d.RetryParked until stop is called or the test ends.
func startRetries[TTx any](t *testing.T, d *outboxevents.Dispatcher[TTx]) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	retried := make(chan error, 1)
	go func() { retried <- d.RetryParked(ctx, outboxevents.RetryConfig{Poll: 10 * time.Millisecond}) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-retried; err != nil {
				t.Errorf("RetryParked: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// waitParked polls consumer's parked messages until done accepts them, for
// 30s at most, and returns them.
func waitParked(t *testing.T, table parkedTable, consumer string, want string, done func([]outbox.ParkedMessage) bool) []outbox.ParkedMessage {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		got, err := table.ListParked(t.Context(), consumer, uuid.Nil, 10)
		if err == nil && done(got) {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s's parked shares after 30s: %+v, %v; want %s", consumer, got, err, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func noneParked(p []outbox.ParkedMessage) bool { return len(p) == 0 }

// retryUntilUnparked requests the retry of consumer's parked message id,
// runs d.RetryParked and waits until consumer has no parked message left.
func retryUntilUnparked[TTx any](t *testing.T, table parkedTable, d *outboxevents.Dispatcher[TTx], consumer string, id uuid.UUID) {
	t.Helper()
	requestRetry(t, table, consumer, id)
	defer startRetries(t, d)()
	waitParked(t, table, consumer, "none, after the retry of "+id.String(), noneParked)
}

// testParkedShareHoldsItsKey: handler A fails for good on e1 of key
// order-1; e2 of the key waits behind it for A while B applies both and A
// goes on with key order-2; the retry of e1 applies e1 then e2 with A, once
// each.
func testParkedShareHoldsItsKey[TTx any](t *testing.T, h Harness[TTx]) {
	table, ok := h.Inbox.(keyTable)
	if !ok {
		t.Skip("the inbox table does not hold keys (no outbox.KeyParkStore)")
	}
	r := registry(t)
	d := dispatcher(t, h, r)
	a := keyOrderSetup(t, h, d, nil, "order-1#1")
	e1, e2, other := event(t, r, "order-1", 1), event(t, r, "order-1", 2), event(t, r, "order-2", 1)
	publish(t, d, e1, "A fails for good on it")
	publish(t, d, e2, "A's share of e1 is parked")
	publish(t, d, other, "another key")
	requireEffects(t, h, map[string]int{
		"A/order-1#1": 0, "A/order-1#2": 0, "A/order-2#1": 1,
		"B/order-1#1": 1, "B/order-1#2": 1, "B/order-2#1": 1,
	})
	parked, err := table.ListParked(t.Context(), "A", uuid.Nil, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(parked) != 2 || parked[0].ID != e1.ID || parked[0].Waiting || parked[1].ID != e2.ID || !parked[1].Waiting || parked[1].Behind != e1.ID {
		t.Fatalf("A's parked shares: %+v; want e1 %s parked and e2 %s waiting behind it", parked, e1.ID, e2.ID)
	}
	if got, err := table.ListParked(t.Context(), "B", uuid.Nil, 10); err != nil || len(got) != 0 {
		t.Fatalf("B's parked shares: %+v, %v; want none: A's parked share holds the key for A alone", got, err)
	}

	a.failOn()
	retryUntilUnparked(t, table, d, "A", e1.ID)
	requireEffects(t, h, map[string]int{
		"A/order-1#1": 1, "A/order-1#2": 1, "A/order-2#1": 1,
		"B/order-1#1": 1, "B/order-1#2": 1, "B/order-2#1": 1,
	})
	if got, want := a.order(), []string{"order-2#1", "order-1#1", "order-1#2"}; !slices.Equal(got, want) {
		t.Fatalf("A applied %v; want %v: key order-1 in order, key order-2 not held by it", got, want)
	}
}

// testSkipParkedInKeyOrder: with SkipParkedInKeyOrder, handler A fails for
// good on e1 while B fails on it retryably. The relay's retry of e1, for B,
// does not run A again, though A was fixed meanwhile: only RetryParked runs
// a parked share, and e1 does not count as overtaking itself. A then
// applies e2 at once past its parked e1, which counts it as overtaking; the
// retry then applies e1.
func testSkipParkedInKeyOrder[TTx any](t *testing.T, h Harness[TTx]) {
	table, ok := h.Inbox.(keyTable)
	if !ok {
		t.Skip("the inbox table does not hold keys (no outbox.KeyParkStore)")
	}
	r := registry(t)
	d, err := outboxevents.NewDispatcher(r, h.Inbox, outboxevents.SkipParkedInKeyOrder())
	if err != nil {
		t.Fatal(err)
	}
	var bLocked atomic.Bool
	bLocked.Store(true)
	a := keyOrderSetup(t, h, d, func() error {
		if bLocked.Load() {
			return errors.New("ledger locked (injected)")
		}
		return nil
	}, "order-1#1")
	e1, e2 := event(t, r, "order-1", 1), event(t, r, "order-1", 2)
	if err := d.Publish(t.Context(), []outbox.Message{e1})[0]; err == nil || outbox.IsPermanent(err) || outbox.IsHeldBack(err) {
		t.Fatalf("event %s with A failing for good and B retryably: %v; want an ordinary retryable error, for B", e1.ID, err)
	}
	a.failOn()
	bLocked.Store(false)
	e1.Attempts++ // as the relay hands it again
	publish(t, d, e1, "the relay's retry of it, for B")
	if n := a.ran("order-1#1"); n != 1 {
		t.Errorf("A was run on e1 %s %d times; want once: the relay's retry, for B, must leave A's parked share to RetryParked", e1.ID, n)
	}
	requireEffects(t, h, map[string]int{"A/order-1#1": 0, "B/order-1#1": 1})
	requireOvertaken(t, table, "A", e1.ID, 0, "its parked share does not overtake itself")

	publish(t, d, e2, "A skips its parked share of e1")
	requireEffects(t, h, map[string]int{"A/order-1#1": 0, "A/order-1#2": 1, "B/order-1#1": 1, "B/order-1#2": 1})
	requireOvertaken(t, table, "A", e1.ID, 1, "e2 overtook it")

	retryUntilUnparked(t, table, d, "A", e1.ID)
	requireEffects(t, h, map[string]int{"A/order-1#1": 1, "A/order-1#2": 1, "B/order-1#1": 1, "B/order-1#2": 1})
	if got, want := a.order(), []string{"order-1#2", "order-1#1"}; !slices.Equal(got, want) {
		t.Fatalf("A applied %v; want %v: e2 past the parked e1, e1 on its retry", got, want)
	}
}

// requireOvertaken wants id to be consumer's only parked share, not
// waiting, overtaken by n later events of its key.
func requireOvertaken(t *testing.T, table parkedTable, consumer string, id uuid.UUID, n int, why string) {
	t.Helper()
	parked, err := table.ListParked(t.Context(), consumer, uuid.Nil, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(parked) != 1 || parked[0].ID != id || parked[0].Waiting || parked[0].Overtaken != n {
		got := make([]string, len(parked))
		for i, p := range parked {
			got[i] = fmt.Sprintf("%s (waiting %v, overtaken by %d)", p.ID, p.Waiting, p.Overtaken)
		}
		t.Fatalf("%s's parked shares: %v; want %s alone, overtaken by %d (%s)", consumer, got, id, n, why)
	}
}

// testRetriedKeyStopsAtANewFailure: A's shares e2 and e3 wait behind its
// parked e1; on the retry A applies e1, fails for good on e2, which becomes
// the key's parked head with e3 still waiting behind it; the next retry
// applies e2 then e3.
func testRetriedKeyStopsAtANewFailure[TTx any](t *testing.T, h Harness[TTx]) {
	table, ok := h.Inbox.(keyTable)
	if !ok {
		t.Skip("the inbox table does not hold keys (no outbox.KeyParkStore)")
	}
	r := registry(t)
	d := dispatcher(t, h, r)
	a := keyOrderSetup(t, h, d, nil, "order-1#1")
	e1, e2, e3 := event(t, r, "order-1", 1), event(t, r, "order-1", 2), event(t, r, "order-1", 3)
	for _, m := range []outbox.Message{e1, e2, e3} {
		publish(t, d, m, "A fails for good on e1")
	}
	a.failOn("order-1#2")
	requestRetry(t, table, "A", e1.ID)
	startRetries(t, d)
	parked := waitParked(t, table, "A", "e2 parked as the key's head (no longer waiting), e3 waiting behind it", func(p []outbox.ParkedMessage) bool {
		return len(p) == 2 && p[0].ID == e2.ID && !p[0].Waiting
	})
	if parked[1].ID != e3.ID || !parked[1].Waiting || parked[1].Behind != e2.ID {
		t.Fatalf("A's parked shares after e2 failed again: %+v; want e3 %s waiting behind e2 %s, the key's new head", parked, e3.ID, e2.ID)
	}
	requireEffects(t, h, map[string]int{"A/order-1#1": 1, "A/order-1#2": 0, "A/order-1#3": 0})

	a.failOn()
	requestRetry(t, table, "A", e2.ID)
	waitParked(t, table, "A", "none, after the retry of e2", noneParked)
	requireEffects(t, h, map[string]int{"A/order-1#1": 1, "A/order-1#2": 1, "A/order-1#3": 1, "B/order-1#1": 1, "B/order-1#2": 1, "B/order-1#3": 1})
	if got, want := a.order(), []string{"order-1#1", "order-1#2", "order-1#3"}; !slices.Equal(got, want) {
		t.Fatalf("A applied %v; want %v", got, want)
	}
}
