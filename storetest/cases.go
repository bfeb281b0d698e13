package storetest

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/outboxdriver"
)

var cases = []testCase{
	{"write then claim returns the message with every field intact", testWriteThenClaim},
	{"a rolled-back write is never claimable", testRolledBackWrite},
	{"claim respects the limit and returns messages in due order", testClaimLimitAndOrder},
	{"a scheduled message is not claimed before it is due", testScheduledMessage},
	{"a leased message is not claimed again until its lease expires", testLeaseExpiry},
	{"a message whose lease expired keeps its place in the queue", testExpiredLeaseKeepsItsPlace},
	{"concurrent claimers never get the same message and together get all", testConcurrentClaimers},
	{"published settlement deletes the message or keeps it as published", testPublishedSettlement},
	{"retry settlement counts an attempt, keeps the error and delays the message", testRetrySettlement},
	{"an unsent retry postpones the message and keeps the error without counting an attempt", testUnsentRetry},
	{"dead settlement dead-letters the message with its error", testDeadSettlement},
	{"a claim dead-letters a message whose stored headers do not decode", testUndecodableHeaders},
	{"settlement with a stale token changes nothing", testStaleToken},
	{"exchange settles and claims in the same call", testSettleAndClaimSettlesAndClaims},
	{"release makes messages due at once without counting an attempt", testRelease},
	{"next due reports none, then the earliest pending message", testNextDue},
	{"purge published deletes only older published messages in bounded batches", testPurgePublished},
	{"stats count messages by state", testStats},
	{"list dead pages through dead messages in id order", testListDead},
	{"retry dead makes the chosen dead messages pending; no ids is none, all is explicit", testRetryDead},
	{"discard dead deletes only dead messages", testDiscardDead},
	{"get of an unknown id returns ErrNotFound", testGetUnknown},
}

func testWriteThenClaim(t *testing.T, s *suite) {
	full := newMessage("orders.created")
	bare := &outbox.Message{ID: uuid.Must(uuid.NewV7()), Topic: "orders.bare", CreatedAt: time.Now()}
	before := s.now(t)
	s.write(t, full, bare)
	after := s.now(t)

	_, got := s.claimIDs(t, 10, longLease, full.ID, bare.ID)
	for i, want := range []*outbox.Message{full, bare} {
		m := got[i]
		switch {
		case m.Topic != want.Topic:
			t.Fatalf("message %s: topic %q; want %q", want.ID, m.Topic, want.Topic)
		case m.Key != want.Key:
			t.Fatalf("message %s: key %q; want %q", want.ID, m.Key, want.Key)
		case !slices.Equal(m.Payload, want.Payload):
			t.Fatalf("message %s: payload %q; want %q", want.ID, m.Payload, want.Payload)
		case !maps.Equal(m.Headers, want.Headers):
			t.Fatalf("message %s: headers %v; want %v", want.ID, m.Headers, want.Headers)
		case want.CreatedAt.IsZero() && !within(m.CreatedAt, before, after):
			t.Fatalf("message %s: created at %v; want the store's time of the write, between %v and %v", want.ID, m.CreatedAt, before, after)
		case !want.CreatedAt.IsZero() && !m.CreatedAt.Equal(want.CreatedAt.Truncate(time.Microsecond)):
			t.Fatalf("message %s: created at %v; want %v (to the microsecond)", want.ID, m.CreatedAt, want.CreatedAt.Truncate(time.Microsecond))
		case !within(m.AvailableAt, before, after):
			t.Fatalf("message %s: available at %v; want the write's time, between %v and %v", want.ID, m.AvailableAt, before, after)
		case m.Attempts != 0 || m.LastError != "":
			t.Fatalf("message %s: attempts %d, last error %q; want none", want.ID, m.Attempts, m.LastError)
		case m.Status != outbox.StatusPending:
			t.Fatalf("message %s: status %q; want %q", want.ID, m.Status, outbox.StatusPending)
		case !m.PublishedAt.IsZero():
			t.Fatalf("message %s: published at %v; want zero", want.ID, m.PublishedAt)
		}
	}
	if got[1].Payload == nil || len(got[1].Payload) != 0 || len(got[1].Headers) != 0 {
		t.Fatalf("message %s: payload %#v, headers %v; want an empty, non-nil payload and no headers", bare.ID, got[1].Payload, got[1].Headers)
	}

	// Get sees the same message.
	m := s.get(t, full.ID)
	if !slices.Equal(m.Payload, full.Payload) || !maps.Equal(m.Headers, full.Headers) || m.Key != full.Key {
		t.Fatalf("get message %s: %+v; want the written fields %+v", full.ID, m, full)
	}
}

