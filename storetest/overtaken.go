package storetest

import (
	"testing"

	"github.com/google/uuid"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/outboxdriver"
)

// The cases of this file join keyOrderCases here rather than in its list,
// so that they live beside their helpers.
func init() {
	keyOrderCases = append(keyOrderCases,
		testCase{"in key order skipping dead messages, each dead message counts the later messages of its key published past it, by every way a settlement publishes", testKeyOrderSkippingDeadCountsOvertaken},
		testCase{"in key order a dead message that holds its key is overtaken by none", testKeyOrderHoldingDeadIsNotOvertaken},
		testCase{"in key order skipping dead messages, an overtaken message retried by force keeps its count through releases and retries, and dies again with it", testKeyOrderForcedRetryKeepsOvertaken},
		testCase{"in key order skipping dead messages, a retry unless overtaken retries nothing of a request that holds an overtaken message, and names it", testKeyOrderRetryUnlessOvertaken},
	)
}

// skipClaim claims up to limit messages through the store that skips dead
// messages in key order and fails unless exactly want come back.
func (s *suite) skipClaim(t *testing.T, limit int, want ...*outbox.Message) uuid.UUID {
	t.Helper()
	token := uuid.New()
	got, err := s.h.KeyOrderedSkippingDead.SettleAndClaim(t.Context(), outboxdriver.Settlement{}, outboxdriver.Claim{Limit: limit, Lease: longLease, Token: token})
	if err != nil || !sameRuns(got, want) {
		t.Fatalf("claim in key order skipping dead messages: %v, %v; want %v", ids(got), err, ids(want))
	}
	return token
}

// skipSettle records settle through the store that skips dead messages.
func (s *suite) skipSettle(t *testing.T, settle outboxdriver.Settlement) {
	t.Helper()
	if _, err := s.h.KeyOrderedSkippingDead.SettleAndClaim(t.Context(), settle, outboxdriver.Claim{}); err != nil {
		t.Fatalf("settle in key order skipping dead messages: %v", err)
	}
}

// wantOvertaken fails unless Admin.ListDead lists exactly the dead
// messages of want, and it and Admin.Get show each overtaken as many
// times as want says.
func (s *suite) wantOvertaken(t *testing.T, want map[uuid.UUID]int) {
	t.Helper()
	dead, err := s.h.Admin.ListDead(t.Context(), uuid.Nil, 100)
	if err != nil {
		t.Fatalf("list dead: %v", err)
	}
	if len(dead) != len(want) {
		t.Fatalf("list dead returned %v; want the %d dead messages %v", ids(dead), len(want), want)
	}
	for _, m := range dead {
		n, ok := want[m.ID]
		if !ok {
			t.Fatalf("list dead returned message %s; want only %v", m.ID, want)
		}
		if m.Overtaken != n {
			t.Fatalf("dead message %s of key %q as listed: overtaken by %d; want %d", m.ID, m.Key, m.Overtaken, n)
		}
		if got := s.get(t, m.ID); got.Overtaken != n {
			t.Fatalf("dead message %s of key %q as Get returns it: overtaken by %d; want %d", m.ID, m.Key, got.Overtaken, n)
		}
	}
}

