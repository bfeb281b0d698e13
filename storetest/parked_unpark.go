package storetest

import (
	"slices"
	"testing"

	"github.com/google/uuid"
)

// A consumer process that unparks a key's first message and stops before it
// takes the next (TakeNextWaiting) must not leave the key stalled: the
// unpark itself requests the retry of the next, which any process takes.
func testParkedUnparkPassesTheKeyOn(t *testing.T, p ParkedTable) {
	m1, m2, m3 := parkedMessage("order-1"), parkedMessage("order-1"), parkedMessage("order-1")
	park(t, p, "billing", m1, 5, "no such customer")
	parkBehind(t, p, "billing", m2)
	parkBehind(t, p, "billing", m3)
	requestRetry(t, p, "billing", 1, m1.ID)
	if got := takeRetries(t, p, "billing", 10); !slices.Equal(got, []uuid.UUID{m1.ID}) {
		t.Fatalf("retries taken after the head's retry was requested: %v; want %s", got, m1.ID)
	}
	unpark(t, p, "billing", m1.ID)
	// The process stops here, before TakeNextWaiting.
	if got := takeRetries(t, p, "billing", 10); !slices.Equal(got, []uuid.UUID{m2.ID}) {
		t.Fatalf("retries taken by a fresh process once %s was unparked and its unparker stopped: %v; want %s only", m1.ID, got, m2.ID)
	}
	if got := getParked(t, p, "billing", m3.ID); got.RetryRequested || !got.Waiting {
		t.Fatalf("message %s, second behind the unparked %s: retry %v, waiting %v; want it waiting, not requested", m3.ID, m1.ID, got.RetryRequested, got.Waiting)
	}
	unpark(t, p, "billing", m2.ID)
	if got := takeRetries(t, p, "billing", 10); !slices.Equal(got, []uuid.UUID{m3.ID}) {
		t.Fatalf("retries taken by a fresh process once %s was unparked and its unparker stopped: %v; want %s only", m2.ID, got, m3.ID)
	}
	unpark(t, p, "billing", m3.ID)
	if got := takeRetries(t, p, "billing", 10); len(got) != 0 {
		t.Fatalf("retries taken once the key's last message %s was unparked: %v; want none", m3.ID, got)
	}
	if n, err := p.ParkedCounts(t.Context()); err != nil || len(n) != 0 {
		t.Fatalf("parked counts once every message of the key was applied: %v, %v; want none", n, err)
	}
}

// The retry an unpark requests and TakeNextWaiting hand the next message out
// once between them, whichever comes first.
func testParkedNextWaitingTakenOnce(t *testing.T, p ParkedTable) {
	m1, m2, m3, m4 := parkedMessage("order-1"), parkedMessage("order-1"), parkedMessage("order-1"), parkedMessage("order-1")
	park(t, p, "billing", m1, 5, "no such customer")
	parkBehind(t, p, "billing", m2)
	parkBehind(t, p, "billing", m3)
	parkBehind(t, p, "billing", m4)
	requestRetry(t, p, "billing", 1, m1.ID)
	takeRetries(t, p, "billing", 10)

	// TakeNextWaiting first, as the unparker goes on.
	unpark(t, p, "billing", m1.ID)
	if id, ok := takeNextWaiting(t, p, "billing", "order-1"); !ok || id != m2.ID {
		t.Fatalf("next waiting message of order-1 once %s is unparked: %s, %v; want %s", m1.ID, id, ok, m2.ID)
	}
	if got := takeRetries(t, p, "billing", 10); len(got) != 0 {
		t.Fatalf("retries taken after %s was taken as the next waiting message: %v; want none (it would be applied twice)", m2.ID, got)
	}
	if got := getParked(t, p, "billing", m2.ID); got.RetryRequested {
		t.Fatalf("message %s taken as the next waiting message: retry still requested; want it cleared", m2.ID)
	}

	// TakeRetries first, in another process: the unparker then finds
	// nothing to take.
	unpark(t, p, "billing", m2.ID)
	if got := takeRetries(t, p, "billing", 10); !slices.Equal(got, []uuid.UUID{m3.ID}) {
		t.Fatalf("retries taken once %s is unparked: %v; want %s", m2.ID, got, m3.ID)
	}
	if id, ok := takeNextWaiting(t, p, "billing", "order-1"); ok {
		t.Fatalf("next waiting message of order-1 after %s was taken as a retry: %s; want none (it would be applied twice)", m3.ID, id)
	}

	// Back to the unparker's path for the last one.
	unpark(t, p, "billing", m3.ID)
	if id, ok := takeNextWaiting(t, p, "billing", "order-1"); !ok || id != m4.ID {
		t.Fatalf("next waiting message of order-1 once %s is unparked: %s, %v; want %s", m3.ID, id, ok, m4.ID)
	}
	if got := takeRetries(t, p, "billing", 10); len(got) != 0 {
		t.Fatalf("retries taken after %s was taken as the next waiting message: %v; want none", m4.ID, got)
	}
}

// Only the unpark of a key's first message passes the key on: a later
// message unparked (a head parked by a consumer that skips parked messages)
// must not request again the first, which may be in a handler already.
func testParkedUnparkOfALaterMessageKeepsTheFirst(t *testing.T, p ParkedTable) {
	m1, m2, later := parkedMessage("order-1"), parkedMessage("order-1"), parkedMessage("order-1")
	park(t, p, "billing", m1, 5, "no such customer")
	parkBehind(t, p, "billing", m2)
	park(t, p, "billing", later, 5, "no such customer")
	requestRetry(t, p, "billing", 1, m1.ID)
	takeRetries(t, p, "billing", 10)
	unpark(t, p, "billing", m1.ID)
	if id, ok := takeNextWaiting(t, p, "billing", "order-1"); !ok || id != m2.ID {
		t.Fatalf("next waiting message of order-1 once %s is unparked: %s, %v; want %s", m1.ID, id, ok, m2.ID)
	}
	// m2 is in its handler; the operator retries the later head.
	requestRetry(t, p, "billing", 1, later.ID)
	if got := takeRetries(t, p, "billing", 10); !slices.Equal(got, []uuid.UUID{later.ID}) {
		t.Fatalf("retries taken after %s was requested: %v; want it only", later.ID, got)
	}
	unpark(t, p, "billing", later.ID)
	if got := takeRetries(t, p, "billing", 10); len(got) != 0 {
		t.Fatalf("retries taken after %s, behind the key's first %s, was unparked: %v; want none (%s is being applied)", later.ID, m2.ID, got, m2.ID)
	}
}

// Discarding a message that waits behind its key's first (an operator's
// choice) does not pass the key on: the first may be in a handler already.
func testParkedDiscardOfALaterMessageKeepsTheFirst(t *testing.T, p ParkedTable) {
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
	// m2 is in its handler; the operator discards m3.
	if n, err := p.DiscardParked(t.Context(), "billing", m3.ID); err != nil || n != 1 {
		t.Fatalf("discard %s, waiting behind %s: %d, %v; want 1", m3.ID, m2.ID, n, err)
	}
	if got := takeRetries(t, p, "billing", 10); len(got) != 0 {
		t.Fatalf("retries taken after %s, behind the key's first %s, was discarded: %v; want none (%s is being applied)", m3.ID, m2.ID, got, m2.ID)
	}
}
