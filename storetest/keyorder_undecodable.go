package storetest

import (
	"testing"

	"github.com/google/uuid"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/outboxdriver"
)

func init() {
	keyOrderCases = append(keyOrderCases,
		testCase{"in key order a message whose stored headers do not decode is dead at once and holds the rest of its key, which the claim hands back untried", testKeyOrderUndecodableHoldsItsKey},
		testCase{"in key order a claim of nothing but an undecodable message and the rest of its key hands the rest back untried, none lost", testKeyOrderUndecodableAloneHandsBackItsKey},
	)
}

// A claim dead-letters a message whose stored headers do not decode
// (testUndecodableHeaders). In key order that message is dead like any
// other, so the later messages of its key in the same claim must not go out
// before it: the claim hands them back untried, and they wait behind it
// (testKeyOrderDeadHoldsItsKey) until it is retried or discarded. The
// messages of the key before it, and other keys, go out.
func testKeyOrderUndecodableHoldsItsKey(t *testing.T, s *suite) {
	if s.h.SetStoredHeaders == nil {
		t.Skip("the harness cannot set stored headers")
	}
	m := keyed("a", "a", "a", "a", "b")
	a1, a2, a3, a4, b1 := m[0], m[1], m[2], m[3], m[4]
	s.write(t, m...)
	if err := s.h.SetStoredHeaders(t.Context(), a2.ID, `{"attempt": 1}`); err != nil {
		t.Fatalf("set stored headers of %s: %v", a2.ID, err)
	}
	token := s.orderedClaim(t, a1, b1)
	s.exchange(t, outboxdriver.Settlement{Token: token, Published: []uuid.UUID{a1.ID, b1.ID}}, outboxdriver.Claim{})
	if got := s.get(t, a2.ID); got.Status != outbox.StatusDead {
		t.Fatalf("message %s with undecodable headers: status %q; want dead", a2.ID, got.Status)
	}
	for _, id := range []uuid.UUID{a3.ID, a4.ID} {
		if got := s.get(t, id); got.Status != outbox.StatusPending || got.Attempts != 0 {
			t.Fatalf("message %s behind dead %s: status %q, %d attempts; want pending, handed back untried", id, a2.ID, got.Status, got.Attempts)
		}
	}
	s.orderedClaim(t) // a3 and a4 wait behind a2
	if st := s.stats(t); st.BehindDead != 2 {
		t.Fatalf("stats with a3, a4 behind dead a2: %d behind dead; want 2 (%+v)", st.BehindDead, st)
	}
	if n, err := s.h.Admin.DiscardDead(t.Context(), a2.ID); err != nil || n != 1 {
		t.Fatalf("discard dead %s: %d, %v; want 1", a2.ID, n, err)
	}
	s.orderedClaim(t, a3, a4)
}

// The same with nothing else in the claim: it returns no message at all,
// and the messages it handed back must still be there (a claim held in a
// transaction that dead-letters the head and then commits an empty claim
// must not take them with it).
func testKeyOrderUndecodableAloneHandsBackItsKey(t *testing.T, s *suite) {
	if s.h.SetStoredHeaders == nil {
		t.Skip("the harness cannot set stored headers")
	}
	m := keyed("c", "c", "c")
	c1, c2, c3 := m[0], m[1], m[2]
	s.write(t, m...)
	if err := s.h.SetStoredHeaders(t.Context(), c1.ID, `{"attempt": 1}`); err != nil {
		t.Fatalf("set stored headers of %s: %v", c1.ID, err)
	}
	s.orderedClaim(t)
	if got := s.get(t, c1.ID); got.Status != outbox.StatusDead {
		t.Fatalf("message %s with undecodable headers: status %q; want dead", c1.ID, got.Status)
	}
	for _, id := range []uuid.UUID{c2.ID, c3.ID} {
		if got := s.get(t, id); got.Status != outbox.StatusPending || got.Attempts != 0 {
			t.Fatalf("message %s behind dead %s: status %q, %d attempts; want pending, handed back untried", id, c1.ID, got.Status, got.Attempts)
		}
	}
	if n, err := s.h.Admin.DiscardDead(t.Context(), c1.ID); err != nil || n != 1 {
		t.Fatalf("discard dead %s: %d, %v; want 1", c1.ID, n, err)
	}
	s.orderedClaim(t, c2, c3)
}
