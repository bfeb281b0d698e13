package storetest

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/outboxdriver"
)

// keyOrderCases need Harness.KeyOrdered.
var keyOrderCases = []testCase{
	{"in key order a claim takes each key's consecutive due messages as one run, in insert order, up to the limit", testKeyOrderRuns},
	{"in key order a run ends at a message scheduled later, and the claim limit cuts every run to a prefix", testKeyOrderRunEnds},
	{"in key order a failure mid-run releases the rest of the run without an attempt, and the run comes back whole", testKeyOrderFailureMidRun},
	{"in key order released, published or kept, the head lets the next go", testKeyOrderHeads},
	{"in key order a dead message holds the rest of its key, counted as behind dead, until it is retried or discarded", testKeyOrderDeadHoldsItsKey},
	{"in key order a store told to skip dead messages lets the key go on past one", testKeyOrderSkippingDead},
	{"in key order a message without a key and one of a new key written after 10,000 backlogged keys come in the next claim", testKeyOrderNoStarvation},
	{"in key order a claim fills its batch from a few keys with runs of unequal lengths, each run a prefix of its key", testKeyOrderFewLongRunsFillTheBatch},
	{"in key order a retrying head holds back its key only, and next due waits for it", testKeyOrderRetryHoldsBackItsKey},
	{"in key order a head scheduled later holds back its key", testKeyOrderScheduledHeadHoldsBackItsKey},
	{"in key order a retried head takes the messages held behind it back in the queue", testKeyOrderRetryPostponesHeld},
	{"in key order a late retry under a token that holds nothing moves none of the key's messages", testKeyOrderLateRetryMovesNothing},
	{"in key order a retried head takes the rest of its run, released in the same settlement, back in the queue with it", testKeyOrderRetryPostponesTheRunReleasedWithIt},
	{"in key order a message without a key passes a failing key with many messages held", testKeyOrderKeylessMessagePassesAFailingKey},
	{"in key order concurrent claimers never hold two runs of one key and publish every key's messages in id order", testKeyOrderConcurrentClaimers},
	{"in key order an expired lease does not let a message pass its key's head", testKeyOrderExpiredLeaseStaysBehindTheHead},
}

// keyed returns messages with the given keys, ids ascending in slice order.
func keyed(keys ...string) []*outbox.Message {
	msgs := newMessages("orders.keyed", len(keys))
	for i, k := range keys {
		msgs[i].Key = k
	}
	return msgs
}

// orderedClaim claims up to 100 messages through the key-ordered store and
// fails unless exactly want come back, each key's in the order of want.
func (s *suite) orderedClaim(t *testing.T, want ...*outbox.Message) uuid.UUID {
	t.Helper()
	return s.orderedClaimN(t, 100, want...)
}

// orderedClaimN is orderedClaim with a claim limit.
func (s *suite) orderedClaimN(t *testing.T, limit int, want ...*outbox.Message) uuid.UUID {
	t.Helper()
	token := uuid.New()
	got, err := s.h.KeyOrdered.SettleAndClaim(t.Context(), outboxdriver.Settlement{}, outboxdriver.Claim{Limit: limit, Lease: longLease, Token: token})
	if err != nil {
		t.Fatalf("claim in key order: %v", err)
	}
	if !sameRuns(got, want) {
		t.Fatalf("claim in key order returned %v; want %v (any order across keys, this order within each)", ids(got), ids(want))
	}
	return token
}

// sameRuns reports whether got and want hold the same messages, and each
// key's messages in the same order.
func sameRuns(got []outbox.Message, want []*outbox.Message) bool {
	if !slices.Equal(sortedIDs(ids(got)), sortedIDs(ids(want))) {
		return false
	}
	byKey := func(key string, msgs []uuid.UUID, keys []string) []uuid.UUID {
		var out []uuid.UUID
		for i, id := range msgs {
			if keys[i] == key {
				out = append(out, id)
			}
		}
		return out
	}
	gotKeys, wantKeys := make([]string, len(got)), make([]string, len(want))
	for i := range got {
		gotKeys[i] = got[i].Key
	}
	for i := range want {
		wantKeys[i] = want[i].Key
	}
	for i := range want {
		if k := want[i].Key; k != "" && !slices.Equal(byKey(k, ids(got), gotKeys), byKey(k, ids(want), wantKeys)) {
			return false
		}
	}
	return true
}

