// Package publishertest is the conformance suite every outbox.Publisher runs
// against its real broker (or a protocol-level fake such as kfake): a batch
// published and read back with payload, key and headers intact; an
// unreachable broker gives retryable outcomes and nothing counted as
// published; per-message outcomes in a mixed batch; context cancellation;
// clean closing. EndToEnd adds the whole path: messages written in database
// transactions, relayed, and consumed from the broker.
package publishertest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"strconv"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/outboxdriver"
)

// Received is a message as a consumer read it from the broker.
type Received struct {
	// ID is the outbox message id the publisher attached (header or
	// property), as text.
	ID      string
	Topic   string
	Key     string
	Payload []byte
	// Headers holds the application headers (transport headers the
	// publisher adds, such as the id, may be present too).
	Headers map[string]string
}

// Harness connects the suite to one publisher and its broker. Every call of
// the factory given to Run must return a harness with a fresh destination
// (topic, queue, stream, endpoint) so subtests do not see each other's
// messages.
type Harness struct {
	// Publisher publishes to a live broker.
	Publisher outbox.Publisher
	// Topic is a message topic the publisher routes to the harness's
	// destination.
	Topic string
	// Receive returns the next n messages the destination received, waiting
	// up to the context's deadline.
	Receive func(ctx context.Context, n int) ([]Received, error)
	// Unreachable returns a publisher configured like Publisher but pointed
	// at an address where no broker listens.
	Unreachable func(t *testing.T) outbox.Publisher
	// Invalid, if not nil, returns a message the broker rejects for good
	// (too large, unroutable...): the publisher must report a permanent
	// error for it alone.
	Invalid func() outbox.Message
}

// Run runs the suite.
func Run(t *testing.T, newHarness func(t *testing.T) Harness) {
	t.Run("BatchIsPublishedAndReadBackWithPayloadKeyAndHeadersIntact", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t)
		batch := Messages(h.Topic, 25)
		requireAllOK(t, h.Publisher.Publish(timeout(t, 30*time.Second), batch))
		RequireReceived(t, h, batch)
	})
	t.Run("EmptyBatchIsANoOp", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t)
		if errs := h.Publisher.Publish(timeout(t, 10*time.Second), nil); len(errs) != 0 {
			t.Fatalf("Publish(nil) returned %d results, want none", len(errs))
		}
	})
	t.Run("UnreachableBrokerGivesRetryableOutcomes", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t)
		p := h.Unreachable(t)
		batch := Messages(h.Topic, 3)
		start := time.Now()
		errs := p.Publish(timeout(t, 5*time.Second), batch)
		if len(errs) != len(batch) {
			t.Fatalf("got %d results for %d messages", len(errs), len(batch))
		}
		for i, err := range errs {
			if err == nil {
				t.Errorf("message %s reported published by a publisher with no broker", batch[i].ID)
			} else if outbox.IsPermanent(err) {
				t.Errorf("message %s: %v is permanent; an unreachable broker must be retryable", batch[i].ID, err)
			}
		}
		if d := time.Since(start); d > 20*time.Second {
			t.Errorf("Publish to an unreachable broker took %v, ignoring its 5s context", d)
		}
		closeQuietly(t, p)
	})
	t.Run("MixedBatchGetsPerMessageOutcomes", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t)
		if h.Invalid == nil {
			t.Skip("the broker has no message it rejects for good")
		}
		good := Messages(h.Topic, 2)
		batch := []outbox.Message{good[0], h.Invalid(), good[1]}
		errs := h.Publisher.Publish(timeout(t, 30*time.Second), batch)
		if len(errs) != 3 {
			t.Fatalf("got %d results for 3 messages", len(errs))
		}
		if errs[0] != nil || errs[2] != nil {
			t.Fatalf("valid messages failed: %v, %v", errs[0], errs[2])
		}
		if !outbox.IsPermanent(errs[1]) {
			t.Fatalf("invalid message %s: %v, want a permanent error", batch[1].ID, errs[1])
		}
		RequireReceived(t, h, good)
	})
	t.Run("CancelledContextFailsRetryablyAndPromptly", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		batch := Messages(h.Topic, 3)
		start := time.Now()
		errs := h.Publisher.Publish(ctx, batch)
		if len(errs) != len(batch) {
			t.Fatalf("got %d results for %d messages", len(errs), len(batch))
		}
		// The context was over before the call: a publisher that checks it
		// sends nothing, so no broker can have confirmed anything.
		for i, err := range errs {
			switch {
			case err == nil:
				t.Errorf("message %s published with a context cancelled before the call; want a retryable error (the publisher must not send once its context is done)", batch[i].ID)
			case outbox.IsPermanent(err):
				t.Errorf("message %s: %v is permanent; cancellation must be retryable", batch[i].ID, err)
			}
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("Publish with a cancelled context took %v", d)
		}
	})
	t.Run("CloseIsCleanAndIdempotent", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t)
		c := h.Publisher
		requireAllOK(t, h.Publisher.Publish(timeout(t, 30*time.Second), Messages(h.Topic, 1)))
		if err := c.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		if err := c.Close(); err != nil {
			t.Fatalf("second Close: %v, want nil", err)
		}
		errs := h.Publisher.Publish(timeout(t, 5*time.Second), Messages(h.Topic, 1))
		if len(errs) != 1 || errs[0] == nil {
			t.Fatalf("Publish after Close = %v, want an error", errs)
		}
		if !errors.Is(errs[0], outbox.ErrClosed) || outbox.IsPermanent(errs[0]) {
			t.Fatalf("Publish after Close = %v, want a retryable error matching outbox.ErrClosed (another relay publishes the message)", errs[0])
		}
	})
}