func testRolledBackWrite(t *testing.T, s *suite) {
	rolledBack := newMessages("orders.rolled_back", 3)
	committed := newMessage("orders.committed")
	if err := s.h.WriteRollback(t.Context(), rolledBack...); err != nil {
		t.Fatalf("write and roll back: %v", err)
	}
	s.write(t, committed)

	s.claimIDs(t, 10, longLease, committed.ID)
	for _, m := range rolledBack {
		s.mustBeGone(t, m.ID)
	}
	if st := s.stats(t); st.Pending != 1 {
		t.Fatalf("stats: %d pending; want 1 (only the committed message %s)", st.Pending, committed.ID)
	}
}

func testClaimLimitAndOrder(t *testing.T, s *suite) {
	// Due times in the past, written out of order; the two last share a due
	// time, so their ids decide.
	base := s.now(t).Add(-time.Hour).Truncate(time.Millisecond)
	msgs := newMessages("orders.ordered", 6)
	offsets := []time.Duration{5, 1, 4, 2, 3, 3} // minutes after base
	for i, m := range msgs {
		m.AvailableAt = base.Add(offsets[i] * time.Minute)
	}
	s.write(t, msgs[4], msgs[0], msgs[5], msgs[2], msgs[1], msgs[3])
	s.write(t, newScheduled(s.now(t).Add(time.Hour)))

	wantOrder := []uuid.UUID{msgs[1].ID, msgs[3].ID, msgs[4].ID, msgs[5].ID, msgs[2].ID, msgs[0].ID}
	_, first := s.claimIDs(t, 3, longLease, wantOrder[:3]...)
	for i, m := range first {
		if !m.AvailableAt.Equal(msgs[slices.Index(ids(msgs), m.ID)].AvailableAt) {
			t.Fatalf("claimed message %d (%s): available at %v; want the due time it was claimed at", i, m.ID, m.AvailableAt)
		}
	}
	s.claimIDs(t, 10, longLease, wantOrder[3:]...)
	s.claimIDs(t, 10, longLease) // only the scheduled message is left
}

func newScheduled(at time.Time) *outbox.Message {
	m := newMessage("orders.scheduled")
	m.AvailableAt = at
	return m
}

func testScheduledMessage(t *testing.T, s *suite) {
	const delay = 300 * time.Millisecond
	m := newScheduled(s.now(t).Add(delay))
	s.write(t, m)
	s.claimIDs(t, 10, longLease)
	_, got := s.claimEventually(t, 10, longLease)
	if now := s.now(t); len(got) != 1 || got[0].ID != m.ID || now.Before(m.AvailableAt) {
		t.Fatalf("claimed %v at %v; want only %s, and not before %v", ids(got), now, m.ID, m.AvailableAt)
	}
}

func testLeaseExpiry(t *testing.T, s *suite) {
	// Long enough that the second claim below comes within it on a loaded
	// machine (at 200 ms it did not always, with transaction leases).
	const lease = 2 * time.Second
	m := newMessage("orders.leased")
	s.write(t, m)

	start := time.Now()
	s.claimIDs(t, 10, lease, m.ID)
	s.claimIDs(t, 10, lease) // still leased

	_, again := s.claimEventually(t, 10, longLease)
	elapsed := time.Since(start)
	if len(again) != 1 || again[0].ID != m.ID {
		t.Fatalf("after the lease expired, claimed %v; want [%s]", ids(again), m.ID)
	}
	if elapsed < lease {
		t.Fatalf("message %s was claimed again after %v; want no earlier than its lease of %v", m.ID, elapsed, lease)
	}
	if again[0].Attempts != 0 {
		t.Fatalf("message %s: attempts %d after an expired lease; want 0 (expiry is not a failed attempt)", m.ID, again[0].Attempts)
	}
}

// A lease is not a new due time: when it runs out, the message is due again
// in the place it had, ahead of messages that became due while it was
// leased. A store that kept the lease in available_at would put it behind
// them.
func testExpiredLeaseKeepsItsPlace(t *testing.T, s *suite) {
	const lease = 300 * time.Millisecond
	first := newMessage("orders.requeued")
	s.write(t, first)
	claimedAt := s.now(t)
	_, got := s.claimIDs(t, 10, lease, first.ID)
	dueAt := got[0].AvailableAt

	// Both become due after the claim and before its lease ends.
	soon, later := newScheduled(claimedAt.Add(time.Millisecond)), newScheduled(claimedAt.Add(lease/2))
	s.write(t, later, soon)

	s.waitNoneInFlight(t)
	_, again := s.claimIDs(t, 10, longLease, first.ID, soon.ID, later.ID)
	if !again[0].AvailableAt.Equal(dueAt) || again[0].Attempts != 0 {
		t.Fatalf("message %s claimed again after its lease expired: available at %v, attempts %d; want its due time %v kept and no attempt counted",
			first.ID, again[0].AvailableAt, again[0].Attempts, dueAt)
	}
}

