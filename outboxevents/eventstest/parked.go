package eventstest

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/outboxdriver"
	"github.com/go-outbox/outbox/outboxevents"
	"github.com/go-outbox/outbox/relaytest"
)

// parkedTable is the operator's side of an inbox table that keeps parked
// messages (`outbox inbox parked list`, `retry`).
type parkedTable interface {
	ListParked(ctx context.Context, consumer string, after uuid.UUID, limit int) ([]outbox.ParkedMessage, error)
	RequestRetry(ctx context.Context, consumer string, ids ...uuid.UUID) (int, error)
}

// testPermanentFailureParksOneHandler: one handler of three fails for good
// on an event; the event is published, the other two apply it once, the
// failing handler's share is parked under its name, and an operator's retry
// runs that handler alone.
func testPermanentFailureParksOneHandler[TTx any](t *testing.T, h Harness[TTx]) {
	table, ok := h.Inbox.(parkedTable)
	if !ok {
		t.Skip("the inbox table keeps no parked messages")
	}
	r := registry(t)
	d := dispatcher(t, h, r)
	var fixed atomic.Bool
	handle(t, d, h, "first", placedID, nil)
	handle(t, d, h, "second", placedID, func() error {
		if !fixed.Load() {
			return outbox.Permanent(errors.New("no such mailbox (injected)"))
		}
		return nil
	})
	handle(t, d, h, "third", placedID, nil)
	save(t, h, r, true, "o-4", OrderPlaced{OrderID: "o-4"})
	relaytest.StartRelay(t, h.Store, d, outbox.Config{PollInterval: 20 * time.Millisecond, ActivePollInterval: 5 * time.Millisecond})
	requireEffects(t, h, map[string]int{"first/o-4": 1, "second/o-4": 0, "third/o-4": 1})
	if st, err := h.Store.(outboxdriver.Admin).Stats(t.Context()); err != nil || st.Dead != 0 {
		t.Fatalf("outbox after one handler failed for good: %+v, %v; want the event published, not dead", st, err)
	}
	parked, err := table.ListParked(t.Context(), "second", uuid.Nil, 10)
	if err != nil || len(parked) != 1 || parked[0].Topic != "orders.placed" {
		t.Fatalf("parked shares of handler second: %+v, %v; want the event", parked, err)
	}
	for _, other := range []string{"first", "third"} {
		if got, err := table.ListParked(t.Context(), other, uuid.Nil, 10); err != nil || len(got) != 0 {
			t.Fatalf("parked shares of handler %s, which succeeded: %+v, %v; want none", other, got, err)
		}
	}

	fixed.Store(true)
	if n, err := table.RequestRetry(t.Context(), "second"); err != nil || n != 1 {
		t.Fatalf("request the retry of handler second's share: %d, %v", n, err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	retried := make(chan error, 1)
	go func() { retried <- d.RetryParked(ctx, outboxevents.RetryConfig{Poll: 10 * time.Millisecond}) }()
	defer func() {
		cancel()
		if err := <-retried; err != nil {
			t.Errorf("RetryParked: %v", err)
		}
	}()
	deadline := time.Now().Add(30 * time.Second)
	for {
		got, err := table.ListParked(t.Context(), "second", uuid.Nil, 10)
		if err == nil && len(got) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("handler second's share still parked 30s after its retry was requested: %+v, %v", got, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	requireEffects(t, h, map[string]int{"first/o-4": 1, "second/o-4": 1, "third/o-4": 1})
}

// testUnavailableHandlerCountsNoAttempt: a handler whose destination is
// unavailable delays the event without spending its attempts (here one),
// and the other handler applies it once.
func testUnavailableHandlerCountsNoAttempt[TTx any](t *testing.T, h Harness[TTx]) {
	r := registry(t)
	d := dispatcher(t, h, r)
	var tries atomic.Int32
	handle(t, d, h, "read-model", placedID, nil)
	handle(t, d, h, "welcome-mail", placedID, func() error {
		if tries.Add(1) <= 3 {
			return outbox.Unavailable(errors.New("dial tcp: connection refused (injected)"))
		}
		return nil
	})
	save(t, h, r, true, "o-5", OrderPlaced{OrderID: "o-5"})
	relaytest.StartRelay(t, h.Store, d, outbox.Config{PollInterval: 20 * time.Millisecond, ActivePollInterval: 5 * time.Millisecond, MaxAttempts: 1})
	requireEffects(t, h, map[string]int{"read-model/o-5": 1, "welcome-mail/o-5": 1})
	if st, err := h.Store.(outboxdriver.Admin).Stats(t.Context()); err != nil || st.Dead != 0 {
		t.Fatalf("outbox after a handler was unavailable three times (MaxAttempts 1): %+v, %v; want the event published, not dead", st, err)
	}
}
