package relaytest

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/outboxdriver"
)

// testExpiredMessagesAreNotPublished writes messages whose expiry passes
// before a relay starts, beside others of the same keys, and checks that the
// expired ones are dead-lettered as expired and never published, and what
// follows one of its key: published without key order, held behind it in
// key order.
func testExpiredMessagesAreNotPublished(t *testing.T, h Harness, store outboxdriver.Store, keyOrder bool) {
	ctx := context.Background()
	a := admin(t, h)
	expiry := time.Now().Add(100 * time.Millisecond)
	expired := &outbox.Message{Topic: "expiring", Key: "a", Payload: []byte("a1"), ExpiresAt: expiry}
	behind := &outbox.Message{Topic: "expiring", Key: "a", Payload: []byte("a2")}
	keyless := &outbox.Message{Topic: "expiring", Payload: []byte("x"), ExpiresAt: expiry}
	fresh := &outbox.Message{Topic: "expiring", Key: "b", Payload: []byte("b1"), ExpiresAt: time.Now().Add(time.Hour)}
	if err := h.Write(ctx, true, expired, behind, keyless, fresh); err != nil {
		t.Fatal(err)
	}
	if got, ok := outbox.ExpiresAt(&outbox.Message{Headers: expired.Headers}); !ok || !got.Equal(expiry) {
		t.Fatalf("the written message's %s header gives %v, %v; want %v", outbox.HeaderExpiresAt, got, ok, expiry)
	}
	for time.Now().Before(expiry) { // the expiry must pass before any claim
		time.Sleep(time.Until(expiry))
	}
	rec := NewRecorder()
	StartRelay(t, store, rec, outbox.Config{})
	want := []uuid.UUID{fresh.ID}
	if !keyOrder {
		want = append(want, behind.ID)
	}
	rec.WaitFor(t, 10*time.Second, "the unexpired messages published and the expired ones dead", func() bool {
		for _, id := range want {
			if rec.Count(id) == 0 {
				return false
			}
		}
		st, err := a.Stats(ctx)
		return err == nil && st.Dead == 2
	})
	for _, m := range []*outbox.Message{expired, keyless} {
		if rec.Count(m.ID) != 0 {
			t.Fatalf("expired message %s was published", m.ID)
		}
		got, err := a.Get(ctx, m.ID)
		if err != nil || got.Status != outbox.StatusDead || !strings.HasPrefix(got.LastError, "expired at ") || got.Attempts != 1 {
			t.Fatalf("expired message %s: %+v, %v; want dead with last error \"expired at ...\" after 1 attempt", m.ID, got, err)
		}
	}
	if keyOrder {
		// One more claim could only take what is due; the held message
		// must still be pending and unpublished.
		got, err := a.Get(ctx, behind.ID)
		if err != nil || got.Status != outbox.StatusPending || got.Attempts != 0 || rec.Count(behind.ID) != 0 {
			t.Fatalf("in key order the message behind an expired one: %+v, %v, published %d times; want pending, untried, unpublished", got, err, rec.Count(behind.ID))
		}
	}
	if !errors.Is(outbox.Permanent(outbox.ErrExpired), outbox.ErrExpired) {
		t.Fatal("outbox.ErrExpired is not in a permanent error's chain")
	}
}