// waitNoneInFlight polls Stats (or CountHeld) until no lease is in force.
func (s *suite) waitNoneInFlight(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	if s.held() {
		for {
			n, err := s.h.CountHeld(t.Context())
			if err != nil {
				t.Fatalf("count held messages: %v", err)
			}
			if n == 0 {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d messages still held; want every claim rolled back within %v", n, waitTimeout)
			}
			time.Sleep(pollInterval)
		}
	}
	for st := s.stats(t); st.InFlight != 0; st = s.stats(t) {
		if time.Now().After(deadline) {
			t.Fatalf("stats: %+v; want every lease to run out within %v", st, waitTimeout)
		}
		time.Sleep(pollInterval)
	}
}

func testConcurrentClaimers(t *testing.T, s *suite) {
	const (
		total    = 2000
		claimers = 8
		batch    = 25
	)
	msgs := newMessages("orders.concurrent", total)
	for i := 0; i < total; i += 500 {
		s.write(t, msgs[i:i+500]...)
	}

	var (
		claimed atomic.Int64
		mu      sync.Mutex
		seen    = map[uuid.UUID]int{} // id -> claimer
	)
	done := func() bool { return claimed.Load() >= total }
	runClaimers(t, s.h.Store, claimers, batch, done, func(c int, token uuid.UUID, got []outbox.Message) (outboxdriver.Settlement, string) {
		mu.Lock()
		defer mu.Unlock()
		for _, m := range got {
			if other, dup := seen[m.ID]; dup {
				return outboxdriver.Settlement{}, fmt.Sprintf("message %s was claimed twice, by claimers %d and %d", m.ID, other, c)
			}
			seen[m.ID] = c
		}
		claimed.Add(int64(len(got)))
		return outboxdriver.Settlement{Token: token, Published: ids(got)}, ""
	})
	if t.Failed() {
		return
	}
	if len(seen) != total {
		t.Fatalf("the claimers got %d distinct messages; want all %d", len(seen), total)
	}
	for _, m := range msgs {
		if _, ok := seen[m.ID]; !ok {
			t.Fatalf("message %s was never claimed", m.ID)
		}
	}
	if st := s.stats(t); st.Pending != 0 {
		t.Fatalf("stats after publishing everything: %+v; want nothing pending", st)
	}
}

func testPublishedSettlement(t *testing.T, s *suite) {
	for _, keep := range []bool{false, true} {
		m := newMessage("orders.published")
		s.write(t, m)
		token, _ := s.claimIDs(t, 10, longLease, m.ID)
		before := s.now(t)
		s.exchange(t, outboxdriver.Settlement{Token: token, Published: []uuid.UUID{m.ID}, KeepPublished: keep}, outboxdriver.Claim{})
		after := s.now(t)

		if !keep {
			s.mustBeGone(t, m.ID)
			continue
		}
		got := s.get(t, m.ID)
		if got.Status != outbox.StatusPublished || !within(got.PublishedAt, before, after) {
			t.Fatalf("kept message %s: status %q, published at %v; want %q between %v and %v",
				m.ID, got.Status, got.PublishedAt, outbox.StatusPublished, before, after)
		}
		if got.Attempts != 0 {
			t.Fatalf("kept message %s: attempts %d; want 0", m.ID, got.Attempts)
		}
	}
	s.claimIDs(t, 10, longLease) // a kept message is never claimed again
	if st := s.stats(t); st.Pending != 0 || st.Published != 1 {
		t.Fatalf("stats: %+v; want 0 pending and 1 published", st)
	}
	if _, ok := s.nextDue(t); ok {
		t.Fatalf("next due reports a pending message; want none after publishing")
	}
}

// requireRetried checks a message settled as a retry: pending, with its
// attempts and last error, and due between earliest and latest (the
// settlement's time plus the delay).
func requireRetried(t *testing.T, got outbox.Message, attempts int, lastError string, earliest, latest time.Time) {
	t.Helper()
	switch {
	case got.Status != outbox.StatusPending:
		t.Fatalf("retried message %s: status %q; want %q", got.ID, got.Status, outbox.StatusPending)
	case got.Attempts != attempts:
		t.Fatalf("retried message %s: attempts %d; want %d", got.ID, got.Attempts, attempts)
	case got.LastError != lastError:
		t.Fatalf("retried message %s: last error %q; want %q", got.ID, got.LastError, lastError)
	case !within(got.AvailableAt, earliest, latest):
		t.Fatalf("retried message %s: available at %v; want the settlement's time plus the delay, between %v and %v",
			got.ID, got.AvailableAt, earliest, latest)
	}
}

