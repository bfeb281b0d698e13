package relaytest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/outboxdriver"
)

// testFailedAttemptsAreKept runs a relay whose publisher fails messages in
// each way and checks the history the store keeps of them: each failed
// attempt with its error, class and what followed, and none left of a
// message once it is published.
func testFailedAttemptsAreKept(t *testing.T, h Harness) {
	rec, ok := h.Store.(outboxdriver.AttemptRecorder)
	if !ok {
		t.Skip("the store keeps no history of attempts (outboxdriver.AttemptRecorder)")
	}
	ctx := context.Background()
	exhausted := &outbox.Message{Topic: "history", Key: "x", Payload: []byte("x")}
	permanent := &outbox.Message{Topic: "history", Key: "p", Payload: []byte("p")}
	recovers := &outbox.Message{Topic: "history", Key: "r", Payload: []byte("r")}
	if err := h.Write(ctx, true, exhausted, permanent, recovers); err != nil {
		t.Fatal(err)
	}
	var (
		mu    sync.Mutex
		tries = map[uuid.UUID]int{}
	)
	pub := NewRecorder()
	pub.Fail = func(m outbox.Message) error {
		mu.Lock()
		defer mu.Unlock()
		tries[m.ID]++
		switch m.ID {
		case exhausted.ID:
			return fmt.Errorf("broker down, try %d", tries[m.ID])
		case permanent.ID:
			return outbox.Permanent(errors.New("312 NO_ROUTE"))
		case recovers.ID:
			if tries[m.ID] == 1 {
				return errors.New("timeout")
			}
		}
		return nil
	}
	StartRelay(t, h.Store, pub, outbox.Config{MaxAttempts: 3, BackoffBase: time.Millisecond, BackoffMax: 5 * time.Millisecond, HeartbeatInterval: 50 * time.Millisecond})
	history := func(id uuid.UUID) []outboxdriver.Attempt {
		t.Helper()
		got, err := rec.Attempts(ctx, id)
		if err != nil {
			t.Fatalf("Attempts: %v", err)
		}
		return got
	}
	pub.WaitFor(t, 10*time.Second, "both failing messages dead, their last attempts recorded, and the recovered one's history purged", func() bool {
		return len(history(exhausted.ID)) == 3 && len(history(permanent.ID)) == 1 && pub.Count(recovers.ID) == 1 && len(history(recovers.ID)) == 0
	})
	type want struct {
		outcome outboxdriver.AttemptOutcome
		class   outboxdriver.AttemptClass
		err     string
	}
	check := func(id uuid.UUID, wants ...want) {
		t.Helper()
		got := history(id)
		for i, w := range wants {
			if g := got[i]; g.Number != i+1 || g.Outcome != w.outcome || g.Class != w.class || g.Error != w.err {
				t.Fatalf("attempt %d of %s: %+v; want %+v", i+1, id, g, w)
			}
		}
	}
	check(exhausted.ID,
		want{outboxdriver.AttemptRetried, outboxdriver.ClassRetryable, "broker down, try 1"},
		want{outboxdriver.AttemptRetried, outboxdriver.ClassRetryable, "broker down, try 2"},
		want{outboxdriver.AttemptDead, outboxdriver.ClassExhausted, "broker down, try 3"})
	check(permanent.ID, want{outboxdriver.AttemptDead, outboxdriver.ClassPermanent, outbox.Permanent(errors.New("312 NO_ROUTE")).Error()})
}
