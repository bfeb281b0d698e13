package outboxevents

import (
	"context"
	"fmt"

	"github.com/google/uuid"

	"github.com/go-outbox/outbox"
)

// DispatcherOption configures NewDispatcher.
type DispatcherOption func(*dispatcherOptions)

type dispatcherOptions struct {
	skip bool
}

// SkipParkedInKeyOrder makes each handler apply the later events of a key
// for which it has a parked share as they come, instead of parking them as
// waiting behind it (the default, which keeps the key's order for that
// handler): the key goes on, and the parked share, if retried, is applied
// after them. Each event of such a key the handler applies meanwhile is
// counted on its parked shares of the key (outbox.ParkedMessage.Overtaken),
// and `outbox inbox parked retry` asks for --force to retry them. It means
// what the consumer adapters' SkipParkedInKeyOrder means.
func SkipParkedInKeyOrder() DispatcherOption {
	return func(o *dispatcherOptions) { o.skip = true }
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

// overtook counts m, just applied (or found applied) by h, on h's parked
// shares of m's key when the dispatcher skips them. A failure fails the
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