func testUnsentRetry(t *testing.T, s *suite) {
	const delay = 300 * time.Millisecond
	unsent, failed := newMessage("orders.unsent"), newMessage("orders.failed")
	s.write(t, unsent, failed)
	token, _ := s.claimIDs(t, 10, longLease, unsent.ID, failed.ID)

	// One settlement holds both kinds: each row gets its own count.
	before := s.now(t)
	s.exchange(t, outboxdriver.Settlement{Token: token, Retry: []outboxdriver.Retry{
		{ID: unsent.ID, Delay: delay, Error: "connection refused", Unsent: true},
		{ID: failed.ID, Delay: delay, Error: "nack"},
	}}, outboxdriver.Claim{})
	after := s.now(t)

	requireRetried(t, s.get(t, unsent.ID), 0, "connection refused", before.Add(delay), after.Add(delay))
	if got := s.get(t, failed.ID); got.Attempts != 1 || got.LastError != "nack" {
		t.Fatalf("failed message %s settled with the unsent one: attempts %d, last error %q; want 1 and %q", failed.ID, got.Attempts, got.LastError, "nack")
	}
}

func testRetrySettlement(t *testing.T, s *suite) {
	const delay = 300 * time.Millisecond
	m := newMessage("orders.retried")
	s.write(t, m)
	token, _ := s.claimIDs(t, 10, longLease, m.ID)

	before := s.now(t)
	s.exchange(t, outboxdriver.Settlement{Token: token, Retry: []outboxdriver.Retry{{ID: m.ID, Delay: delay, Error: "broker unavailable"}}}, outboxdriver.Claim{})
	after := s.now(t)

	got := s.get(t, m.ID)
	requireRetried(t, got, 1, "broker unavailable", before.Add(delay), after.Add(delay))

	token, again := s.claimEventually(t, 10, longLease)
	if now := s.now(t); len(again) != 1 || again[0].ID != m.ID || now.Before(got.AvailableAt) {
		t.Fatalf("claimed %v at %v; want only %s, and not before %v", ids(again), now, m.ID, got.AvailableAt)
	}
	if again[0].Attempts != 1 || again[0].LastError != "broker unavailable" {
		t.Fatalf("reclaimed message %s: attempts %d, last error %q; want 1 and the error", m.ID, again[0].Attempts, again[0].LastError)
	}
	s.exchange(t, outboxdriver.Settlement{Token: token, Retry: []outboxdriver.Retry{{ID: m.ID, Delay: 0, Error: "still down"}}}, outboxdriver.Claim{})
	if got := s.get(t, m.ID); got.Attempts != 2 || got.LastError != "still down" {
		t.Fatalf("message %s after a second retry: attempts %d, last error %q; want 2 and %q", m.ID, got.Attempts, got.LastError, "still down")
	}
}

func testDeadSettlement(t *testing.T, s *suite) {
	msgs := newMessages("orders.poison", 2)
	s.write(t, msgs...)
	token, _ := s.claimIDs(t, 10, longLease, ids(msgs)...)
	s.exchange(t, outboxdriver.Settlement{Token: token, Dead: []outboxdriver.Failure{{ID: msgs[0].ID, Error: "cannot decode payload"}}}, outboxdriver.Claim{})

	got := s.get(t, msgs[0].ID)
	if got.Status != outbox.StatusDead || got.Attempts != 1 || got.LastError != "cannot decode payload" {
		t.Fatalf("dead message %s: status %q, attempts %d, last error %q; want %q, 1, %q",
			msgs[0].ID, got.Status, got.Attempts, got.LastError, outbox.StatusDead, "cannot decode payload")
	}
	if other := s.get(t, msgs[1].ID); other.Status != outbox.StatusPending || other.Attempts != 0 {
		t.Fatalf("message %s, not in the settlement: status %q, attempts %d; want pending and 0", msgs[1].ID, other.Status, other.Attempts)
	}
	if err := s.h.Store.Release(t.Context(), token, ids(msgs)); err != nil {
		t.Fatalf("release: %v", err)
	}
	s.claimIDs(t, 10, longLease, msgs[1].ID) // the dead message is never claimed
	if st := s.stats(t); st.Dead != 1 {
		t.Fatalf("stats: %d dead; want 1 (%s)", st.Dead, msgs[0].ID)
	}
}

