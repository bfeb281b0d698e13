package storetest

import (
	"testing"
	"time"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/outboxdriver"
)

func init() {
	cases = append(cases,
		testCase{"stuck keys are the keys whose head waited past the threshold, the longest first, with the head's attempts and whether a dead message is before it", testStuckKeys},
	)
}

func testStuckKeys(t *testing.T, s *suite) {
	finder, ok := s.h.Admin.(outboxdriver.StuckKeyFinder)
	if !ok {
		t.Skip("the store cannot list stuck keys (outboxdriver.StuckKeyFinder)")
	}
	msg := func(key string) *outbox.Message {
		return &outbox.Message{Topic: "stuck", Key: key, Payload: []byte(key)}
	}
	a1, a2, b1, b2, x := msg("a"), msg("a"), msg("b"), msg("b"), msg("")
	// a and b were written, and due, an hour ago (a's head a minute
	// before): no test waits on the clock for a head to grow old.
	hourAgo := s.now(t).Add(-time.Hour)
	for _, m := range []*outbox.Message{a1, a2, b1, b2, x} {
		m.CreatedAt, m.AvailableAt = hourAgo, hourAgo
	}
	a1.CreatedAt, a1.AvailableAt = hourAgo.Add(-time.Minute), hourAgo.Add(-time.Minute)
	scheduled := msg("d") // due in an hour: waiting for its time, not stuck
	scheduled.AvailableAt = s.now(t).Add(time.Hour)
	s.write(t, a1)
	s.write(t, a2, b1, b2, x, scheduled)
	token, claimed := s.claim(t, 10, longLease)
	if len(claimed) != 5 {
		t.Fatalf("claimed %d messages; want all 5", len(claimed))
	}
	s.exchange(t, outboxdriver.Settlement{Token: token,
		Retry:   []outboxdriver.Retry{{ID: a1.ID, Delay: time.Hour, Error: "broker said no"}},
		Dead:    []outboxdriver.Failure{{ID: b1.ID, Error: "cannot decode"}},
		Release: ids([]*outbox.Message{a2, b2, x}),
	}, outboxdriver.Claim{})
	if s.held() {
		s.waitNoneInFlight(t)
	}
	// c's head is written now, and not stuck at a threshold of half an hour.
	const threshold = 30 * time.Minute
	s.write(t, msg("c"))

	keys, total, err := finder.StuckKeys(t.Context(), threshold, 10)
	if err != nil {
		t.Fatalf("StuckKeys: %v", err)
	}
	if total != 2 || len(keys) != 2 || keys[0].Key != "a" || keys[1].Key != "b" {
		t.Fatalf("stuck keys %+v (total %d); want a then b, 2 in all (c is new, d scheduled, x has no key)", keys, total)
	}
	a, b := keys[0], keys[1]
	if a.Head != a1.ID || a.Topic != "stuck" || a.Attempts != 1 || a.LastError != "broker said no" || a.BehindDead || a.Waiting < time.Hour {
		t.Fatalf("key a: %+v; want head %s after 1 attempt (\"broker said no\"), not behind dead, waiting since it was written over an hour ago", a, a1.ID)
	}
	if b.Head != b2.ID || b.Attempts != 0 || !b.BehindDead {
		t.Fatalf("key b: %+v; want head %s, untried, behind the dead %s", b, b2.ID, b1.ID)
	}
	keys, total, err = finder.StuckKeys(t.Context(), threshold, 1)
	if err != nil || total != 2 || len(keys) != 1 || keys[0].Key != "a" {
		t.Fatalf("StuckKeys(limit 1) = %+v, %d, %v; want only a, 2 in all", keys, total, err)
	}
	if keys, total, err := finder.StuckKeys(t.Context(), 2*time.Hour, 10); err != nil || total != 0 || len(keys) != 0 {
		t.Fatalf("StuckKeys(2h) = %+v, %d, %v; want none", keys, total, err)
	}
}
