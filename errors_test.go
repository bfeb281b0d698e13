package outbox

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/go-outbox/outbox/outboxdriver"
)

func TestRetryAfterCarriesTheDelayThroughWrapping(t *testing.T) {
	t.Parallel()
	base := errors.New("429 Too Many Requests")
	err := fmt.Errorf("message x: %w", RetryAfter(base, 2*time.Second))
	if d, ok := RetryAfterOf(err); !ok || d != 2*time.Second {
		t.Fatalf("RetryAfterOf(%v) = %v, %v; want 2s, true", err, d, ok)
	}
	if !errors.Is(err, base) || err.Error() != "message x: 429 Too Many Requests" || IsPermanent(err) {
		t.Fatalf("RetryAfter changed the error: %q, wraps base %v, permanent %v", err, errors.Is(err, base), IsPermanent(err))
	}
	if !IsPermanent(RetryAfter(Permanent(base), time.Second)) {
		t.Fatal("RetryAfter of a permanent error must stay permanent")
	}
	if RetryAfter(nil, time.Second) != nil || RetryAfter(base, 0) != base || RetryAfter(base, -time.Second) != base {
		t.Fatal("RetryAfter(nil, d) must be nil and RetryAfter(err, d <= 0) must be err")
	}
	if d, ok := RetryAfterOf(base); ok || d != 0 {
		t.Fatalf("RetryAfterOf(plain error) = %v, %v; want 0, false", d, ok)
	}
}

// noStore is a Store the relay's publish step never needs while not aborted.
type noStore struct{ outboxdriver.Store }

func (noStore) Name() string { return "test.no_store" }

func TestRelayWaitsAtLeastTheDelayAPublisherAskedFor(t *testing.T) {
	t.Parallel()
	throttled, plain := uuid.New(), uuid.New()
	pub := PublisherFunc(func(ctx context.Context, batch []Message) []error {
		return []error{RetryAfter(errors.New("throttled"), time.Hour), errors.New("failed")}
	})
	// Backoff caps of a millisecond: only the publisher's delay can be long.
	r, err := NewRelay(noStore{}, pub, Config{BackoffBase: time.Millisecond, BackoffMax: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	settle, _, _ := r.publish(context.Background(), uuid.New(), []Message{{ID: throttled, Topic: "t"}, {ID: plain, Topic: "t"}}, time.Now(), time.Second)
	if len(settle.Retry) != 2 || len(settle.Dead) != 0 || len(settle.Published) != 0 {
		t.Fatalf("settlement %+v, want two retries", settle)
	}
	delays := map[uuid.UUID]time.Duration{}
	for _, rt := range settle.Retry {
		delays[rt.ID] = rt.Delay
	}
	if delays[throttled] != time.Hour {
		t.Errorf("message %s asked for a retry after 1h, scheduled after %v", throttled, delays[throttled])
	}
	if delays[plain] > time.Millisecond {
		t.Errorf("message %s with a plain error scheduled after %v, want the backoff (at most 1ms)", plain, delays[plain])
	}
}
