package outbox

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
)

func TestWriterStampsTheExpiryHeaderFromExpiresAtOrTheTopicsDefault(t *testing.T) {
	t.Parallel()
	w, in := newTestWriter(t, WriterConfig{ExpireAfter: map[string]time.Duration{"quotes": time.Minute}})
	ctx := context.Background()
	at := time.Date(2030, 1, 2, 3, 4, 5, 6, time.FixedZone("x", 3600))
	shared := map[string]string{"x-a": "1"}
	explicit := &Message{Topic: "orders", ExpiresAt: at, Headers: shared}
	byDefault := &Message{Topic: "quotes"}
	never := &Message{Topic: "orders"}
	before := time.Now()
	if err := w.Write(ctx, struct{}{}, explicit, byDefault, never); err != nil {
		t.Fatal(err)
	}
	if got := explicit.Headers[HeaderExpiresAt]; got != "2030-01-02T02:04:05.000000006Z" {
		t.Fatalf("%s = %q; want ExpiresAt in UTC with nanoseconds", HeaderExpiresAt, got)
	}
	if _, ok := shared[HeaderExpiresAt]; ok {
		t.Fatal("the writer added the header to the caller's shared map; want it on the message's own copy")
	}
	got, ok := ExpiresAt(&Message{Headers: byDefault.Headers})
	if !ok || got.Before(before.Add(time.Minute)) || got.After(time.Now().Add(time.Minute)) {
		t.Fatalf("a quotes message expires at %v (%v); want a minute after the write", got, ok)
	}
	if _, ok := never.Headers[HeaderExpiresAt]; ok || never.Headers != nil {
		t.Fatalf("a topic without a default got headers %v; want none", never.Headers)
	}
	if in.inserted != 3 {
		t.Fatalf("inserted %d; want 3", in.inserted)
	}
	// Written again (Transact run again, say), the header it carries now
	// is taken as its expiry, not refused.
	if err := w.Write(ctx, struct{}{}, &Message{Topic: "orders", Headers: explicit.Headers}); err != nil {
		t.Fatalf("a message carrying the header the writer set: %v", err)
	}
}

func TestWriterRefusesAnExpiryItCouldNeverMeetAndABadExpiryHeader(t *testing.T) {
	t.Parallel()
	w, in := newTestWriter(t, WriterConfig{})
	ctx := context.Background()
	at := time.Now().Add(time.Hour)
	err := w.Write(ctx, struct{}{}, &Message{Topic: "t", AvailableAt: at, ExpiresAt: at.Add(-time.Second)})
	requireHeaderError(t, err, "ExpiresAt", at.Add(-time.Second).UTC().Format(time.RFC3339Nano), "not after AvailableAt", "could never be published")
	err = w.Write(ctx, struct{}{}, &Message{Topic: "t", Headers: map[string]string{HeaderExpiresAt: "tomorrow"}})
	requireHeaderError(t, err, "Headers["+HeaderExpiresAt+"]", "tomorrow", "RFC 3339", "Message.ExpiresAt")
	if in.inserted != 0 {
		t.Fatalf("inserted %d; want none", in.inserted)
	}
	_, err = NewWriter[struct{}](&countingInserter{}, WriterConfig{ExpireAfter: map[string]time.Duration{"quotes": 0}})
	var ce *ConfigError
	if !errors.As(err, &ce) || ce.Field != `WriterConfig.ExpireAfter["quotes"]` {
		t.Fatalf("NewWriter with a zero default expiry: %v; want a ConfigError naming WriterConfig.ExpireAfter[\"quotes\"]", err)
	}
}

// orderPublisher publishes what it is given, in the order given, waiting
// in its first call until the time in wait has passed: a slow first wave.
type orderPublisher struct {
	got  []Message
	wait time.Time
}

func (p *orderPublisher) Publish(_ context.Context, msgs []Message) []error {
	if len(p.got) == 0 {
		for time.Now().Before(p.wait) {
			time.Sleep(time.Until(p.wait))
		}
	}
	p.got = append(p.got, msgs...)
	return make([]error, len(msgs))
}
func (p *orderPublisher) Close() error { return nil }

func TestAMessageThatExpiresWhileEarlierWavesOfItsKeyGoOutIsDeadAndHoldsTheRest(t *testing.T) {
	t.Parallel()
	expiry := time.Now().Add(50 * time.Millisecond)
	pub := &orderPublisher{wait: expiry}
	r, err := NewRelay(noStore{}, pub, Config{})
	if err != nil {
		t.Fatal(err)
	}
	first := Message{ID: uuid.New(), Topic: "t", Key: "k"}
	expiring := Message{ID: uuid.New(), Topic: "t", Key: "k", Headers: map[string]string{HeaderExpiresAt: expiry.UTC().Format(time.RFC3339Nano)}}
	after := Message{ID: uuid.New(), Topic: "t", Key: "k"}
	settle, _, _ := r.publish(context.Background(), uuid.New(), []Message{first, expiring, after}, time.Now(), time.Second)
	if len(pub.got) != 1 || pub.got[0].ID != first.ID {
		t.Fatalf("the publisher got %d messages; want only the first wave's, %s (the second expired while it went out)", len(pub.got), first.ID)
	}
	if len(settle.Published) != 1 || len(settle.Dead) != 1 || settle.Dead[0].ID != expiring.ID || !strings.HasPrefix(settle.Dead[0].Error, "expired at ") {
		t.Fatalf("settlement %+v; want the first published and the second dead as expired", settle)
	}
	if len(settle.Release) != 1 || settle.Release[0] != after.ID {
		t.Fatalf("settlement %+v; want the third handed back untried behind the dead one", settle)
	}
}

// overcountingPublisher returns one result more than it was given messages.
type overcountingPublisher struct{ calls [][]Message }

func (p *overcountingPublisher) Publish(_ context.Context, msgs []Message) []error {
	p.calls = append(p.calls, msgs)
	return make([]error, len(msgs)+1)
}
func (p *overcountingPublisher) Close() error { return nil }

func TestABrokenPublishersResultsAreNeverTakenForMessagesItWasNotGiven(t *testing.T) {
	t.Parallel()
	pub := &overcountingPublisher{}
	r, err := NewRelay(noStore{}, pub, Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	// Waves: A1 and B1 first; the publisher answers 3 results, as many as
	// the whole batch holds, which must not make A2 published.
	a1, a2, b1 := Message{ID: uuid.New(), Topic: "t", Key: "a"}, Message{ID: uuid.New(), Topic: "t", Key: "a"}, Message{ID: uuid.New(), Topic: "t", Key: "b"}
	settle, _, _ := r.publish(context.Background(), uuid.New(), []Message{a1, a2, b1}, time.Now(), time.Second)
	if len(settle.Published) != 0 {
		t.Fatalf("published %v after a publisher answered 3 results for 2 messages; want none taken as published", settle.Published)
	}
	if len(pub.calls) != 1 {
		t.Fatalf("the publisher was called %d times; want once (A2 waits behind the failed A1)", len(pub.calls))
	}
}