// testKeyOrderSkippingDeadCountsOvertaken: with the key going on past its
// dead messages, each dead message counts the later messages of its key
// published since it died, so that a retry can say it would come after
// them. A dead message counts only those after it in its key, and none of
// another key. The key's messages are published each by another way of
// settling: by the address the claim left, kept for retention, and by id
// (a claim of another store, whose addresses the settling store does not
// know; with TransactionLeases, an open claim's commit).
func testKeyOrderSkippingDeadCountsOvertaken(t *testing.T, s *suite) {
	if s.h.KeyOrderedSkippingDead == nil {
		t.Skip("the harness sets no KeyOrderedSkippingDead store: the store has no option to skip dead messages in key order")
	}
	m := keyed("k", "k", "k", "k", "k", "x", "x")
	k1, k2, k3, k4, k5, x1, x2 := m[0], m[1], m[2], m[3], m[4], m[5], m[6]
	s.write(t, m...)

	// k1 and x1 die; the rest of their runs goes back untried.
	token := s.skipClaim(t, 100, k1, k2, k3, k4, k5, x1, x2)
	s.skipSettle(t, outboxdriver.Settlement{Token: token,
		Dead:    []outboxdriver.Failure{{ID: k1.ID, Error: "rejected"}, {ID: x1.ID, Error: "rejected"}},
		Release: []uuid.UUID{k2.ID, k3.ID, k4.ID, k5.ID, x2.ID}})
	s.wantOvertaken(t, map[uuid.UUID]int{k1.ID: 0, x1.ID: 0})

	// k2 is published, deleted where the claim found it.
	token = s.skipClaim(t, 1, k2)
	s.skipSettle(t, outboxdriver.Settlement{Token: token, Published: []uuid.UUID{k2.ID}})
	s.wantOvertaken(t, map[uuid.UUID]int{k1.ID: 1, x1.ID: 0})

	// k3 dies too: behind k1, overtaking nothing.
	token = s.skipClaim(t, 1, k3)
	s.skipSettle(t, outboxdriver.Settlement{Token: token, Dead: []outboxdriver.Failure{{ID: k3.ID, Error: "rejected"}}})
	s.wantOvertaken(t, map[uuid.UUID]int{k1.ID: 1, k3.ID: 0, x1.ID: 0})

	// k4 is published and kept for retention.
	token = s.skipClaim(t, 1, k4)
	s.skipSettle(t, outboxdriver.Settlement{Token: token, Published: []uuid.UUID{k4.ID}, KeepPublished: true})
	s.wantOvertaken(t, map[uuid.UUID]int{k1.ID: 2, k3.ID: 1, x1.ID: 0})

	// k5 and x2, claimed by a store that does not order by key, are
	// published by the settlement of the skipping store, by id.
	token, got := s.claim(t, 10, longLease)
	if !sameRuns(got, []*outbox.Message{k5, x2}) {
		t.Fatalf("claim of the pending messages k5 and x2: %v; want %v", ids(got), []uuid.UUID{k5.ID, x2.ID})
	}
	s.skipSettle(t, outboxdriver.Settlement{Token: token, Published: []uuid.UUID{k5.ID, x2.ID}})
	s.wantOvertaken(t, map[uuid.UUID]int{k1.ID: 3, k3.ID: 2, x1.ID: 1})

	// A settlement under a token that holds nothing publishes nothing,
	// and counts nothing.
	s.skipSettle(t, outboxdriver.Settlement{Token: uuid.New(), Published: []uuid.UUID{k1.ID, k5.ID}})
	s.wantOvertaken(t, map[uuid.UUID]int{k1.ID: 3, k3.ID: 2, x1.ID: 1})
}

// testKeyOrderHoldingDeadIsNotOvertaken: by default a dead message holds
// the rest of its key, so nothing of its key goes out before it and its
// count stays 0.
func testKeyOrderHoldingDeadIsNotOvertaken(t *testing.T, s *suite) {
	m := keyed("k", "k", "k")
	k1, k2, k3 := m[0], m[1], m[2]
	s.write(t, m...)
	token := s.orderedClaim(t, k1, k2, k3)
	s.settleOrdered(t, outboxdriver.Settlement{Token: token,
		Dead: []outboxdriver.Failure{{ID: k1.ID, Error: "rejected"}}, Release: []uuid.UUID{k2.ID, k3.ID}})
	// k2 and k3 wait behind k1.
	s.orderedClaim(t)
	if st := s.stats(t); st.BehindDead != 2 {
		t.Fatalf("stats with k2, k3 behind dead k1: %d behind dead; want 2", st.BehindDead)
	}
	s.wantOvertaken(t, map[uuid.UUID]int{k1.ID: 0})
}

// testKeyOrderForcedRetryKeepsOvertaken: a dead message retried by force
// (outbox dead retry --force) is pending with its count, and whatever its
// claims do with it (release, retry, dead-letter) keeps that count: dead
// again, it was still published after the messages that overtook it, and
// a retry must ask for --force again. With TransactionLeases each outcome
// puts the row back from what the open claim read.
func testKeyOrderForcedRetryKeepsOvertaken(t *testing.T, s *suite) {
	if s.h.KeyOrderedSkippingDead == nil {
		t.Skip("the harness sets no KeyOrderedSkippingDead store: the store has no option to skip dead messages in key order")
	}
	m := keyed("k", "k")
	k1, k2 := m[0], m[1]
	s.write(t, m...)
	token := s.skipClaim(t, 100, k1, k2)
	s.skipSettle(t, outboxdriver.Settlement{Token: token,
		Dead: []outboxdriver.Failure{{ID: k1.ID, Error: "rejected"}}, Release: []uuid.UUID{k2.ID}})
	token = s.skipClaim(t, 1, k2)
	s.skipSettle(t, outboxdriver.Settlement{Token: token, Published: []uuid.UUID{k2.ID}})
	s.wantOvertaken(t, map[uuid.UUID]int{k1.ID: 1})

	if n, err := s.h.Admin.RetryDead(t.Context(), k1.ID); err != nil || n != 1 {
		t.Fatalf("retry of dead message %s: %d, %v; want 1 retried", k1.ID, n, err)
	}
	wantPending := func(after string) {
		t.Helper()
		if got := s.get(t, k1.ID); got.Status != outbox.StatusPending || got.Overtaken != 1 {
			t.Fatalf("message %s retried by force, after %s: status %s, overtaken by %d; want pending, overtaken by 1", k1.ID, after, got.Status, got.Overtaken)
		}
	}
	wantPending("the retry")
	token = s.skipClaim(t, 1, k1)
	s.skipSettle(t, outboxdriver.Settlement{Token: token, Release: []uuid.UUID{k1.ID}})
	wantPending("a claim released it")
	token = s.skipClaim(t, 1, k1)
	s.skipSettle(t, outboxdriver.Settlement{Token: token, Retry: []outboxdriver.Retry{{ID: k1.ID, Error: "unavailable"}}})
	wantPending("a claim retried it")
	token = s.skipClaim(t, 1, k1)
	s.skipSettle(t, outboxdriver.Settlement{Token: token, Dead: []outboxdriver.Failure{{ID: k1.ID, Error: "rejected again"}}})
	s.wantOvertaken(t, map[uuid.UUID]int{k1.ID: 1})
}

