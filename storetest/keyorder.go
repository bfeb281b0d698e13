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
	{"in key order a claim takes only the head of each key; released, published, kept or dead, the head lets the next go", testKeyOrderHeads},
	{"in key order a retrying head holds back its key only, and next due waits for it", testKeyOrderRetryHoldsBackItsKey},
	{"in key order a head scheduled later holds back its key", testKeyOrderScheduledHeadHoldsBackItsKey},
	{"in key order a retried head takes the messages held behind it back in the queue", testKeyOrderRetryPostponesHeld},
	{"in key order a message without a key passes a failing key with many messages held", testKeyOrderKeylessMessagePassesAFailingKey},
	{"in key order concurrent claimers publish every key's messages in id order", testKeyOrderConcurrentClaimers},
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

// orderedClaim claims through the key-ordered store and fails unless exactly
// want come back, in that order.
func (s *suite) orderedClaim(t *testing.T, want ...uuid.UUID) uuid.UUID {
	t.Helper()
	token := uuid.New()
	got, err := s.h.KeyOrdered.SettleAndClaim(t.Context(), outboxdriver.Settlement{}, outboxdriver.Claim{Limit: 100, Lease: longLease, Token: token})
	if err != nil {
		t.Fatalf("claim in key order: %v", err)
	}
	if !slices.Equal(ids(got), want) {
		t.Fatalf("claim in key order returned %v; want %v", ids(got), want)
	}
	return token
}

func testKeyOrderHeads(t *testing.T, s *suite) {
	m := keyed("a", "a", "b", "", "", "a", "a")
	a1, a2, b1, free1, free2, a3, a4 := m[0], m[1], m[2], m[3], m[4], m[5], m[6]
	s.write(t, m...)

	token := s.orderedClaim(t, a1.ID, b1.ID, free1.ID, free2.ID)
	// a1 is leased, not settled: a2 stays behind it.
	s.orderedClaim(t)
	// A released head is the head again.
	if err := s.h.KeyOrdered.Release(t.Context(), token, []uuid.UUID{a1.ID}); err != nil {
		t.Fatalf("release a1: %v", err)
	}
	a1Token := s.orderedClaim(t, a1.ID)
	s.exchange(t, outboxdriver.Settlement{Token: token, Published: []uuid.UUID{b1.ID, free1.ID, free2.ID}}, outboxdriver.Claim{})
	// A published message kept for retention no longer holds its key back.
	s.exchange(t, outboxdriver.Settlement{Token: a1Token, Published: []uuid.UUID{a1.ID}, KeepPublished: true}, outboxdriver.Claim{})
	token = s.orderedClaim(t, a2.ID)
	// Nor does a dead one.
	s.exchange(t, outboxdriver.Settlement{Token: token, Dead: []outboxdriver.Failure{{ID: a2.ID, Error: "rejected"}}}, outboxdriver.Claim{})
	token = s.orderedClaim(t, a3.ID)
	s.exchange(t, outboxdriver.Settlement{Token: token, Published: []uuid.UUID{a3.ID}}, outboxdriver.Claim{})
	s.orderedClaim(t, a4.ID)
}

// An expired lease makes a message claimable again in its old place, but in
// key order only as the head of its key. Here a store that does not order by
// key leased a key's two messages at once.
func testKeyOrderExpiredLeaseStaysBehindTheHead(t *testing.T, s *suite) {
	m := keyed("a", "a")
	a1, a2 := m[0], m[1]
	s.write(t, m...)
	s.claimIDs(t, 10, 200*time.Millisecond, a1.ID, a2.ID)
	s.waitNoneInFlight(t)

	token := s.orderedClaim(t, a1.ID)
	s.orderedClaim(t) // a2's lease ran out, but a1 is leased again
	if wait, ok, err := s.h.KeyOrdered.NextDue(t.Context()); err != nil || !ok || wait <= 0 {
		t.Fatalf("next due in key order with a2 held behind leased a1: %v, %v, %v; want a1's lease end, not now", wait, ok, err)
	}
	s.exchange(t, outboxdriver.Settlement{Token: token, Published: []uuid.UUID{a1.ID}}, outboxdriver.Claim{})
	s.orderedClaim(t, a2.ID)
}

