package storetest

import (
	"sync"
	"testing"
	"time"

	"github.com/go-outbox/outbox/outboxdriver"
)

func init() {
	cases = append(cases,
		testCase{"the per-minute rollup sums every relay's adds in the minute's row, samples the backlog once per minute, lists the span oldest first and deletes rows past MinutesKept when a minute begins", testMinuteRollup},
		testCase{"the per-minute rollup's sample counts the pending messages and the age of the oldest", testMinuteRollupSample},
	)
}

func testMinuteRollup(t *testing.T, s *suite) {
	rollup, ok := s.h.Store.(outboxdriver.MinuteRollup)
	if !ok {
		t.Skip("the store keeps no per-minute rollup (outboxdriver.MinuteRollup)")
	}
	ctx := t.Context()
	add := func(published, failed int64) {
		t.Helper()
		if err := rollup.AddMinute(ctx, published, failed); err != nil {
			t.Fatalf("AddMinute(%d, %d): %v", published, failed, err)
		}
	}
	minutes := func(span time.Duration) ([]outboxdriver.Minute, time.Time) {
		t.Helper()
		list, now, err := rollup.Minutes(ctx, span)
		if err != nil {
			t.Fatalf("Minutes(%v): %v", span, err)
		}
		return list, now
	}
	if list, _ := minutes(time.Hour); len(list) != 0 {
		t.Fatalf("a new table's rollup lists %d minutes; want none", len(list))
	}

	// The adds below must fall in one minute: start early in one.
	deadline := time.Now().Add(time.Minute)
	for s.now(t).Sub(s.now(t).Truncate(time.Minute)) > 45*time.Second {
		if time.Now().After(deadline) {
			t.Fatal("the store's clock did not reach the start of a minute within a minute")
		}
		time.Sleep(100 * time.Millisecond)
	}
	now := s.now(t)
	minute := now.Truncate(time.Minute)

	// Rows the relays of the past left: one past MinutesKept, to be
	// deleted when this minute's row is made; two kept.
	var expired, kept, recent outboxdriver.Minute
	if s.h.SetMinute != nil {
		expired = outboxdriver.Minute{Start: minute.Add(-outboxdriver.MinutesKept - time.Minute), Published: 9}
		kept = outboxdriver.Minute{Start: minute.Add(-2 * time.Hour), Published: 7, Failed: 1}
		recent = outboxdriver.Minute{Start: minute.Add(-30 * time.Minute), Published: 4, Failed: 2, Sampled: true, Pending: 12, OldestPending: 90 * time.Second}
		for _, m := range []outboxdriver.Minute{expired, kept, recent} {
			if err := s.h.SetMinute(ctx, m); err != nil {
				t.Fatalf("SetMinute(%v): %v", m.Start, err)
			}
		}
	}

	// The first add of the minute samples the backlog (none yet); the
	// messages written after it are not in this minute's sample.
	add(3, 1)
	s.write(t, newMessage("minutes"), newMessage("minutes"))
	add(2, 0)
	// Two relays adding at once.
	var wg sync.WaitGroup
	for _, counts := range [][2]int64{{5, 2}, {1, 1}} {
		wg.Go(func() {
			if err := rollup.AddMinute(ctx, counts[0], counts[1]); err != nil {
				t.Errorf("concurrent AddMinute(%d, %d): %v", counts[0], counts[1], err)
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	if s.h.SetMinute != nil {
		// A second row past MinutesKept, written once this minute's row
		// exists: the next add is no new minute and leaves it.
		late := outboxdriver.Minute{Start: minute.Add(-outboxdriver.MinutesKept - 2*time.Minute), Published: 1}
		if err := s.h.SetMinute(ctx, late); err != nil {
			t.Fatalf("SetMinute(%v): %v", late.Start, err)
		}
		add(0, 0)
		all, _ := minutes(outboxdriver.MinutesKept + time.Hour)
		if len(all) != 4 || !all[0].Start.Equal(late.Start) {
			t.Fatalf("after an add in a minute that had its row, the rollup holds %v; want the row past MinutesKept written since (%v) kept, then %v, %v and this minute",
				starts(all), late.Start, kept.Start, recent.Start)
		}
	}

	list, readAt := minutes(time.Hour)
	var want []time.Time
	if s.h.SetMinute != nil {
		want = append(want, recent.Start)
	}
	want = append(want, minute)
	if got := starts(list); !equalTimes(got, want) {
		t.Fatalf("Minutes(1h) lists the minutes starting %v; want %v (oldest first; the row of 2h ago outside the span, the one past MinutesKept deleted when this minute began)", got, want)
	}
	if readAt.Before(now) || readAt.After(now.Add(waitTimeout)) {
		t.Fatalf("Minutes read at %v; want the store's clock, after %v", readAt, now)
	}
	cur := list[len(list)-1]
	if cur.Published != 11 || cur.Failed != 4 {
		t.Fatalf("this minute: published %d, failed %d; want 11 (3+2+5+1) and 4 (1+0+2+1): every add of every relay summed", cur.Published, cur.Failed)
	}
	if !cur.Sampled || cur.Pending != 0 || cur.OldestPending != 0 {
		t.Fatalf("this minute's sample: sampled %v, pending %d, oldest %v; want the first add's (sampled, nothing pending), not resampled by the later adds after 2 writes",
			cur.Sampled, cur.Pending, cur.OldestPending)
	}
	if s.h.SetMinute != nil {
		if r := list[0]; r.Published != recent.Published || r.Failed != recent.Failed || !r.Sampled || r.Pending != recent.Pending || r.OldestPending != recent.OldestPending {
			t.Fatalf("the row of 30 minutes ago reads %+v; want it as written, %+v", r, recent)
		}
	}
}

func testMinuteRollupSample(t *testing.T, s *suite) {
	rollup, ok := s.h.Store.(outboxdriver.MinuteRollup)
	if !ok {
		t.Skip("the store keeps no per-minute rollup (outboxdriver.MinuteRollup)")
	}
	ctx := t.Context()
	hourAgo := s.now(t).Add(-time.Hour)
	msgs := newMessages("orders.sampled", 2)
	for _, m := range msgs {
		m.CreatedAt, m.AvailableAt = hourAgo, hourAgo
	}
	s.write(t, msgs...)
	if err := rollup.AddMinute(ctx, 0, 0); err != nil {
		t.Fatalf("AddMinute: %v", err)
	}
	list, _, err := rollup.Minutes(ctx, time.Hour)
	if err != nil || len(list) == 0 {
		t.Fatalf("Minutes(1h) = %v, %v; want this minute's row", list, err)
	}
	cur := list[len(list)-1]
	if !cur.Sampled || cur.Pending != 2 || cur.OldestPending < time.Hour-time.Minute || cur.OldestPending > time.Hour+waitTimeout {
		t.Fatalf("the sample: sampled %v, pending %d, oldest %v; want 2 pending, the oldest written an hour ago", cur.Sampled, cur.Pending, cur.OldestPending)
	}
}

func starts(list []outboxdriver.Minute) []time.Time {
	out := make([]time.Time, len(list))
	for i, m := range list {
		out[i] = m.Start
	}
	return out
}

func equalTimes(a, b []time.Time) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !a[i].Equal(b[i]) {
			return false
		}
	}
	return true
}
