package storetest

import (
	"context"
	"errors"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/go-outbox/outbox"
)

// A message a consumer process took for a retry is in its handler until
// the process unparks it or parks it again: an operator's discard or retry
// meanwhile would let its key go on without it (the next message applied
// first) or hand it to a second process.
func testParkedTakenIsLeftAlone(t *testing.T, p ParkedTable) {
	m1, m2 := parkedMessage("order-1"), parkedMessage("order-1")
	park(t, p, "billing", m1, 5, "no such customer")
	parkBehind(t, p, "billing", m2)
	requestRetry(t, p, "billing", 1, m1.ID)
	if got := takeRetries(t, p, "billing", 10); !slices.Equal(got, []uuid.UUID{m1.ID}) {
		t.Fatalf("retries taken after the head's retry was requested: %v; want %s", got, m1.ID)
	}
	if n, err := p.DiscardParked(t.Context(), "billing", m1.ID); err != nil || n != 0 {
		t.Fatalf("discard %s while a process has it in its handler: %d, %v; want 0 (left alone)", m1.ID, n, err)
	}
	if got := getParked(t, p, "billing", m2.ID); got.RetryRequested || got.Behind != m1.ID {
		t.Fatalf("message %s behind %s, which its process is retrying: retry %v, behind %s; want it still waiting behind %s, not requested",
			m2.ID, m1.ID, got.RetryRequested, got.Behind, m1.ID)
	}
	requestRetry(t, p, "billing", 0, m1.ID)
	requestRetry(t, p, "billing", 0)
	if got := takeRetries(t, p, "billing", 10); len(got) != 0 {
		t.Fatalf("retries taken after a retry of %s, already in a handler, was requested again: %v; want none (handed out once)", m1.ID, got)
	}
	// Its handler failed again: parked again, it can be retried again.
	park(t, p, "billing", m1, 1, "still no such customer")
	requestRetry(t, p, "billing", 1, m1.ID)
}

// `outbox inbox parked retry --all` while a key's chain runs must not hand
// out again the message of the key a process took last.
func testParkedRetryOfAllLeavesTheChainAlone(t *testing.T, p ParkedTable) {
	m1, m2, m3 := parkedMessage("order-1"), parkedMessage("order-1"), parkedMessage("order-1")
	park(t, p, "billing", m1, 5, "no such customer")
	parkBehind(t, p, "billing", m2)
	parkBehind(t, p, "billing", m3)
	requestRetry(t, p, "billing", 1, m1.ID)
	takeRetries(t, p, "billing", 10)
	unpark(t, p, "billing", m1.ID)
	if id, ok := takeNextWaiting(t, p, "billing", "order-1"); !ok || id != m2.ID {
		t.Fatalf("next waiting message of order-1 once %s is unparked: %s, %v; want %s", m1.ID, id, ok, m2.ID)
	}
	// m2 is in its handler; the operator retries all of billing's.
	requestRetry(t, p, "billing", 0)
	if got := takeRetries(t, p, "billing", 10); len(got) != 0 {
		t.Fatalf("retries taken after a retry of all while %s is in its handler: %v; want none (handed out once)", m2.ID, got)
	}
	unpark(t, p, "billing", m2.ID)
	if id, ok := takeNextWaiting(t, p, "billing", "order-1"); !ok || id != m3.ID {
		t.Fatalf("next waiting message of order-1 once %s is unparked: %s, %v; want %s", m2.ID, id, ok, m3.ID)
	}
}