// testKeyOrderRetryUnlessOvertaken: a retry that keeps key order
// (outboxdriver.KeyOrderRetrier, `outbox dead retry` without --force)
// checks the counts and retries in one step. A request, by id or of all,
// that holds an overtaken message retries none of it and names that
// message with its key and count; one without retries as RetryDead does.
func testKeyOrderRetryUnlessOvertaken(t *testing.T, s *suite) {
	if s.h.KeyOrderedSkippingDead == nil {
		t.Skip("the harness sets no KeyOrderedSkippingDead store: the store has no option to skip dead messages in key order")
	}
	r, ok := s.h.Admin.(outboxdriver.KeyOrderRetrier)
	if !ok {
		t.Skip("the harness's Admin does not implement outboxdriver.KeyOrderRetrier")
	}
	m := keyed("k", "k", "x")
	k1, k2, x1 := m[0], m[1], m[2]
	s.write(t, m...)
	token := s.skipClaim(t, 100, k1, k2, x1)
	s.skipSettle(t, outboxdriver.Settlement{Token: token,
		Dead: []outboxdriver.Failure{{ID: k1.ID, Error: "rejected"}, {ID: x1.ID, Error: "rejected"}}, Release: []uuid.UUID{k2.ID}})
	token = s.skipClaim(t, 1, k2)
	s.skipSettle(t, outboxdriver.Settlement{Token: token, Published: []uuid.UUID{k2.ID}})
	s.wantOvertaken(t, map[uuid.UUID]int{k1.ID: 1, x1.ID: 0})

	for _, asked := range []struct {
		ids []uuid.UUID
		all bool
	}{{ids: []uuid.UUID{x1.ID, k1.ID}}, {all: true}} {
		n, overtaken, err := r.RetryDeadUnlessOvertaken(t.Context(), asked.ids, asked.all)
		if err != nil || n != 0 || len(overtaken) != 1 || overtaken[0].ID != k1.ID || overtaken[0].Key != "k" || overtaken[0].Overtaken != 1 {
			t.Fatalf("retry unless overtaken of %v (all %v), %s overtaken by 1: %d retried, overtaken %v (%+v), %v; want 0 retried and %s named, of key %q, overtaken by 1",
				asked.ids, asked.all, k1.ID, n, ids(overtaken), overtaken, err, k1.ID, "k")
		}
		s.wantOvertaken(t, map[uuid.UUID]int{k1.ID: 1, x1.ID: 0})
	}
	if n, overtaken, err := r.RetryDeadUnlessOvertaken(t.Context(), nil, false); err != nil || n != 0 || len(overtaken) != 0 {
		t.Fatalf("retry unless overtaken of no ids: %d retried, overtaken %v, %v; want nothing", n, ids(overtaken), err)
	}
	s.wantOvertaken(t, map[uuid.UUID]int{k1.ID: 1, x1.ID: 0})

	if n, overtaken, err := r.RetryDeadUnlessOvertaken(t.Context(), []uuid.UUID{x1.ID, uuid.New()}, false); err != nil || n != 1 || len(overtaken) != 0 {
		t.Fatalf("retry unless overtaken of %s, which nothing overtook, and an unknown id: %d retried, overtaken %v, %v; want 1 retried", x1.ID, n, ids(overtaken), err)
	}
	if got := s.get(t, x1.ID); got.Status != outbox.StatusPending || got.Attempts != 0 {
		t.Fatalf("message %s after its retry: status %s, %d attempts; want pending, 0 attempts", x1.ID, got.Status, got.Attempts)
	}
	s.wantOvertaken(t, map[uuid.UUID]int{k1.ID: 1})
}
