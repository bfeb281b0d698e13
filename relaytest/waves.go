package relaytest

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-outbox/outbox"
)

// callCounter is a BrokerLike publisher that counts its Publish calls.
type callCounter struct {
	BrokerLike
	calls atomic.Int64
}

func (c *callCounter) Publish(ctx context.Context, batch []outbox.Message) []error {
	c.calls.Add(1)
	return c.BrokerLike.Publish(ctx, batch)
}

// testUnorderedBatchGoesWhole: the relay sends a batch whose keys repeat in
// waves (a round trip per message of a key) only to keep the order that a
// claim in key order promises. A store that does not claim in key order
// promises none, so a batch of 100 messages of one key goes to a publisher
// that sends a batch at once in one call, not 100.
func testUnorderedBatchGoesWhole(t *testing.T, h Harness) {
	const n = 100
	msgs := make([]*outbox.Message, n)
	for i := range msgs {
		msgs[i] = &outbox.Message{Topic: "orders", Key: "order-1", Payload: []byte(`{}`)}
	}
	if err := h.Write(context.Background(), true, msgs...); err != nil {
		t.Fatal(err)
	}
	rec := NewRecorder()
	pub := &callCounter{BrokerLike: BrokerLike{rec}}
	StartRelay(t, h.Store, pub, outbox.Config{BatchSize: n, Workers: 1, PollInterval: 20 * time.Millisecond})
	rec.WaitFor(t, 30*time.Second, "every message", func() bool { return rec.Distinct() == n })
	// The relay claims the table's 100 messages in one batch, unless a
	// claim happens to come back short: a few calls at most.
	if calls := pub.calls.Load(); calls > 3 {
		t.Fatalf("a store that does not claim in key order: %d messages of one key took %d Publish calls; want the batch whole (1 call, a few at most), not one wave per message", n, calls)
	}
}

// testKeyOrderPermanentFailureHoldsItsKey: in key order a dead message holds
// the rest of its key, and that holds inside the batch that kills it too. A
// run of one key whose first message fails for good (no handler, a 4xx, an
// event that does not decode) must not see the rest of the run published:
// they wait, counted as behind dead, until the dead message is retried, and
// then the key goes on in order. (Found by review: the waves and the
// publishers that keep key order went on past a permanent failure.)
func testKeyOrderPermanentFailureHoldsItsKey(t *testing.T, h Harness, publisher func(*Recorder) outbox.Publisher) {
	ctx := context.Background()
	msgs := make([]*outbox.Message, 3)
	for i := range msgs {
		msgs[i] = &outbox.Message{Topic: "orders", Key: "order-1", Payload: []byte(`{}`)}
	}
	if err := h.Write(ctx, true, msgs...); err != nil {
		t.Fatal(err)
	}
	var rejecting atomic.Bool
	rejecting.Store(true)
	rec := NewRecorder()
	rec.Fail = func(m outbox.Message) error {
		if m.ID == msgs[0].ID && rejecting.Load() {
			return outbox.Permanent(errors.New("no handler for this event"))
		}
		return nil
	}
	StartRelay(t, h.KeyOrdered, publisher(rec), outbox.Config{BatchSize: 10, Workers: 1, PollInterval: 20 * time.Millisecond,
		ActivePollInterval: 5 * time.Millisecond})
	adm := admin(t, h)
	deadline := time.Now().Add(30 * time.Second)
	for {
		st, err := adm.Stats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if st.Dead == 1 && st.BehindDead == 2 {
			break
		}
		if rec.Distinct() > 0 {
			t.Fatalf("published %d of the key's messages while its first was dead-lettered; want none until it is retried", rec.Distinct())
		}
		if time.Now().After(deadline) {
			t.Fatalf("stats %+v; want the first message dead and the other two behind it", st)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if n := rec.Distinct(); n != 0 {
		t.Fatalf("published %d of the key's messages while its first was dead-lettered; want none until it is retried", n)
	}
	rejecting.Store(false)
	if n, err := adm.RetryDead(ctx, msgs[0].ID); err != nil || n != 1 {
		t.Fatalf("retry dead: %d, %v", n, err)
	}
	rec.WaitFor(t, 30*time.Second, "the key's three messages", func() bool { return rec.Distinct() == 3 })
	for i, id := range rec.Order() {
		if id != msgs[i].ID {
			t.Fatalf("published %v; want the key's messages in the order written, the retried one first", rec.Order())
		}
	}
}