// settleOrdered records settle through the key-ordered store.
func (s *suite) settleOrdered(t *testing.T, settle outboxdriver.Settlement) {
	t.Helper()
	if _, err := s.h.KeyOrdered.SettleAndClaim(t.Context(), settle, outboxdriver.Claim{}); err != nil {
		t.Fatalf("settle in key order: %v", err)
	}
}

func testKeyOrderRuns(t *testing.T, s *suite) {
	m := keyed("a", "a", "b", "", "a", "b", "", "a")
	a1, a2, b1, free1, a3, b2, free2, a4 := m[0], m[1], m[2], m[3], m[4], m[5], m[6], m[7]
	s.write(t, m...)
	s.orderedClaim(t, a1, a2, a3, a4, b1, b2, free1, free2)
	// Every run is leased: nothing of a or b is due, and new messages of
	// them wait behind the runs in flight.
	a5 := keyed("a")[0]
	s.write(t, a5)
	s.orderedClaim(t)
}

func testKeyOrderRunEnds(t *testing.T, s *suite) {
	m := keyed("a", "a")
	a1, a2 := m[0], m[1]
	s.write(t, m...)
	a3 := newScheduled(s.now(t).Add(time.Hour))
	a3.Key = "a"
	s.write(t, a3)
	rest := keyed("a", "b", "b", "b", "b")
	a4, b1, b2, b3, b4 := rest[0], rest[1], rest[2], rest[3], rest[4]
	s.write(t, rest...)
	// a's run ends before a3, scheduled later; a4 waits behind it. With
	// room for 5, the heads come first, then the runs take turns.
	token := s.orderedClaimN(t, 5, a1, a2, b1, b2, b3)
	s.settleOrdered(t, outboxdriver.Settlement{Token: token, Published: []uuid.UUID{a1.ID, a2.ID, b1.ID, b2.ID, b3.ID}})
	// a4 waits behind a3, scheduled an hour later.
	s.orderedClaim(t, b4)
	if got := s.get(t, a4.ID); got.Attempts != 0 || got.Status != outbox.StatusPending {
		t.Fatalf("a4 behind the scheduled a3: %+v; want pending, untouched", got)
	}
}