func testUndecodableHeaders(t *testing.T, s *suite) {
	if s.h.SetStoredHeaders == nil {
		t.Skip("the harness cannot set stored headers")
	}
	msgs := newMessages("orders.created", 3)
	s.write(t, msgs...)
	bad := msgs[1].ID
	// A JSON object, so any store's column takes it, but not of strings.
	if err := s.h.SetStoredHeaders(t.Context(), bad, `{"attempt": 1}`); err != nil {
		t.Fatalf("set stored headers of %s: %v", bad, err)
	}
	// The others are claimed: one row must not stop every claim.
	token, _ := s.claimIDs(t, 10, longLease, msgs[0].ID, msgs[2].ID)
	if s.held() {
		// Dead-lettered within the claim's transaction.
		s.exchange(t, outboxdriver.Settlement{Token: token, Published: []uuid.UUID{msgs[0].ID, msgs[2].ID}}, outboxdriver.Claim{})
	}
	got := s.get(t, bad)
	if got.Status != outbox.StatusDead || got.Attempts != 1 || !strings.Contains(got.LastError, "headers") {
		t.Fatalf("message %s with undecodable headers: status %q, attempts %d, last error %q; want dead after 1 attempt, saying the headers do not decode",
			bad, got.Status, got.Attempts, got.LastError)
	}
	if dead, err := s.h.Admin.ListDead(t.Context(), uuid.Nil, 10); err != nil || len(dead) != 1 || dead[0].ID != bad {
		t.Fatalf("list dead: %d message(s), %v; want %s, listed despite its headers", len(dead), err, bad)
	}
}

func testStaleToken(t *testing.T, s *suite) {
	kinds := []struct {
		name   string
		settle func(token, id uuid.UUID) outboxdriver.Settlement
	}{
		{"published", func(token, id uuid.UUID) outboxdriver.Settlement {
			return outboxdriver.Settlement{Token: token, Published: []uuid.UUID{id}}
		}},
		{"published and kept", func(token, id uuid.UUID) outboxdriver.Settlement {
			return outboxdriver.Settlement{Token: token, Published: []uuid.UUID{id}, KeepPublished: true}
		}},
		{"retry", func(token, id uuid.UUID) outboxdriver.Settlement {
			return outboxdriver.Settlement{Token: token, Retry: []outboxdriver.Retry{{ID: id, Delay: time.Hour, Error: "stale"}}}
		}},
		{"dead", func(token, id uuid.UUID) outboxdriver.Settlement {
			return outboxdriver.Settlement{Token: token, Dead: []outboxdriver.Failure{{ID: id, Error: "stale"}}}
		}},
	}
	for _, k := range kinds {
		m := newMessage("orders.stale")
		s.write(t, m)
		stale, _ := s.claimIDs(t, 10, 50*time.Millisecond, m.ID)
		current, _ := s.claimEventually(t, 10, longLease) // the lease expired; another relay takes it

		s.exchange(t, k.settle(stale, m.ID), outboxdriver.Claim{})
		if err := s.h.Store.Release(t.Context(), stale, []uuid.UUID{m.ID}); err != nil {
			t.Fatalf("release with a stale token: %v", err)
		}
		got := s.get(t, m.ID)
		if got.Status != outbox.StatusPending || got.Attempts != 0 || got.LastError != "" {
			t.Fatalf("%s with a stale token changed message %s: status %q, attempts %d, last error %q; want it untouched",
				k.name, m.ID, got.Status, got.Attempts, got.LastError)
		}
		s.claimIDs(t, 10, longLease) // still leased to the current holder

		// The current holder's settlement applies.
		s.exchange(t, outboxdriver.Settlement{Token: current, Published: []uuid.UUID{m.ID}}, outboxdriver.Claim{})
		s.mustBeGone(t, m.ID)
	}
}

