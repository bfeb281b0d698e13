package storetest

import (
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/go-outbox/outbox"
)

// takeRetry takes one of consumer's requested retries as a consumer process
// does, and returns it with its mark (TakenAt), which its end names.
func takeRetry(t *testing.T, p ParkedTable, consumer string) outbox.ParkedMessage {
	t.Helper()
	m, ok, err := p.TakeRetry(t.Context(), consumer)
	if err != nil || !ok {
		t.Fatalf("take a retry of %s: %v, %v; want one", consumer, ok, err)
	}
	if m.TakenAt.IsZero() {
		t.Fatalf("message %s taken for a retry: no mark (TakenAt)", m.ID)
	}
	return m
}

// A process A took a message and hangs; the operator takes it back
// (ForgetTaken, as `retry --taken` does) and a process B takes it. A's end
// (a hand-back at its stop, an unpark, a park again) must leave B's take
// alone: a hand-back would request it again for a third process, beside B.
func testParkedRetryEndOfAnOldTakerLeavesTheNewOne(t *testing.T, p ParkedTable) {
	m1 := parkedMessage("order-1")
	park(t, p, "billing", m1, 5, "no such customer")
	requestRetry(t, p, "billing", 1, m1.ID)
	a := takeRetry(t, p, "billing")
	if n, err := p.ForgetTaken(t.Context(), "billing", m1.ID); err != nil || n != 1 {
		t.Fatalf("forget that %s was taken: %d, %v; want 1", m1.ID, n, err)
	}
	requestRetry(t, p, "billing", 1, m1.ID)
	// The marks are times: B's must differ from A's.
	for !time.Now().After(a.TakenAt) {
		time.Sleep(time.Millisecond)
	}
	b := takeRetry(t, p, "billing")
	if err := p.ReturnTaken(t.Context(), "billing", m1.ID, a.TakenAt); err != nil {
		t.Fatalf("hand back %s as A: %v", m1.ID, err)
	}
	if ok, err := p.ParkRetried(t.Context(), "billing", m1, a.TakenAt, 1, "A failed again"); err != nil || ok {
		t.Fatalf("park %s again as A, which B took since: %v, %v; want false", m1.ID, ok, err)
	}
	if ok, err := p.UnparkRetried(t.Context(), "billing", m1.ID, a.TakenAt); err != nil || ok {
		t.Fatalf("unpark %s as A, which B took since: %v, %v; want false", m1.ID, ok, err)
	}
	if got := getParked(t, p, "billing", m1.ID); !got.TakenAt.Equal(b.TakenAt) || got.RetryRequested || got.Error != "no such customer" {
		t.Fatalf("message %s after A's end: taken at %s, retry %v, error %q; want still B's take (%s), not requested, its former error",
			m1.ID, got.TakenAt, got.RetryRequested, got.Error, b.TakenAt)
	}
	if _, ok, err := p.TakeRetry(t.Context(), "billing"); err != nil || ok {
		t.Fatalf("take a retry once A handed %s back: %v, %v; want none (B has it)", m1.ID, ok, err)
	}
	if ok, err := p.UnparkRetried(t.Context(), "billing", m1.ID, b.TakenAt); err != nil || !ok {
		t.Fatalf("unpark %s as B: %v, %v; want true", m1.ID, ok, err)
	}
}

// A message taken stays out of the takers' reach, the next waiting one as
// much as a head: only its taker's end, or an operator taking it back, lets
// it be taken again.
func testParkedTakenNextIsTakenOnce(t *testing.T, p ParkedTable) {
	m1, m2 := parkedMessage("order-1"), parkedMessage("order-1")
	park(t, p, "billing", m1, 5, "no such customer")
	parkBehind(t, p, "billing", m2)
	requestRetry(t, p, "billing", 1, m1.ID)
	a := takeRetry(t, p, "billing")
	if ok, err := p.UnparkRetried(t.Context(), "billing", m1.ID, a.TakenAt); err != nil || !ok {
		t.Fatalf("unpark %s: %v, %v; want true", m1.ID, ok, err)
	}
	next, ok, err := p.TakeNext(t.Context(), "billing", "order-1")
	if err != nil || !ok || next.ID != m2.ID || next.TakenAt.IsZero() {
		t.Fatalf("take the next of order-1: %s (taken at %s), %v, %v; want %s, marked", next.ID, next.TakenAt, ok, err, m2.ID)
	}
	if got := takeRetries(t, p, "billing", 10); len(got) != 0 {
		t.Fatalf("retries taken while %s is in its handler: %v; want none", m2.ID, got)
	}
	if _, ok, err := p.TakeNext(t.Context(), "billing", "order-1"); err != nil || ok {
		t.Fatalf("take the next of order-1 again while %s is in its handler: %v, %v; want none", m2.ID, ok, err)
	}
	if err := p.ReturnTaken(t.Context(), "billing", m2.ID, next.TakenAt); err != nil {
		t.Fatalf("hand back %s: %v", m2.ID, err)
	}
	if got := takeRetries(t, p, "billing", 10); !slices.Equal(got, []uuid.UUID{m2.ID}) {
		t.Fatalf("retries taken once %s was handed back: %v; want %s", m2.ID, got, m2.ID)
	}
}