// testKeyOrderFailureMidRun fails the second message of a run: the relay
// retries it and releases the rest, which count no attempt, keep no error
// and come back with it, in order, when it is due again.
func testKeyOrderFailureMidRun(t *testing.T, s *suite) {
	m := keyed("a", "a", "a", "a", "b")
	a1, a2, a3, a4, b1 := m[0], m[1], m[2], m[3], m[4]
	s.write(t, m...)
	token := s.orderedClaim(t, a1, a2, a3, a4, b1)
	const delay = 300 * time.Millisecond
	s.settleOrdered(t, outboxdriver.Settlement{
		Token:     token,
		Published: []uuid.UUID{a1.ID, b1.ID},
		Retry:     []outboxdriver.Retry{{ID: a2.ID, Delay: delay, Error: "broker busy"}},
		Release:   []uuid.UUID{a3.ID, a4.ID},
	})
	for _, id := range []uuid.UUID{a3.ID, a4.ID} {
		got := s.get(t, id)
		if got.Attempts != 0 || got.LastError != "" || got.Status != outbox.StatusPending {
			t.Fatalf("message %s released behind the failed a2: attempts %d, last error %q, status %s; want pending with no attempt and no error", id, got.Attempts, got.LastError, got.Status)
		}
	}
	if got := s.get(t, a2.ID); got.Attempts != 1 {
		t.Fatalf("a2 after its failure: attempts %d; want 1", got.Attempts)
	}
	if st := s.stats(t); st.InFlight != 0 {
		t.Fatalf("stats after the settlement: %+v; want nothing in flight", st)
	}
	// a3 and a4 are free but wait behind a2.
	s.orderedClaim(t)
	deadline := time.Now().Add(waitTimeout)
	for {
		token := uuid.New()
		got, err := s.h.KeyOrdered.SettleAndClaim(t.Context(), outboxdriver.Settlement{}, outboxdriver.Claim{Limit: 100, Lease: longLease, Token: token})
		if err != nil {
			t.Fatalf("claim in key order: %v", err)
		}
		if len(got) > 0 {
			if !slices.Equal(ids(got), []uuid.UUID{a2.ID, a3.ID, a4.ID}) {
				t.Fatalf("claim in key order after a2's retry delay returned %v; want the run a2, a3, a4 %v", ids(got), []uuid.UUID{a2.ID, a3.ID, a4.ID})
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("a2 was not claimable again within %v of its retry delay", waitTimeout)
		}
		time.Sleep(pollInterval)
	}
}

// testKeyOrderNoStarvation backlogs 10,000 keys, more than a claim walks
// (outboxdriver.KeyWalkLimit), with two messages each, then writes a
// message without a key and one of a key that sorts after all of them. The
// bound: both come in the very next claim, since a claim also looks at the
// newest due messages (outboxdriver.KeyWindow of them), as long as fewer
// than that many were written after them.
func testKeyOrderNoStarvation(t *testing.T, s *suite) {
	const keys = 10_000
	backlog := make([]string, 0, 2*keys)
	for k := range keys {
		backlog = append(backlog, fmt.Sprintf("key-%05d", k), fmt.Sprintf("key-%05d", k))
	}
	s.write(t, keyed(backlog...)...)
	late := keyed("", "zzz-new-key")
	s.write(t, late...)
	token := uuid.New()
	got, err := s.h.KeyOrdered.SettleAndClaim(t.Context(), outboxdriver.Settlement{}, outboxdriver.Claim{Limit: 100, Lease: longLease, Token: token})
	if err != nil {
		t.Fatalf("claim in key order: %v", err)
	}
	for _, m := range late {
		if !slices.Contains(ids(got), m.ID) {
			t.Fatalf("the first claim of 100 after a backlog of %d keys returned %d messages without message %s (key %q), written after the backlog; want it in the first claim", keys, len(got), m.ID, m.Key)
		}
	}
}

// testKeyOrderFewLongRunsFillTheBatch writes three keys of 60, 10 and 60
// messages: a claim of 100 must come back full (what the short run leaves
// of its share goes to the long ones), with every key's messages the first
// of that key, in order.
func testKeyOrderFewLongRunsFillTheBatch(t *testing.T, s *suite) {
	const limit = 100
	perKey := []int{60, 10, 60}
	var names []string
	for i := 0; len(names) < 130; i++ {
		if k := i % len(perKey); i/len(perKey) < perKey[k] {
			names = append(names, fmt.Sprintf("k%d", k))
		}
	}
	msgs := keyed(names...)
	s.write(t, msgs...)
	got, err := s.h.KeyOrdered.SettleAndClaim(t.Context(), outboxdriver.Settlement{}, outboxdriver.Claim{Limit: limit, Lease: longLease, Token: uuid.New()})
	if err != nil {
		t.Fatalf("claim in key order: %v", err)
	}
	if len(got) != limit {
		t.Fatalf("a claim of %d from keys of %v messages returned %d; want a full batch", limit, perKey, len(got))
	}
	for k := range perKey {
		key := fmt.Sprintf("k%d", k)
		var want, claimed []uuid.UUID
		for _, m := range got {
			if m.Key == key {
				claimed = append(claimed, m.ID)
			}
		}
		for _, m := range msgs {
			if m.Key == key && len(want) < len(claimed) {
				want = append(want, m.ID)
			}
		}
		if len(claimed) == 0 || !slices.Equal(claimed, want) {
			t.Fatalf("key %s: claimed %v; want its first %d messages in write order %v (and at least one)", key, claimed, len(claimed), want)
		}
	}
}

func testKeyOrderHeads(t *testing.T, s *suite) {
	m := keyed("a", "a", "a", "a", "b")
	a1, a2, a3, a4, b1 := m[0], m[1], m[2], m[3], m[4]
	s.write(t, m...)

	token := s.orderedClaimN(t, 2, a1, b1)
	// a1 is leased, not settled: a2 stays behind it.
	s.orderedClaim(t)
	// A released head is the head again.
	var a1Token uuid.UUID
	if s.held() {
		// Released within the claim's transaction: back when it commits.
		s.exchange(t, outboxdriver.Settlement{Token: token, Published: []uuid.UUID{b1.ID}, Release: []uuid.UUID{a1.ID}}, outboxdriver.Claim{})
		a1Token = s.orderedClaimN(t, 1, a1)
	} else {
		if err := s.h.KeyOrdered.Release(t.Context(), token, []uuid.UUID{a1.ID}); err != nil {
			t.Fatalf("release a1: %v", err)
		}
		a1Token = s.orderedClaimN(t, 1, a1)
		s.exchange(t, outboxdriver.Settlement{Token: token, Published: []uuid.UUID{b1.ID}}, outboxdriver.Claim{})
	}
	// A published message kept for retention no longer holds its key back.
	s.exchange(t, outboxdriver.Settlement{Token: a1Token, Published: []uuid.UUID{a1.ID}, KeepPublished: true}, outboxdriver.Claim{})
	token = s.orderedClaimN(t, 1, a2)
	s.exchange(t, outboxdriver.Settlement{Token: token, Published: []uuid.UUID{a2.ID}}, outboxdriver.Claim{})
	s.orderedClaim(t, a3, a4)
}

// A dead message holds the rest of its key until it is retried or
// discarded (the safe default: a later message of the key applied before it
// would undo what it says, an OrderCancelled before its OrderPaid), and the
// messages waiting behind it show in Stats. Retried, it goes first and the
// key goes on in order; discarded, the key goes on without it.
func testKeyOrderDeadHoldsItsKey(t *testing.T, s *suite) {
	m := keyed("a", "a", "a", "b", "c", "c")
	a1, a2, a3, b1, c1, c2 := m[0], m[1], m[2], m[3], m[4], m[5]
	s.write(t, m...)

	token := s.orderedClaimN(t, 100, a1, a2, a3, b1, c1, c2)
	s.exchange(t, outboxdriver.Settlement{Token: token, Published: []uuid.UUID{b1.ID},
		Dead:    []outboxdriver.Failure{{ID: a1.ID, Error: "rejected"}, {ID: c1.ID, Error: "rejected"}},
		Release: []uuid.UUID{a2.ID, a3.ID, c2.ID}}, outboxdriver.Claim{})
	// Behind a1 and c1, dead: nothing of a or c is due.
	s.orderedClaim(t)
	if st := s.stats(t); st.BehindDead != 3 {
		t.Fatalf("stats with a2, a3 behind dead a1 and c2 behind dead c1: %d behind dead; want 3 (%+v)", st.BehindDead, st)
	}
	if wait, ok, err := s.h.KeyOrdered.NextDue(t.Context()); err != nil || (ok && wait <= 0) {
		t.Fatalf("next due in key order with every pending message behind a dead one: %v, %v, %v; want nothing due", wait, ok, err)
	}
	// Retried, a1 goes first, then its key in order.
	if n, err := s.h.Admin.RetryDead(t.Context(), a1.ID); err != nil || n != 1 {
		t.Fatalf("retry dead a1: %d, %v; want 1", n, err)
	}
	token = s.orderedClaim(t, a1, a2, a3)
	s.exchange(t, outboxdriver.Settlement{Token: token, Published: []uuid.UUID{a1.ID, a2.ID, a3.ID}}, outboxdriver.Claim{})
	// Discarded, c1 lets c2 go.
	if n, err := s.h.Admin.DiscardDead(t.Context(), c1.ID); err != nil || n != 1 {
		t.Fatalf("discard dead c1: %d, %v; want 1", n, err)
	}
	if st := s.stats(t); st.BehindDead != 0 {
		t.Fatalf("stats after a1 retried and c1 discarded: %d behind dead; want 0", st.BehindDead)
	}
	s.orderedClaim(t, c2)
}

// With the store's option to skip dead messages (Harness.KeyOrderedSkippingDead),
// a dead message no longer holds its key back: the key goes on, and nothing
// counts as behind it.
func testKeyOrderSkippingDead(t *testing.T, s *suite) {
	if s.h.KeyOrderedSkippingDead == nil {
		t.Skip("the harness sets no KeyOrderedSkippingDead store: the store has no option to skip dead messages in key order")
	}
	m := keyed("a", "a")
	a1, a2 := m[0], m[1]
	s.write(t, m...)
	claim := func(want ...*outbox.Message) uuid.UUID {
		t.Helper()
		token := uuid.New()
		got, err := s.h.KeyOrderedSkippingDead.SettleAndClaim(t.Context(), outboxdriver.Settlement{}, outboxdriver.Claim{Limit: 1, Lease: longLease, Token: token})
		if err != nil || !sameRuns(got, want) {
			t.Fatalf("claim in key order skipping dead messages: %v, %v; want %v", ids(got), err, ids(want))
		}
		return token
	}
	token := claim(a1)
	if _, err := s.h.KeyOrderedSkippingDead.SettleAndClaim(t.Context(), outboxdriver.Settlement{Token: token, Dead: []outboxdriver.Failure{{ID: a1.ID, Error: "rejected"}}}, outboxdriver.Claim{}); err != nil {
		t.Fatalf("dead-letter a1: %v", err)
	}
	claim(a2)
}

// An expired lease makes a message claimable again in its old place, but in
// key order only within its key's run. Here a store that does not order by
// key leased a key's two messages at once.
func testKeyOrderExpiredLeaseStaysBehindTheHead(t *testing.T, s *suite) {
	m := keyed("a", "a")
	a1, a2 := m[0], m[1]
	s.write(t, m...)
	s.claimIDs(t, 10, 200*time.Millisecond, a1.ID, a2.ID)
	s.waitNoneInFlight(t)
	// Both leases ran out: the key's run, in order.
	token := s.orderedClaim(t, a1, a2)
	// Released alone, a2 is due, but a1 is still leased.
	if s.held() {
		// A settlement puts back what it does not list: release a2 alone.
		if err := s.h.KeyOrdered.Release(t.Context(), token, []uuid.UUID{a2.ID}); err != nil {
			t.Fatalf("release a2: %v", err)
		}
	} else {
		s.settleOrdered(t, outboxdriver.Settlement{Token: token, Release: []uuid.UUID{a2.ID}})
	}
	s.orderedClaim(t)
	if wait, ok, err := s.h.KeyOrdered.NextDue(t.Context()); !s.held() && (err != nil || !ok || wait <= 0) {
		t.Fatalf("next due in key order with a2 held behind leased a1: %v, %v, %v; want a1's lease end, not now", wait, ok, err)
	}
	s.exchange(t, outboxdriver.Settlement{Token: token, Published: []uuid.UUID{a1.ID}}, outboxdriver.Claim{})
	s.orderedClaim(t, a2)
}

func testKeyOrderRetryPostponesHeld(t *testing.T, s *suite) {
	m := keyed("a", "a", "a", "b")
	a1, a2, a3, b1 := m[0], m[1], m[2], m[3]
	s.write(t, m...)
	token := s.orderedClaimN(t, 2, a1, b1)
	s.settleOrdered(t, outboxdriver.Settlement{Token: token, Retry: []outboxdriver.Retry{{ID: a1.ID, Delay: time.Hour, Error: "broker busy"}}})
	head := s.get(t, a1.ID).AvailableAt
	for _, id := range []uuid.UUID{a2.ID, a3.ID} {
		if got := s.get(t, id).AvailableAt; got.Before(head) {
			t.Fatalf("message %s held behind a1: due at %v, before a1's retry at %v; want moved back with it", id, got, head)
		}
	}
	// b1 is leased, not behind a1: untouched.
	if got := s.get(t, b1.ID).AvailableAt; !got.Before(head.Add(-30 * time.Minute)) {
		t.Fatalf("message %s of another key: due at %v; want its own time, not a1's retry at %v", b1.ID, got, head)
	}
}

// testKeyOrderLateRetryMovesNothing: a settlement under a token that holds
// nothing (a relay late past its lease, or a claim whose transaction was
// rolled back) changes nothing. Its retry of a head must not take the
// head's key back in the queue either: here a2, due long before a1 (an
// operator rescheduled it), would move to a1's due time. (Found by the
// model test: both stores moved a key's messages for every retried id,
// whatever the token.)
func testKeyOrderLateRetryMovesNothing(t *testing.T, s *suite) {
	m := keyed("a", "a")
	a1, a2 := m[0], m[1]
	a2.AvailableAt = s.now(t).Add(-time.Hour)
	s.write(t, m...)
	s.orderedClaimN(t, 1, a1)
	before := s.get(t, a2.ID).AvailableAt
	s.settleOrdered(t, outboxdriver.Settlement{Token: uuid.New(), Retry: []outboxdriver.Retry{{ID: a1.ID, Delay: time.Hour, Error: "late"}}})
	if got := s.get(t, a2.ID).AvailableAt; !got.Equal(before) {
		t.Fatalf("a retry of a1 under a token that holds nothing moved a2 from %v to %v; want a2 untouched", before, got)
	}
}

// testKeyOrderRetryPostponesTheRunReleasedWithIt fails a run's head as the
// relay does, retrying it and releasing the rest of the run in one
// settlement: the released messages are held behind the retried head and
// must move back in the queue with it, so the release has to end their
// leases before the head's held messages are moved (settlement order,
// docs/design/key-order-claim.md §7).
func testKeyOrderRetryPostponesTheRunReleasedWithIt(t *testing.T, s *suite) {
	m := keyed("a", "a", "a", "b")
	a1, a2, a3, b1 := m[0], m[1], m[2], m[3]
	s.write(t, m...)
	token := s.orderedClaim(t, a1, a2, a3, b1)
	s.settleOrdered(t, outboxdriver.Settlement{Token: token, Published: []uuid.UUID{b1.ID},
		Retry:   []outboxdriver.Retry{{ID: a1.ID, Delay: time.Hour, Error: "broker busy"}},
		Release: []uuid.UUID{a2.ID, a3.ID}})
	head := s.get(t, a1.ID).AvailableAt
	for _, id := range []uuid.UUID{a2.ID, a3.ID} {
		if got := s.get(t, id); got.AvailableAt.Before(head) || got.Attempts != 0 {
			t.Fatalf("message %s released behind the retried a1: due at %v, attempts %d; want moved back with a1 to its retry at %v, no attempt counted", id, got.AvailableAt, got.Attempts, head)
		}
	}
}

// testKeyOrderKeylessMessagePassesAFailingKey puts a message without a key
// behind more messages of one key than a claim looks at among the first due
// rows, and then more new messages of that key: once the key's head is
// retried, the claim must reach the message.
func testKeyOrderKeylessMessagePassesAFailingKey(t *testing.T, s *suite) {
	const held = 150
	keys := make([]string, held+1)
	for i := range keys {
		keys[i] = "a"
	}
	m := keyed(keys...)
	s.write(t, m...)
	free := keyed("")[0]
	s.write(t, free)
	s.write(t, keyed(keys...)...)
	token := s.orderedClaimN(t, 1, m[0])
	s.settleOrdered(t, outboxdriver.Settlement{Token: token, Retry: []outboxdriver.Retry{{ID: m[0].ID, Delay: time.Hour, Error: "broker busy"}}})
	s.orderedClaim(t, free)
}

func testKeyOrderScheduledHeadHoldsBackItsKey(t *testing.T, s *suite) {
	head := newScheduled(s.now(t).Add(time.Hour))
	head.Key = "c"
	next := keyed("c")[0]
	other := keyed("d")[0]
	s.write(t, head)
	s.write(t, next, other)
	// next is due, but the message before it is scheduled an hour later.
	s.orderedClaim(t, other)
}

func testKeyOrderRetryHoldsBackItsKey(t *testing.T, s *suite) {
	m := keyed("a", "a", "b")
	a1, a2, b1 := m[0], m[1], m[2]
	s.write(t, m...)
	token := s.orderedClaim(t, a1, a2, b1)

	// Long enough that NextDue below runs well within it on a slow machine.
	const delay = 2 * time.Second
	settle := outboxdriver.Settlement{Token: token, Published: []uuid.UUID{b1.ID}, Retry: []outboxdriver.Retry{{ID: a1.ID, Delay: delay, Error: "broker busy"}}, Release: []uuid.UUID{a2.ID}}
	s.exchange(t, settle, outboxdriver.Claim{})
	b2 := keyed("b")[0]
	s.write(t, b2)
	// a2 is due but a1 waits for its retry: only b moves on.
	bToken := s.orderedClaim(t, b2)
	if s.held() {
		// A held message looks due to NextDue: settle it first.
		s.settleOrdered(t, outboxdriver.Settlement{Token: bToken, Published: []uuid.UUID{b2.ID}})
	}
	wait, ok, err := s.h.KeyOrdered.NextDue(t.Context())
	if err != nil || !ok || wait <= 0 || wait > delay {
		t.Fatalf("next due in key order while a1 retries in %v and a2 waits behind it: %v, %v, %v; want a wait of at most %v, not due now", delay, wait, ok, err, delay)
	}

	deadline := time.Now().Add(waitTimeout)
	for {
		token := uuid.New()
		got, err := s.h.KeyOrdered.SettleAndClaim(t.Context(), outboxdriver.Settlement{}, outboxdriver.Claim{Limit: 100, Lease: longLease, Token: token})
		if err != nil {
			t.Fatalf("claim in key order: %v", err)
		}
		if len(got) > 0 {
			if !slices.Equal(ids(got), []uuid.UUID{a1.ID, a2.ID}) {
				t.Fatalf("claim in key order after a1's retry delay returned %v; want the run a1 %s, a2 %s", ids(got), a1.ID, a2.ID)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a1 was not claimable again within %v of its retry delay", waitTimeout)
		}
		time.Sleep(pollInterval)
	}
}

// testKeyOrderConcurrentClaimers runs claimers that record each message as
// published between its claim and its settlement, retrying some once and
// releasing the rest of their run, as the relay does, and checks that no
// two claimers held messages of one key at once, that each claim's run of a
// key came in id order, and that every key's messages were published in id
// order.
func testKeyOrderConcurrentClaimers(t *testing.T, s *suite) {
	const (
		keys      = 6
		perKey    = 40
		claimers  = 4
		batch     = 8
		retryEach = 7 // every 7th message fails its first attempt
	)
	var all []*outbox.Message
	for range perKey {
		round := make([]string, keys)
		for k := range round {
			round[k] = fmt.Sprintf("key-%d", k)
		}
		all = append(all, keyed(round...)...)
	}
	s.write(t, all...)
	retryOnce := map[uuid.UUID]bool{}
	for i, m := range all {
		if i%retryEach == 0 {
			retryOnce[m.ID] = true
		}
	}

	var (
		mu        sync.Mutex
		published = map[string][]uuid.UUID{}
		inFlight  = map[string]int{} // key -> the claimer that holds it
		count     int
	)
	done := func() bool {
		mu.Lock()
		defer mu.Unlock()
		return count == len(all)
	}
	runClaimers(t, s.h.KeyOrdered, claimers, batch, done, func(c int, token uuid.UUID, got []outbox.Message) (outboxdriver.Settlement, string) {
		mu.Lock()
		for _, m := range got {
			if other, busy := inFlight[m.Key]; busy && other != c {
				mu.Unlock()
				return outboxdriver.Settlement{}, fmt.Sprintf("claimer %d got message %s of key %s while claimer %d held a run of the key", c, m.ID, m.Key, other)
			}
			inFlight[m.Key] = c
		}
		settle := outboxdriver.Settlement{Token: token}
		failed := map[string]bool{}
		for _, m := range got {
			switch {
			case failed[m.Key]:
				settle.Release = append(settle.Release, m.ID)
			case retryOnce[m.ID]:
				delete(retryOnce, m.ID)
				failed[m.Key] = true
				settle.Retry = append(settle.Retry, outboxdriver.Retry{ID: m.ID, Error: "first attempt fails"})
			default:
				published[m.Key] = append(published[m.Key], m.ID)
				settle.Published = append(settle.Published, m.ID)
				count++
			}
		}
		mu.Unlock()
		// "Publishing" takes a moment, in which other claimers claim.
		time.Sleep(time.Millisecond)
		// The keys are free once the settlement is recorded, by the next
		// exchange. Clearing them just before it is safe: until then
		// their messages stay pending, so no claim can return them.
		mu.Lock()
		for _, m := range got {
			delete(inFlight, m.Key)
		}
		mu.Unlock()
		return settle, ""
	})
	byKey := map[string][]uuid.UUID{}
	for _, m := range all {
		byKey[m.Key] = append(byKey[m.Key], m.ID)
	}
	for k, want := range byKey {
		if got := published[k]; !slices.Equal(got, want) {
			t.Errorf("key %s: published in the order %v; want id order %v", k, got, want)
		}
	}
}
