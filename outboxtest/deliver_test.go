package outboxtest_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/outboxtest"
)

func TestDeliverRetriesAFailingMessageInPlaceThenAcknowledgesIt(t *testing.T) {
	t.Parallel()
	calls := 0
	got := outboxtest.Deliver(t, func(ctx context.Context, m outbox.Message) error {
		if calls++; calls < 3 {
			return errors.New("database busy")
		}
		return nil
	}, outbox.Message{Topic: "orders.paid"})
	d := got[0]
	if d.Attempts != 3 || d.Acked != 1 || d.Parked != 0 || d.Err == nil || d.Message.ID == uuid.Nil {
		t.Fatalf("delivery %+v, want 3 attempts, acknowledged once, the last error kept and an id given", d)
	}
}

func TestDeliverParksAfterMaxDeliverAttemptsOrAtOnceOnAPermanentError(t *testing.T) {
	t.Parallel()
	got := outboxtest.DeliverWith(t, func(ctx context.Context, m outbox.Message) error {
		if m.Topic == "bad" {
			return outbox.Permanent(errors.New("undecodable"))
		}
		return errors.New("down")
	}, outboxtest.DeliverConfig{MaxDeliver: 3}, outbox.Message{Topic: "down"}, outbox.Message{Topic: "bad"})
	if got[0].Attempts != 3 || got[0].Parked != 1 || got[0].Acked != 0 {
		t.Errorf("retryable failure: %+v, want 3 attempts then parked", got[0])
	}
	if got[1].Attempts != 1 || got[1].Parked != 1 {
		t.Errorf("permanent failure: %+v, want parked after 1 attempt", got[1])
	}
}

// As in the adapters, an unavailable destination counts no attempt: the
// copy waits for it past MaxDeliver, and one that stays down for
// MaxUnavailable tries is left unacknowledged, not parked.
func TestDeliverCountsNoAttemptWhileTheDestinationIsUnavailable(t *testing.T) {
	t.Parallel()
	calls := 0
	got := outboxtest.DeliverWith(t, func(ctx context.Context, m outbox.Message) error {
		if m.Topic == "classified permanent" {
			return outbox.Permanent(outbox.Unavailable(errors.New("smtp: no such mailbox")))
		}
		if m.Topic == "down for good" {
			return outbox.Unavailable(errors.New("smtp: connection refused"))
		}
		if calls++; calls <= 4 {
			return outbox.HeldBack(outbox.RetryAfter(errors.New("handler paused"), time.Millisecond))
		}
		return nil
	}, outboxtest.DeliverConfig{MaxDeliver: 2, MaxUnavailable: 10}, outbox.Message{Topic: "back soon"}, outbox.Message{Topic: "down for good"}, outbox.Message{Topic: "classified permanent"})
	if got[0].Attempts != 5 || got[0].Acked != 1 || got[0].Parked != 0 {
		t.Errorf("a destination down 4 times with MaxDeliver 2: %+v; want 5 calls, acknowledged, not parked", got[0])
	}
	if got[1].Attempts != 10 || got[1].Acked != 0 || got[1].Parked != 0 {
		t.Errorf("a destination that stays down: %+v; want MaxUnavailable = 10 calls, neither acknowledged nor parked", got[1])
	}
	if got[2].Attempts != 1 || got[2].Parked != 1 {
		t.Errorf("an unavailable error marked permanent: %+v; want parked at once (permanent wins, as in the adapters)", got[2])
	}
}

// dedup is the smallest inbox: it applies a message id once.
type dedup struct {
	mu      sync.Mutex
	seen    map[uuid.UUID]bool
	applied int
}

func (d *dedup) apply(_ context.Context, m outbox.Message) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.seen[m.ID] {
		d.seen[m.ID] = true
		d.applied++
	}
	return nil
}

func TestDeliverWithCopiesRedeliversEachMessageOneAfterTheOtherOrAtOnce(t *testing.T) {
	t.Parallel()
	for _, concurrent := range []bool{false, true} {
		in := &dedup{seen: map[uuid.UUID]bool{}}
		got := outboxtest.DeliverWith(t, in.apply, outboxtest.DeliverConfig{Copies: 3, Concurrent: concurrent},
			outbox.Message{Topic: "a"}, outbox.Message{Topic: "b"})
		for _, d := range got {
			if d.Attempts != 3 || d.Acked != 3 {
				t.Errorf("concurrent=%v: %+v, want 3 copies each acknowledged", concurrent, d)
			}
		}
		if in.applied != 2 {
			t.Errorf("concurrent=%v: applied %d times, want each of the 2 messages once", concurrent, in.applied)
		}
	}
}
