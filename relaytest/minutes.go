package relaytest

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/outboxdriver"
)

// TestRelayAddsToTheMinuteRollup runs a relay that publishes some
// messages and fails others on a store with a per-minute rollup
// (outboxdriver.MinuteRollup), and checks that the rollup's minutes of the
// last hour sum what the relay published and the attempts that failed
// (one retried, one dead-lettered), with a sample of the backlog, and that
// the relay's stop adds nothing twice.
func TestRelayAddsToTheMinuteRollup(t *testing.T, h Harness) {
	rollup, ok := h.Store.(outboxdriver.MinuteRollup)
	if !ok {
		t.Skip("the store keeps no per-minute rollup (outboxdriver.MinuteRollup)")
	}
	ctx := context.Background()
	sums := func() (published, failed int64, sampled bool) {
		t.Helper()
		list, _, err := rollup.Minutes(ctx, time.Hour)
		if err != nil {
			t.Fatalf("Minutes: %v", err)
		}
		for _, m := range list {
			published, failed, sampled = published+m.Published, failed+m.Failed, sampled || m.Sampled
		}
		return published, failed, sampled
	}
	var flakyFailed atomic.Bool
	rec := NewRecorder()
	rec.Fail = func(m outbox.Message) error {
		switch m.Topic {
		case "minutes.bad":
			return outbox.Permanent(errors.New("rejected: no such route"))
		case "minutes.flaky":
			if flakyFailed.CompareAndSwap(false, true) {
				return errors.New("timeout")
			}
		}
		return nil
	}
	relay, err := outbox.NewRelay(h.Store, rec, outbox.Config{
		HeartbeatInterval: 50 * time.Millisecond, PollInterval: 50 * time.Millisecond,
		BackoffBase: 10 * time.Millisecond, BackoffMax: 20 * time.Millisecond, Logger: TestLogger(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- relay.Run(ctx) }()
	t.Cleanup(func() { _ = relay.Shutdown(ctx) })

	msgs := []*outbox.Message{newMessage("minutes.ok", 1), newMessage("minutes.ok", 2), newMessage("minutes.ok", 3),
		newMessage("minutes.bad", 4), newMessage("minutes.flaky", 5)}
	if err := h.Write(ctx, true, msgs...); err != nil {
		t.Fatal(err)
	}
	h.Notify()
	rec.WaitFor(t, 10*time.Second, "the rollup to sum 4 published and 2 failed attempts", func() bool {
		published, failed, _ := sums()
		return published == 4 && failed == 2
	})
	if err := relay.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	published, failed, sampled := sums()
	if published != 4 || failed != 2 {
		t.Fatalf("after the relay stopped the rollup sums %d published, %d failed; want still 4 and 2 (3 published at once, 1 after a retry; 1 retried, 1 dead)", published, failed)
	}
	if !sampled {
		t.Fatal("no minute of the rollup has a sample of the backlog; want the first add of a minute to take one")
	}
}
