package outboxevents

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"

	"github.com/go-outbox/outbox"
)

// DispatcherOption configures NewDispatcher.
type DispatcherOption func(*dispatcherOptions)

type dispatcherOptions struct {
	skip       bool
	middleware []Middleware
}

// SkipParkedInKeyOrder makes each handler apply the later events of a key
// for which it has a parked share as they come, instead of parking them as
// waiting behind it (the default, which keeps the key's order for that
// handler): the key goes on, and the parked share, if retried, is applied
// after them. Each event of such a key the handler applies meanwhile is
// counted on its parked shares of the key (outbox.ParkedMessage.Overtaken),
// and `outbox inbox parked retry` asks for --force to retry them. The
// handler is still not run on an event whose share is parked (only
// RetryParked runs it), so a parked share never counts its own event. Each
// run costs a look-up of the handler's parked share of the event. It means
// what the consumer adapters' SkipParkedInKeyOrder means.
func SkipParkedInKeyOrder() DispatcherOption {
	return func(o *dispatcherOptions) { o.skip = true }
}

// parkedShares is an inbox table that finds one parked share by its
// handler and event (the tables' GetParked, which `outbox inbox parked
// show` uses): how the dispatcher learns that a handler's share of an event
// the relay hands again is parked, when no key tells it.
type parkedShares interface {
	GetParked(ctx context.Context, consumer string, id uuid.UUID) (outbox.ParkedMessage, error)
}

// leftToRetryParked reports whether h must not run on m because only
// RetryParked may: h's share of m is parked already (an earlier delivery
// parked it, and the relay hands m again because another handler failed or
// no attempt counted), or, keeping key order, m has just been parked as
// waiting behind h's parked share of its key. A parked share run here would
// stay parked though applied, and with SkipParkedInKeyOrder its success
// would be counted on its own row as overtaking it.
func (d *Dispatcher[TTx]) leftToRetryParked(ctx context.Context, h *handler[TTx], m outbox.Message) (bool, error) {
	if d.keys != nil && !d.skip && m.Key != "" {
		return d.held(ctx, h, m)
	}
	return d.parkedShare(ctx, h, m)
}

// held parks h's share of m as waiting when h has a parked share of m's key,
// and reports whether m is held: the handler is not run on it now. A share
// already parked (the relay retried the event for another handler) is held
// too: only RetryParked runs it, as the key's head.
func (d *Dispatcher[TTx]) held(ctx context.Context, h *handler[TTx], m outbox.Message) (bool, error) {
	if d.keys == nil || d.skip || m.Key == "" {
		return false, nil
	}
	head, err := d.keys.ParkBehind(ctx, h.name, m)
	if err != nil {
		return false, fmt.Errorf("looking for its parked shares of key %q failed: %w", m.Key, err)
	}
	return head != uuid.Nil, nil
}

// parkedShare reports whether h's share of m is parked, where no key holds
// it: m has no key, or the dispatcher skips parked shares in key order.
func (d *Dispatcher[TTx]) parkedShare(ctx context.Context, h *handler[TTx], m outbox.Message) (bool, error) {
	if d.shares == nil {
		return false, nil
	}
	_, err := d.shares.GetParked(ctx, h.name, m.ID)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, outbox.ErrNotFound):
		return false, nil
	}
	return false, fmt.Errorf("looking for its parked share of the event failed: %w", err)
}

// overtook counts m, just applied (or found applied) by h, on h's parked
// shares of m's key when the dispatcher skips them. h's own share of m is
// never among them: leftToRetryParked kept h from running on m if it was
// parked. A failure fails the
// event for a retry, which counts again: a share retried after its
// successors without --force would break the key's order unannounced, an
// extra count only overstates it.
func (d *Dispatcher[TTx]) overtook(ctx context.Context, h *handler[TTx], m outbox.Message) error {
	if d.keys == nil || !d.skip || m.Key == "" {
		return nil
	}
	if err := d.keys.CountOvertaken(ctx, h.name, m.Key); err != nil {
		return fmt.Errorf("applied, but counting it on the handler's parked shares of key %q failed: %w", m.Key, err)
	}
	return nil
}