// EndToEnd writes messages in committed database transactions (write), runs
// a relay with h.Publisher over store, and checks that the broker received
// every message with its fields intact.
func EndToEnd(t *testing.T, h Harness, store outboxdriver.Store, write func(ctx context.Context, msgs ...*outbox.Message) error) {
	t.Helper()
	ctx := timeout(t, 2*time.Minute)
	batch := Messages(h.Topic, 200)
	relay, err := outbox.NewRelay(store, h.Publisher, outbox.Config{BatchSize: 50, PollInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- relay.Run(runCtx) }()
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("Relay.Run: %v", err)
		}
	}()
	for i := 0; i < len(batch); i += 20 {
		ptrs := make([]*outbox.Message, 0, 20)
		for j := i; j < min(i+20, len(batch)); j++ {
			ptrs = append(ptrs, &batch[j])
		}
		if err := write(ctx, ptrs...); err != nil {
			t.Fatalf("write: %v", err)
		}
	}
	RequireReceived(t, h, batch)
}

// Messages returns n valid messages for topic with ids, keys, binary
// payloads and headers set.
func Messages(topic string, n int) []outbox.Message {
	out := make([]outbox.Message, n)
	for i := range out {
		out[i] = outbox.Message{
			ID:        uuid.Must(uuid.NewV7()),
			Topic:     topic,
			Key:       "key-" + strconv.Itoa(i%5),
			Payload:   fmt.Appendf([]byte{0, 0xff}, `{"n":%d}`, i),
			Headers:   map[string]string{"content-type": "application/json", "x-seq": strconv.Itoa(i)},
			CreatedAt: time.Now().UTC(),
		}
	}
	return out
}

// RequireReceived reads len(want) messages from h and checks each against
// want by id: payload, key and application headers intact, nothing else
// received.
func RequireReceived(t *testing.T, h Harness, want []outbox.Message) {
	t.Helper()
	got, err := h.Receive(timeout(t, 30*time.Second), len(want))
	if err != nil {
		t.Fatalf("receive %d messages: %v", len(want), err)
	}
	byID := map[string]Received{}
	for _, r := range got {
		if _, dup := byID[r.ID]; dup {
			t.Errorf("message %s received twice", r.ID)
		}
		byID[r.ID] = r
	}
	for _, m := range want {
		r, ok := byID[m.ID.String()]
		if !ok {
			t.Errorf("message %s was not received (got %d messages)", m.ID, len(got))
			continue
		}
		if string(r.Payload) != string(m.Payload) {
			t.Errorf("message %s payload %q, want %q", m.ID, r.Payload, m.Payload)
		}
		if r.Key != m.Key {
			t.Errorf("message %s key %q, want %q", m.ID, r.Key, m.Key)
		}
		for k, v := range m.Headers {
			if r.Headers[k] != v {
				t.Errorf("message %s header %q = %q, want %q (received headers %v)", m.ID, k, r.Headers[k], v, maps.Collect(maps.All(r.Headers)))
			}
		}
	}
}

func requireAllOK(t *testing.T, errs []error) {
	t.Helper()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("publish failed: %v", err)
	}
}

func closeQuietly(t *testing.T, p outbox.Publisher) {
	if c, ok := p.(io.Closer); ok {
		if err := c.Close(); err != nil {
			t.Logf("close: %v", err)
		}
	}
}

func timeout(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
