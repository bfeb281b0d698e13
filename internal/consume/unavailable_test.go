package consume_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/consume"
)

// A handler whose destination is down says so (outbox.Unavailable, or
// held back with a pause, as outboxevents.Dispatcher.Deliver does): the
// message waits in place for as long as that lasts, and is neither parked
// nor given up on, however many more times than MaxDeliver it is tried.
func TestAnUnavailableDestinationParksNothingHoweverLongItLasts(t *testing.T) {
	for name, down := range map[string]error{
		"unavailable": outbox.Unavailable(errors.New("mail server down")),
		"held back":   outbox.HeldBack(outbox.RetryAfter(errors.New("handler paused"), time.Millisecond)),
	} {
		t.Run(name, func(t *testing.T) {
			const failures = 10
			cfg := consume.Config{Consumer: "billing", Concurrency: 1, MaxDeliver: 2,
				BackoffBase: time.Millisecond, BackoffMax: 2 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
			d := &fakeDelivery{m: message("order-1")}
			calls := 0
			consume.Handle(context.Background(), cfg, d, func(context.Context, outbox.Message) error {
				calls++
				if calls <= failures {
					return down
				}
				return nil
			})
			acked, parked := d.state()
			if !acked || parked || calls != failures+1 {
				t.Fatalf("after %d unavailable answers and MaxDeliver %d: acked %v, parked %v, %d calls; want it applied on call %d, never parked",
					failures, cfg.MaxDeliver, acked, parked, calls, failures+1)
			}
			if d.working != failures {
				t.Fatalf("the broker was told %d times the message is still worked on; want %d, once per wait", d.working, failures)
			}
		})
	}
}

// An ordinary failure still counts: MaxDeliver attempts, then parked.
func TestAnOrdinaryFailureIsParkedAfterMaxDeliverAttempts(t *testing.T) {
	cfg := consume.Config{Consumer: "billing", Concurrency: 1, MaxDeliver: 3,
		BackoffBase: time.Millisecond, BackoffMax: time.Millisecond, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	d := &fakeDelivery{m: message("order-1")}
	calls := 0
	consume.Handle(context.Background(), cfg, d, func(context.Context, outbox.Message) error {
		calls++
		return errors.New("bug")
	})
	if acked, parked := d.state(); acked || !parked || calls != 3 {
		t.Fatalf("acked %v, parked %v after %d calls; want parked after 3", acked, parked, calls)
	}
}
