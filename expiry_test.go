package outbox

import (
	"context"
	"errors"
	"testing"
	"time"
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