// A retried message whose handler fails again is parked again where it was
// in its key's order, its first, even if an operator tried to discard it
// meanwhile.
func testParkedRetriedAndParkedAgainKeepsItsPlace(t *testing.T, p ParkedTable) {
	m1, m2 := parkedMessage("order-1"), parkedMessage("order-1")
	park(t, p, "billing", m1, 5, "no such customer")
	parkBehind(t, p, "billing", m2)
	requestRetry(t, p, "billing", 1, m1.ID)
	takeRetries(t, p, "billing", 10)
	if _, err := p.DiscardParked(t.Context(), "billing", m1.ID); err != nil {
		t.Fatalf("discard %s while in its handler: %v", m1.ID, err)
	}
	park(t, p, "billing", m1, 1, "still no such customer")
	if got := getParked(t, p, "billing", m2.ID); got.Behind != m1.ID || got.RetryRequested {
		t.Fatalf("message %s once %s, ahead of it, failed again: behind %s, retry %v; want still behind %s, not requested",
			m2.ID, m1.ID, got.Behind, got.RetryRequested, m1.ID)
	}
	if got := takeRetries(t, p, "billing", 10); len(got) != 0 {
		t.Fatalf("retries taken once %s failed again: %v; want none", m1.ID, got)
	}
}

// A process that took a message and stopped leaves it taken: the operator
// forgets it was taken, then retries or discards it. A waiting first message
// of a key that nobody requested nor took is stalled, and counted so.
func testParkedForgetTakenAndStalled(t *testing.T, p ParkedTable) {
	m1, m2, m3 := parkedMessage("order-1"), parkedMessage("order-1"), parkedMessage("order-1")
	park(t, p, "billing", m1, 5, "no such customer")
	parkBehind(t, p, "billing", m2)
	parkBehind(t, p, "billing", m3)
	if got := getParked(t, p, "billing", m1.ID); !got.TakenAt.IsZero() {
		t.Fatalf("message %s, parked and never taken: taken at %s; want the zero time", m1.ID, got.TakenAt)
	}
	requestRetry(t, p, "billing", 1, m1.ID)
	before := time.Now().Add(-time.Minute)
	takeRetries(t, p, "billing", 10)
	if got := getParked(t, p, "billing", m1.ID); got.TakenAt.Before(before) || got.TakenAt.After(time.Now().Add(time.Minute)) {
		t.Fatalf("message %s just taken for a retry: taken at %s; want about now", m1.ID, got.TakenAt)
	}
	counts(t, p.TakenCounts, "taken", map[string]int64{"billing": 1})
	counts(t, p.StalledCounts, "stalled", map[string]int64{})
	// Its process stopped: the operator takes it back and discards it.
	if n, err := p.ForgetTaken(t.Context(), "billing", m1.ID, m2.ID); err != nil || n != 1 {
		t.Fatalf("forget that %s (and %s, never taken) were taken: %d, %v; want 1", m1.ID, m2.ID, n, err)
	}
	if n, err := p.DiscardParked(t.Context(), "billing", m1.ID); err != nil || n != 1 {
		t.Fatalf("discard %s once no process has it: %d, %v; want 1", m1.ID, n, err)
	}
	// The key's next is taken by a process that stops.
	if got := takeRetries(t, p, "billing", 10); !slices.Equal(got, []uuid.UUID{m2.ID}) {
		t.Fatalf("retries taken once %s was discarded: %v; want %s", m1.ID, got, m2.ID)
	}
	counts(t, p.StalledCounts, "stalled", map[string]int64{})
	if n, err := p.ForgetTaken(t.Context(), "billing"); err != nil || n != 1 {
		t.Fatalf("forget that any of billing's messages was taken: %d, %v; want 1", n, err)
	}
	counts(t, p.TakenCounts, "taken", map[string]int64{})
	counts(t, p.StalledCounts, "stalled", map[string]int64{"billing": 1})
	requestRetry(t, p, "billing", 1, m2.ID)
	counts(t, p.StalledCounts, "stalled", map[string]int64{})
	if _, err := p.ForgetTaken(t.Context(), ""); err == nil {
		t.Fatalf("forget taken messages naming no consumer: no error")
	}
}

