package storetest

import (
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/go-outbox/outbox/outboxdriver"
)

func init() {
	cases = append(cases,
		testCase{"the relay registry keeps a row per relay, refreshed by each beat with its start kept, and forgets rows unseen for longer than a beat's Forget", testRelayRegistry},
	)
}

func testRelayRegistry(t *testing.T, s *suite) {
	reg, ok := s.h.Store.(outboxdriver.RelayRegistry)
	if !ok {
		t.Skip("the store keeps no relay registry (outboxdriver.RelayRegistry)")
	}
	ctx := t.Context()
	relays := func() ([]outboxdriver.RelayRow, time.Time) {
		t.Helper()
		rows, now, err := reg.Relays(ctx)
		if err != nil {
			t.Fatalf("Relays: %v", err)
		}
		return rows, now
	}
	beat := func(b outboxdriver.RelayBeat) {
		t.Helper()
		if err := reg.BeatRelay(ctx, b); err != nil {
			t.Fatalf("BeatRelay(%s): %v", b.ID, err)
		}
	}
	// waitPast waits until the store's clock is past at, so that the next
	// beat's time differs from the last one's.
	waitPast := func(at time.Time) {
		t.Helper()
		deadline := time.Now().Add(waitTimeout)
		for !s.now(t).After(at) {
			if time.Now().After(deadline) {
				t.Fatalf("the store's clock did not pass %v", at)
			}
			time.Sleep(time.Millisecond)
		}
	}

	if rows, _ := relays(); len(rows) != 0 {
		t.Fatalf("a new table lists %d relays; want none", len(rows))
	}
	a := outboxdriver.RelayBeat{
		ID: uuid.New(), Host: "host-a", PID: 41, Version: "v1.2.3", Config: `{"workers":2}`,
		Interval: 10 * time.Second, SinceClaim: -1, SincePublish: -1, Forget: time.Hour,
	}
	before := s.now(t)
	beat(a)
	rows, now := relays()
	if len(rows) != 1 {
		t.Fatalf("after one beat the registry lists %d relays; want 1", len(rows))
	}
	first := rows[0]
	if first.ID != a.ID || first.Host != a.Host || first.PID != a.PID || first.Version != a.Version || first.Config != a.Config || first.Interval != a.Interval {
		t.Fatalf("registered %+v; want the beat's id, host, pid, version, config and interval %+v", first, a)
	}
	if first.SeenAt.Before(before.Add(-time.Second)) || first.SeenAt.After(now) || !first.StartedAt.Equal(first.SeenAt) {
		t.Fatalf("first beat: started %v, seen %v; want both the beat's time, between %v and %v", first.StartedAt, first.SeenAt, before, now)
	}
	if !first.LastClaimAt.IsZero() || !first.LastPublishAt.IsZero() {
		t.Fatalf("a relay that never claimed shows last claim %v, last publish %v; want both zero", first.LastClaimAt, first.LastPublishAt)
	}
	if !first.Live(now) || first.Live(first.SeenAt.Add(outboxdriver.RelayStaleBeats*a.Interval+time.Millisecond)) {
		t.Fatalf("Live: want live at %v and stale past %d intervals", now, outboxdriver.RelayStaleBeats)
	}

	waitPast(first.SeenAt)
	a.SinceClaim, a.SincePublish, a.Config = 2*time.Second, 5*time.Second, `{"workers":4}`
	beat(a)
	rows, _ = relays()
	if len(rows) != 1 {
		t.Fatalf("a second beat of one relay left %d rows; want 1", len(rows))
	}
	again := rows[0]
	if !again.SeenAt.After(first.SeenAt) || !again.StartedAt.Equal(first.StartedAt) || again.Config != a.Config {
		t.Fatalf("second beat: started %v seen %v config %s; want the start kept (%v), seen later than %v, the new config",
			again.StartedAt, again.SeenAt, again.Config, first.StartedAt, first.SeenAt)
	}
	if d := again.SeenAt.Sub(again.LastClaimAt); d != 2*time.Second {
		t.Fatalf("last claim %v before the beat; want 2s (the beat's SinceClaim)", d)
	}
	if d := again.SeenAt.Sub(again.LastPublishAt); d != 5*time.Second {
		t.Fatalf("last publish %v before the beat; want 5s (the beat's SincePublish)", d)
	}

	// b's beat forgets a, unseen for longer than b's Forget, and keeps b.
	waitPast(again.SeenAt.Add(time.Millisecond))
	b := a
	b.ID, b.Host, b.Forget = uuid.New(), "host-b", time.Millisecond
	beat(b)
	rows, _ = relays()
	if got := rowIDs(rows); !slices.Equal(got, []uuid.UUID{b.ID}) {
		t.Fatalf("after b's beat with Forget 1ms the registry lists %v; want only b %s (a %s unseen longer)", got, b.ID, a.ID)
	}

	if err := reg.RemoveRelay(ctx, b.ID); err != nil {
		t.Fatalf("RemoveRelay: %v", err)
	}
	if err := reg.RemoveRelay(ctx, uuid.New()); err != nil {
		t.Fatalf("RemoveRelay of an unknown relay: %v; want no error", err)
	}
	if rows, _ := relays(); len(rows) != 0 {
		t.Fatalf("after RemoveRelay the registry lists %v; want none", rowIDs(rows))
	}
}

func rowIDs(rows []outboxdriver.RelayRow) []uuid.UUID {
	ids := make([]uuid.UUID, len(rows))
	for i, r := range rows {
		ids[i] = r.ID
	}
	return ids
}