func testKeyOrderRetryPostponesHeld(t *testing.T, s *suite) {
	m := keyed("a", "a", "a", "b")
	a1, a2, a3, b1 := m[0], m[1], m[2], m[3]
	s.write(t, m...)
	token := s.orderedClaim(t, a1.ID, b1.ID)
	settle := outboxdriver.Settlement{Token: token, Retry: []outboxdriver.Retry{{ID: a1.ID, Delay: time.Hour, Error: "broker busy"}}}
	if _, err := s.h.KeyOrdered.SettleAndClaim(t.Context(), settle, outboxdriver.Claim{}); err != nil {
		t.Fatalf("retry a1 in key order: %v", err)
	}
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

// testKeyOrderKeylessMessagePassesAFailingKey puts a message without a key
// behind more messages of one key than a claim looks at among the first due
// rows: once the key's head is retried, the claim must reach it.
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
	token := s.orderedClaim(t, m[0].ID)
	settle := outboxdriver.Settlement{Token: token, Retry: []outboxdriver.Retry{{ID: m[0].ID, Delay: time.Hour, Error: "broker busy"}}}
	if _, err := s.h.KeyOrdered.SettleAndClaim(t.Context(), settle, outboxdriver.Claim{}); err != nil {
		t.Fatalf("retry the head of key a in key order: %v", err)
	}
	s.orderedClaim(t, free.ID)
}

func testKeyOrderScheduledHeadHoldsBackItsKey(t *testing.T, s *suite) {
	head := newScheduled(s.now(t).Add(time.Hour))
	head.Key = "c"
	next := keyed("c")[0]
	other := keyed("d")[0]
	s.write(t, head)
	s.write(t, next, other)
	// next is due, but the message before it is scheduled an hour later.
	s.orderedClaim(t, other.ID)
}

func testKeyOrderRetryHoldsBackItsKey(t *testing.T, s *suite) {
	m := keyed("a", "a", "b")
	a1, b1 := m[0], m[2]
	s.write(t, m...)
	token := s.orderedClaim(t, a1.ID, b1.ID)

	// Long enough that NextDue below runs well within it on a slow machine.
	const delay = 2 * time.Second
	settle := outboxdriver.Settlement{Token: token, Published: []uuid.UUID{b1.ID}, Retry: []outboxdriver.Retry{{ID: a1.ID, Delay: delay, Error: "broker busy"}}}
	s.exchange(t, settle, outboxdriver.Claim{})
	b2 := keyed("b")[0]
	s.write(t, b2)
	// a2 is due but a1 waits for its retry: only b moves on.
	s.orderedClaim(t, b2.ID)
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
			if !slices.Equal(ids(got), []uuid.UUID{a1.ID}) {
				t.Fatalf("claim in key order after a1's retry delay returned %v; want only a1 %s", ids(got), a1.ID)
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
// published between its claim and its settlement, retrying some once, and
// checks that every key's messages were published in id order.
func testKeyOrderConcurrentClaimers(t *testing.T, s *suite) {
	const (
		keys      = 6
		perKey    = 40
		claimers  = 4
		batch     = 4
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
		inFlight  = map[string]uuid.UUID{} // key -> the message of it a claimer holds
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
			if other, busy := inFlight[m.Key]; busy {
				mu.Unlock()
				return outboxdriver.Settlement{}, fmt.Sprintf("claimer %d got message %s of key %s while message %s of the key was in flight", c, m.ID, m.Key, other)
			}
			inFlight[m.Key] = m.ID
		}
		settle := outboxdriver.Settlement{Token: token}
		for _, m := range got {
			if retryOnce[m.ID] {
				delete(retryOnce, m.ID)
				settle.Retry = append(settle.Retry, outboxdriver.Retry{ID: m.ID, Error: "first attempt fails"})
				continue
			}
			published[m.Key] = append(published[m.Key], m.ID)
			settle.Published = append(settle.Published, m.ID)
			count++
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
