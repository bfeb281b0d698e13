package outbox

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/go-outbox/outbox/outboxdriver"
)

func TestATopicsTokenBucketLetsABurstThroughAndSpacesTheRest(t *testing.T) {
	t.Parallel()
	b := newTokenBucket(10)
	t0 := time.Now()
	for i := range 10 {
		if w := b.take(t0, 0); w != 0 {
			t.Fatalf("message %d of the burst of 10 waits %v; want it through", i+1, w)
		}
	}
	for queued, want := range []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 300 * time.Millisecond} {
		if w := b.take(t0, queued); w != want {
			t.Fatalf("with %d refused ahead of it, a message waits %v; want %v", queued, w, want)
		}
	}
}

func TestAMessageBehindOneRefusedInItsBatchIsRefusedTooAfterAnotherWorkersRefill(t *testing.T) {
	t.Parallel()
	b := newTokenBucket(10)
	t0 := time.Now()
	for range 10 {
		b.take(t0, 0)
	}
	if w := b.take(t0, 0); w <= 0 {
		t.Fatal("an 11th message in the same instant went through")
	}
	// Another worker's batch, a second later, refills the bucket.
	if w := b.take(t0.Add(time.Second), 0); w != 0 {
		t.Fatalf("the other worker's message waits %v; want it through", w)
	}
	before := b.tokens
	if w := b.take(t0, 1); w <= 0 || b.tokens != before {
		t.Fatalf("the next message of the first batch (one refused ahead of it) waits %v and took %v tokens; want it refused, behind the one refused", w, before-b.tokens)
	}
}

// pausedMailStore is a store whose paused topic is mail, that claims
// without key order.
type pausedMailStore struct{ noStore }

func (pausedMailStore) PauseTopic(context.Context, string, string, string) (int, error) {
	return 0, nil
}
func (pausedMailStore) ResumeTopic(context.Context, string) (int, error) { return 0, nil }
func (pausedMailStore) MoveBackUnpaused(context.Context) (int, error)    { return 0, nil }
func (pausedMailStore) PausedTopics(context.Context) ([]outboxdriver.PausedTopic, error) {
	return nil, nil
}
func (pausedMailStore) PausedTopicNames(context.Context) ([]string, error) {
	return []string{"mail"}, nil
}
func (pausedMailStore) PausedAmong(_ context.Context, topics []string) ([]string, error) {
	return topics, nil
}
func (pausedMailStore) ClaimsInKeyOrder() bool { return false }

func TestWithoutKeyOrderAFailureAfterAPausedMessageOfItsKeyTakesItsOwnBackoff(t *testing.T) {
	t.Parallel()
	pub := PublisherFunc(func(_ context.Context, batch []Message) []error {
		errs := make([]error, len(batch))
		for i := range batch {
			errs[i] = errors.New("broker hiccup")
		}
		return errs
	})
	r, err := NewRelay(pausedMailStore{}, pub, Config{})
	if err != nil {
		t.Fatal(err)
	}
	mail := Message{ID: uuid.New(), Topic: "mail", Key: "k"}
	orders := Message{ID: uuid.New(), Topic: "orders", Key: "k"}
	settle, _, _ := r.publish(t.Context(), uuid.New(), []Message{mail, orders}, time.Now(), time.Second)
	var got *outboxdriver.Retry
	for i := range settle.Retry {
		if settle.Retry[i].ID == orders.ID {
			got = &settle.Retry[i]
		}
	}
	if got == nil || got.Unsent || got.Delay >= outboxdriver.PauseShift {
		t.Fatalf("the failed orders message (topic not paused, no key order) settles as %+v; want a counted retry with its own backoff", got)
	}
}
