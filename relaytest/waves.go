package relaytest

import (
	"context"
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
