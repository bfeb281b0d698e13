package consume_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/consume"
)

// A poison message of key A fails until the messages of key B that arrive
// behind it (and behind more than a buffer's worth of A's own messages) are
// applied: B must not wait for A's retry budget. Before the fix B waited in
// A's lane, or behind the dispatch loop blocked on A's full lane, until A
// was parked.
func TestAFailingKeyDoesNotHoldBackAnotherKeyArrivingBehindIt(t *testing.T) {
	t.Parallel()
	for _, concurrency := range []int{1, 2} {
		t.Run(fmt.Sprintf("concurrency %d", concurrency), func(t *testing.T) {
			t.Parallel()
			poison := message("A")
			var stream []outbox.Message
			stream = append(stream, poison)
			for range 40 {
				stream = append(stream, message("A"))
			}
			var bs []outbox.Message
			for range 3 {
				bs = append(bs, message("B"))
			}
			stream = append(stream, bs...)

			var (
				mu       sync.Mutex
				applied  = map[string][]uuid.UUID{}
				failures int
			)
			bApplied := make(chan struct{})
			poisonDone := make(chan struct{})
			fn := func(_ context.Context, m outbox.Message) error {
				mu.Lock()
				defer mu.Unlock()
				if m.ID == poison.ID {
					select {
					case <-bApplied:
						return nil // B went through: A may recover
					default:
						failures++
						return errors.New("poison")
					}
				}
				applied[m.Key] = append(applied[m.Key], m.ID)
				if m.Key == "B" && len(applied["B"]) == len(bs) {
					close(bApplied)
				}
				return nil
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			cfg := consume.Config{Consumer: "test", Concurrency: concurrency, MaxDeliver: 2000,
				BackoffBase: time.Millisecond, BackoffMax: time.Millisecond, Logger: slog.New(slog.DiscardHandler)}
			lanes := consume.Start(ctx, cfg, fn)
			var once sync.Once
			settled := func(d *fakeDelivery) {
				if d.m.ID == poison.ID {
					once.Do(func() { close(poisonDone) })
				}
			}
			submitted := make(chan struct{})
			go func() {
				defer close(submitted)
				for _, m := range stream {
					if !lanes.Submit(ctx, &fakeDelivery{m: m, onSettle: settled}) {
						return
					}
				}
			}()
			select {
			case <-bApplied:
			case <-poisonDone:
				mu.Lock()
				defer mu.Unlock()
				t.Fatalf("A's poison message settled after %d failures before B's messages were applied (B applied: %d of %d): A's failures held back key B",
					failures, len(applied["B"]), len(bs))
			case <-time.After(30 * time.Second):
				t.Fatal("timed out waiting for B's messages or the end of A's poison message")
			}
			select {
			case <-poisonDone:
			case <-time.After(30 * time.Second):
				t.Fatal("timed out waiting for A's poison message to succeed once B was applied")
			}
			<-submitted
			lanes.Close()
			mu.Lock()
			defer mu.Unlock()
			if len(applied["A"]) != len(stream)-len(bs)-1 {
				t.Fatalf("applied %d of A's %d messages behind the poison one", len(applied["A"]), len(stream)-len(bs)-1)
			}
			for i, id := range applied["A"] {
				if id != stream[i+1].ID {
					t.Fatalf("A's message %d applied as %s, want %s: A's order broken", i, id, stream[i+1].ID)
				}
			}
		})
	}
}

// A delivery submitted after Close (a broker client's callback still running
// at shutdown) is refused, not sent on the closed queue of ready keys.
func TestASubmitAfterCloseIsRefusedWithoutAPanic(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	l := consume.Start(ctx, consume.Config{Concurrency: 1, MaxHeld: 4, Logger: slog.New(slog.DiscardHandler)}, func(context.Context, outbox.Message) error { return nil })
	cancel()
	l.Close()
	for range 20 {
		if l.Submit(ctx, &fakeDelivery{m: outbox.Message{ID: uuid.New(), Key: "k"}}) {
			t.Fatal("Submit after Close accepted the delivery")
		}
	}
}