func testSettleAndClaimSettlesAndClaims(t *testing.T, s *suite) {
	base := s.now(t).Add(-time.Minute)
	msgs := newMessages("orders.exchanged", 5)
	for i, m := range msgs {
		m.AvailableAt = base.Add(time.Duration(i) * time.Second)
	}
	s.write(t, msgs...)

	token, _ := s.claimIDs(t, 2, longLease, msgs[0].ID, msgs[1].ID)
	next := uuid.New()
	got := s.exchange(t,
		outboxdriver.Settlement{Token: token, Published: []uuid.UUID{msgs[0].ID}, Retry: []outboxdriver.Retry{{ID: msgs[1].ID, Delay: time.Hour, Error: "later"}}},
		outboxdriver.Claim{Limit: 2, Lease: longLease, Token: next})
	if !slices.Equal(ids(got), []uuid.UUID{msgs[2].ID, msgs[3].ID}) {
		t.Fatalf("exchange claimed %v; want %v", ids(got), []uuid.UUID{msgs[2].ID, msgs[3].ID})
	}
	s.mustBeGone(t, msgs[0].ID)
	if r := s.get(t, msgs[1].ID); r.Attempts != 1 || r.LastError != "later" {
		t.Fatalf("message %s: attempts %d, last error %q; want the retry recorded", msgs[1].ID, r.Attempts, r.LastError)
	}

	last := s.exchange(t, outboxdriver.Settlement{Token: next, Published: ids(got)}, outboxdriver.Claim{Limit: 10, Lease: longLease, Token: uuid.New()})
	if !slices.Equal(ids(last), []uuid.UUID{msgs[4].ID}) {
		t.Fatalf("exchange claimed %v; want [%s]", ids(last), msgs[4].ID)
	}
	s.mustBeGone(t, msgs[2].ID)
	s.mustBeGone(t, msgs[3].ID)
}

func testRelease(t *testing.T, s *suite) {
	msgs := newMessages("orders.released", 3)
	s.write(t, msgs...)
	token, _ := s.claimIDs(t, 10, longLease, ids(msgs)...)

	if err := s.h.Store.Release(t.Context(), uuid.New(), ids(msgs)); err != nil {
		t.Fatalf("release with another token: %v", err)
	}
	s.claimIDs(t, 10, longLease) // another token releases nothing

	if err := s.h.Store.Release(t.Context(), token, ids(msgs[:2])); err != nil {
		t.Fatalf("release: %v", err)
	}
	if s.held() {
		// Released within the claim's transaction: back when it commits.
		s.claimIDs(t, 10, longLease)
		s.exchange(t, outboxdriver.Settlement{Token: token, Published: []uuid.UUID{msgs[2].ID}}, outboxdriver.Claim{})
	}
	_, again := s.claimIDs(t, 10, longLease, msgs[0].ID, msgs[1].ID)
	for _, m := range again {
		if m.Attempts != 0 || m.LastError != "" {
			t.Fatalf("released message %s: attempts %d, last error %q; want no attempt counted", m.ID, m.Attempts, m.LastError)
		}
	}
	if err := s.h.Store.Release(t.Context(), token, nil); err != nil {
		t.Fatalf("release of no ids: %v", err)
	}
}

func testNextDue(t *testing.T, s *suite) {
	if wait, ok := s.nextDue(t); ok {
		t.Fatalf("next due on an empty table: %v, true; want none", wait)
	}

	now := s.now(t)
	later, latest := newScheduled(now.Add(time.Hour)), newScheduled(now.Add(2*time.Hour))
	s.write(t, latest, later)
	before := s.now(t)
	wait, ok := s.nextDue(t)
	after := s.now(t)
	lo, hi := later.AvailableAt.Sub(after)-time.Microsecond, later.AvailableAt.Sub(before)+time.Microsecond
	if !ok || wait < lo || wait > hi {
		t.Fatalf("next due: %v, %v; want the wait until message %s, between %v and %v", wait, ok, later.ID, lo, hi)
	}

	due := newMessage("orders.due")
	s.write(t, due)
	if wait, ok := s.nextDue(t); !ok || wait > 0 {
		t.Fatalf("next due with message %s due now: %v, %v; want zero or less", due.ID, wait, ok)
	}

	// A leased message is due again when its lease ends.
	s.claimIDs(t, 10, longLease, due.ID)
	if s.held() {
		// No lease end is written: the held message is not due to
		// anyone else while its claim is open, and the next one due is
		// the message scheduled in an hour.
		if wait, ok := s.nextDue(t); !ok || wait <= 0 || wait > time.Hour {
			t.Fatalf("next due with message %s held by an open claim: %v, %v; want the wait until message %s (an hour at most), not now", due.ID, wait, ok, later.ID)
		}
		return
	}
	if wait, ok := s.nextDue(t); !ok || wait <= 0 || wait > longLease {
		t.Fatalf("next due with message %s leased for %v: %v, %v; want the lease's end", due.ID, longLease, wait, ok)
	}
}

