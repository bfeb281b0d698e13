package storetest

import (
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/outboxdriver"
)

func init() {
	keyOrderCases = append(keyOrderCases,
		testCase{"a replay makes kept published messages pending again with their ids, chosen by topic, key, write time or id, oldest first up to its limit, and in key order before the key's newer messages", testReplay},
	)
}

func testReplay(t *testing.T, s *suite) {
	replayer, ok := s.h.Store.(outboxdriver.Replayer)
	if !ok {
		t.Skip("the store cannot replay (outboxdriver.Replayer)")
	}
	ctx := t.Context()
	msg := func(topic, key string) *outbox.Message {
		return &outbox.Message{Topic: topic, Key: key, Payload: []byte(topic + key)}
	}
	a1, a2, b1, c1 := msg("orders", "a"), msg("orders", "a"), msg("invoices", "b"), msg("orders", "c")
	expired := msg("quotes", "q") // published in time; its expiry has passed since
	expired.ExpiresAt = s.now(t).Add(-time.Minute)
	s.write(t, a1, a2, expired)
	s.write(t, b1, c1)
	token, claimed := s.claim(t, 10, longLease)
	if len(claimed) != 5 {
		t.Fatalf("claimed %d; want 5", len(claimed))
	}
	s.exchange(t, outboxdriver.Settlement{Token: token, Published: ids(claimed), KeepPublished: true}, outboxdriver.Claim{})
	if s.held() {
		s.waitNoneInFlight(t)
	}
	a3 := msg("orders", "a") // a newer pending message of key a
	s.write(t, a3)

	count := func(f outboxdriver.ReplayFilter) int {
		t.Helper()
		n, err := replayer.Replay(ctx, f, 1000, true)
		if err != nil {
			t.Fatalf("Replay(%+v, dry run): %v", f, err)
		}
		return n
	}
	b1At := s.get(t, b1.ID).CreatedAt
	for _, c := range []struct {
		f    outboxdriver.ReplayFilter
		want int
	}{
		{outboxdriver.ReplayFilter{}, 4}, // not the expired one
		{outboxdriver.ReplayFilter{Topic: "quotes"}, 0},
		{outboxdriver.ReplayFilter{Topic: "orders"}, 3},
		{outboxdriver.ReplayFilter{Topic: "orders", Key: "a"}, 2},
		{outboxdriver.ReplayFilter{WrittenFrom: b1At}, 2},
		{outboxdriver.ReplayFilter{WrittenBefore: b1At}, 2},
		{outboxdriver.ReplayFilter{IDs: []uuid.UUID{b1.ID, a3.ID, uuid.New()}}, 1},
	} {
		if got := count(c.f); got != c.want {
			t.Fatalf("a dry run of %+v counts %d; want %d", c.f, got, c.want)
		}
	}
	if st := s.stats(t); st.Published != 5 || st.Pending != 1 {
		t.Fatalf("after dry runs: %+v; want nothing changed (5 kept, 1 pending)", st)
	}

	n, err := replayer.Replay(ctx, outboxdriver.ReplayFilter{Topic: "orders"}, 2, false)
	if err != nil || n != 2 {
		t.Fatalf("Replay(orders, limit 2) = %d, %v; want 2", n, err)
	}
	for _, m := range []*outbox.Message{a1, a2} {
		if got := s.get(t, m.ID); got.Status != outbox.StatusPending || got.Attempts != 0 || !got.PublishedAt.IsZero() {
			t.Fatalf("replayed %s: %+v; want pending again, untried, unpublished", m.ID, got)
		}
	}
	if got := s.get(t, c1.ID); got.Status != outbox.StatusPublished {
		t.Fatalf("c1 %+v; want still published: the limit took the two oldest", got)
	}
	// Key a's replayed messages come before its newer pending one.
	s.orderedClaim(t, a1, a2, a3)
}