// UnparkRetried and ParkRetried tell the process whose handler had the
// message whether it was still parked: an operator may have forced a
// discard meanwhile.
func testParkedRetryEndSeesADiscard(t *testing.T, p ParkedTable) {
	m1, m2 := parkedMessage("order-1"), parkedMessage("order-2")
	park(t, p, "billing", m1, 5, "no such customer")
	park(t, p, "billing", m2, 5, "no such customer")
	requestRetry(t, p, "billing", 2)
	takeRetries(t, p, "billing", 10)
	taken1, taken2 := getParked(t, p, "billing", m1.ID).TakenAt, getParked(t, p, "billing", m2.ID).TakenAt
	if ok, err := p.UnparkRetried(t.Context(), "billing", m1.ID, taken1); err != nil || !ok {
		t.Fatalf("unpark %s after its retry: %v, %v; want true (it was parked)", m1.ID, ok, err)
	}
	if ok, err := p.UnparkRetried(t.Context(), "billing", m1.ID, taken1); err != nil || ok {
		t.Fatalf("unpark %s again: %v, %v; want false (it was gone)", m1.ID, ok, err)
	}
	if ok, err := p.ParkRetried(t.Context(), "billing", m2, taken2, 1, "failed again"); err != nil || !ok {
		t.Fatalf("park %s again after its retry failed: %v, %v; want true", m2.ID, ok, err)
	}
	if got := getParked(t, p, "billing", m2.ID); got.Error != "failed again" || got.Attempts != 1 || !got.TakenAt.IsZero() || got.RetryRequested {
		t.Fatalf("message %s parked again: error %q, %d attempts, taken at %s, retry %v; want the new error and attempts, not taken nor requested",
			m2.ID, got.Error, got.Attempts, got.TakenAt, got.RetryRequested)
	}
	if ok, err := p.ParkRetried(t.Context(), "billing", m1, taken1, 1, "failed again"); err != nil || ok {
		t.Fatalf("park %s again, gone meanwhile: %v, %v; want false", m1.ID, ok, err)
	}
	if _, err := p.GetParked(t.Context(), "billing", m1.ID); !errors.Is(err, outbox.ErrNotFound) {
		t.Fatalf("get %s after a retry's end parked it again once gone: %v; want ErrNotFound (not parked again)", m1.ID, err)
	}
}

func counts(t *testing.T, count func(context.Context) (map[string]int64, error), what string, want map[string]int64) {
	t.Helper()
	got, err := count(t.Context())
	if err != nil || !maps.Equal(got, want) {
		t.Fatalf("%s counts: %v, %v; want %v", what, got, err, want)
	}
}

// A process that stops while a message is in its handler hands it back:
// it is requested again, where it was in its key's order, and the next
// process takes it.
func testParkedReturnTaken(t *testing.T, p ParkedTable) {
	m1, m2, m3 := parkedMessage("order-1"), parkedMessage("order-1"), parkedMessage("order-2")
	park(t, p, "billing", m1, 5, "no such customer")
	parkBehind(t, p, "billing", m2)
	park(t, p, "billing", m3, 5, "no such customer")
	requestRetry(t, p, "billing", 1, m1.ID)
	takeRetries(t, p, "billing", 10)
	unpark(t, p, "billing", m1.ID)
	if id, ok := takeNextWaiting(t, p, "billing", "order-1"); !ok || id != m2.ID {
		t.Fatalf("next waiting message of order-1 once %s is unparked: %s, %v; want %s", m1.ID, id, ok, m2.ID)
	}
	for _, id := range []uuid.UUID{m2.ID, m3.ID} {
		if err := p.ReturnTaken(t.Context(), "billing", id, getParked(t, p, "billing", id).TakenAt); err != nil {
			t.Fatalf("hand back %s: %v", id, err)
		}
	}
	if got := getParked(t, p, "billing", m2.ID); !got.TakenAt.IsZero() || !got.RetryRequested || !got.Waiting {
		t.Fatalf("message %s handed back: taken at %s, retry %v, waiting %v; want it requested, no longer taken, still waiting first of its key",
			m2.ID, got.TakenAt, got.RetryRequested, got.Waiting)
	}
	// m3 was not taken: handing it back requests nothing.
	if got := takeRetries(t, p, "billing", 10); !slices.Equal(got, []uuid.UUID{m2.ID}) {
		t.Fatalf("retries taken once %s was handed back: %v; want %s only", m2.ID, got, m2.ID)
	}
}