func testPurgePublished(t *testing.T, s *suite) {
	publish := func(msgs []*outbox.Message) {
		t.Helper()
		s.write(t, msgs...)
		token, _ := s.claimIDs(t, 10, longLease, ids(msgs)...)
		s.exchange(t, outboxdriver.Settlement{Token: token, Published: ids(msgs), KeepPublished: true}, outboxdriver.Claim{})
	}
	old := newMessages("orders.old", 5)
	publish(old)
	var lastPublished time.Time
	for _, m := range old {
		if p := s.get(t, m.ID).PublishedAt; p.After(lastPublished) {
			lastPublished = p
		}
	}
	// The cut-off is an age on the store's clock: the old messages must be
	// well past it, and the fresh ones, published just before the purge,
	// well within it.
	const age = time.Second
	deadline := time.Now().Add(waitTimeout)
	for s.now(t).Sub(lastPublished) < 2*age {
		if time.Now().After(deadline) {
			t.Fatalf("the store's clock did not pass %v", lastPublished.Add(2*age))
		}
		time.Sleep(pollInterval)
	}
	fresh := newMessages("orders.fresh", 2)
	publish(fresh)
	firstFresh := s.get(t, fresh[0].ID).PublishedAt
	if p := s.get(t, fresh[1].ID).PublishedAt; p.Before(firstFresh) {
		firstFresh = p
	}
	pending := newMessage("orders.pending")
	s.write(t, pending)

	// Each purge's age puts the cut-off halfway between the last old and
	// the first fresh publication, from the store's clock read just
	// before it: only a purge that starts more than that half (a second or
	// more) after the clock was read could take a fresh message. A fixed
	// age counted from the fresh messages' publication did, on a loaded
	// machine that took over a second for the purges.
	margin := firstFresh.Sub(lastPublished) / 2
	var counts []int
	for range 5 {
		age := s.now(t).Sub(firstFresh) + margin
		n, err := s.h.Store.PurgePublished(t.Context(), age, 2)
		if err != nil {
			t.Fatalf("purge messages published more than %v ago: %v", age, err)
		}
		counts = append(counts, n)
	}
	if !slices.Equal(counts, []int{2, 2, 1, 0, 0}) {
		t.Fatalf("purge published in batches of 2 deleted %v; want [2 2 1 0 0] (5 old messages)", counts)
	}
	for _, m := range old {
		s.mustBeGone(t, m.ID)
	}
	for _, m := range fresh {
		if got := s.get(t, m.ID); got.Status != outbox.StatusPublished {
			t.Fatalf("message %s, published after the cut-off: status %q; want it kept as published", m.ID, got.Status)
		}
	}
	if got := s.get(t, pending.ID); got.Status != outbox.StatusPending {
		t.Fatalf("pending message %s: status %q after purge; want pending", pending.ID, got.Status)
	}
}

func testStats(t *testing.T, s *suite) {
	if st := s.stats(t); st != (outboxdriver.Stats{}) {
		t.Fatalf("stats of an empty table: %+v; want all zero", st)
	}
	msgs := newMessages("orders.counted", 5)
	// The last message (claimed last) is the oldest by CreatedAt.
	const age = time.Minute
	msgs[4].CreatedAt = time.Now().Add(-age)
	s.write(t, msgs...)
	s.write(t, newScheduled(s.now(t).Add(time.Hour)))

	token, got := s.claimIDs(t, 3, longLease, msgs[0].ID, msgs[1].ID, msgs[2].ID)
	s.exchange(t, outboxdriver.Settlement{
		Token:         token,
		Published:     []uuid.UUID{got[0].ID},
		KeepPublished: true,
		Dead:          []outboxdriver.Failure{{ID: got[1].ID, Error: "bad"}},
	}, outboxdriver.Claim{})

	st := s.stats(t)
	want := outboxdriver.Stats{Pending: 4, InFlight: 1, Dead: 1, Published: 1, PublishedLastMinute: 1}
	if s.held() {
		want.InFlight = 0 // no lease is written; the settlement put it back
	}
	if st.Pending != want.Pending || st.InFlight != want.InFlight || st.Dead != want.Dead || st.Published != want.Published ||
		st.PublishedLastMinute != want.PublishedLastMinute {
		t.Fatalf("stats: %+v; want %+v (message %s in flight)", st, want, msgs[2].ID)
	}
	if st.OldestPending < age || st.OldestPending > age+waitTimeout {
		t.Fatalf("stats: oldest pending %v; want the age of message %s, about %v", st.OldestPending, msgs[4].ID, age)
	}

	if s.held() {
		return // what follows counts leases in flight
	}

	// A message whose lease ran out is pending but no longer in flight.
	const shortLease = 500 * time.Millisecond
	s.claimIDs(t, 1, shortLease, msgs[3].ID)
	if st := s.stats(t); st.InFlight != 2 || st.Pending != 4 {
		t.Fatalf("stats with message %s leased for %v: %+v; want 2 in flight of 4 pending", msgs[3].ID, shortLease, st)
	}
	deadline := time.Now().Add(waitTimeout)
	for st := s.stats(t); st.InFlight != 1 || st.Pending != 4; st = s.stats(t) {
		if time.Now().After(deadline) {
			t.Fatalf("stats after the lease of message %s expired: %+v; want 1 in flight of 4 pending", msgs[3].ID, st)
		}
		time.Sleep(pollInterval)
	}
}

func testListDead(t *testing.T, s *suite) {
	dead := s.makeDead(t, 5)
	s.write(t, newMessage("orders.alive"))

	var listed []uuid.UUID
	after := uuid.Nil
	for page := 0; ; page++ {
		got, err := s.h.Admin.ListDead(t.Context(), after, 2)
		if err != nil {
			t.Fatalf("list dead after %s: %v", after, err)
		}
		if len(got) > 2 {
			t.Fatalf("list dead page %d: %d messages; want at most 2", page, len(got))
		}
		if len(got) == 0 {
			break
		}
		for _, m := range got {
			if m.Status != outbox.StatusDead || m.LastError != "cannot decode "+m.ID.String() || m.Attempts != 1 {
				t.Fatalf("listed message %s: status %q, attempts %d, last error %q; want dead, 1 attempt, its error", m.ID, m.Status, m.Attempts, m.LastError)
			}
		}
		listed = append(listed, ids(got)...)
		after = got[len(got)-1].ID
		if page > 5 {
			t.Fatalf("list dead did not end after %d pages: %v", page, listed)
		}
	}
	if !slices.Equal(listed, sortedIDs(dead)) {
		t.Fatalf("list dead returned %v; want every dead message in id order %v", listed, sortedIDs(dead))
	}
}

func testRetryDead(t *testing.T, s *suite) {
	dead := s.makeDead(t, 3)

	n, err := s.h.Admin.RetryDead(t.Context(), dead[0], uuid.New())
	if err != nil || n != 1 {
		t.Fatalf("retry dead %s and an unknown id: %d, %v; want 1", dead[0], n, err)
	}
	got := s.get(t, dead[0])
	if got.Status != outbox.StatusPending || got.Attempts != 0 {
		t.Fatalf("retried message %s: status %q, attempts %d; want pending with attempts reset", dead[0], got.Status, got.Attempts)
	}
	s.claimIDs(t, 10, longLease, dead[0]) // due at once
	if n, err := s.h.Admin.RetryDead(t.Context(), dead[0]); err != nil || n != 0 {
		t.Fatalf("retry dead of %s, which is no longer dead: %d, %v; want 0", dead[0], n, err)
	}

	// An empty list (a filter that matched nothing, say) retries nothing.
	if n, err := s.h.Admin.RetryDead(t.Context()); err != nil || n != 0 {
		t.Fatalf("retry dead with no ids: %d, %v; want 0 (all must be asked for with RetryAllDead)", n, err)
	}
	if st := s.stats(t); st.Dead != 2 {
		t.Fatalf("stats after retrying no ids: %d dead; want 2", st.Dead)
	}
	n, err = s.h.Admin.RetryAllDead(t.Context())
	if err != nil || n != 2 {
		t.Fatalf("retry all dead: %d, %v; want 2 (%v)", n, err, dead[1:])
	}
	s.claimIDs(t, 10, longLease, dead[1:]...)
	if st := s.stats(t); st.Dead != 0 {
		t.Fatalf("stats after retrying all: %d dead; want 0", st.Dead)
	}
}

func testDiscardDead(t *testing.T, s *suite) {
	dead := s.makeDead(t, 2)
	alive := newMessage("orders.alive")
	s.write(t, alive)

	n, err := s.h.Admin.DiscardDead(t.Context(), dead[0], alive.ID, uuid.New())
	if err != nil || n != 1 {
		t.Fatalf("discard dead %s, pending %s and an unknown id: %d, %v; want 1", dead[0], alive.ID, n, err)
	}
	s.mustBeGone(t, dead[0])
	if got := s.get(t, dead[1]); got.Status != outbox.StatusDead {
		t.Fatalf("message %s: status %q; want still dead", dead[1], got.Status)
	}
	if got := s.get(t, alive.ID); got.Status != outbox.StatusPending {
		t.Fatalf("message %s: status %q; want still pending (discard touches dead messages only)", alive.ID, got.Status)
	}
}

func testGetUnknown(t *testing.T, s *suite) {
	id := uuid.Must(uuid.NewV7())
	_, err := s.h.Admin.Get(t.Context(), id)
	if !errors.Is(err, outbox.ErrNotFound) {
		t.Fatalf("get unknown message %s: %v; want outbox.ErrNotFound", id, err)
	}
	if !strings.Contains(err.Error(), id.String()) {
		t.Fatalf("get unknown message %s: error %q does not name the id", id, err)
	}
}
