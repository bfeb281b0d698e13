package outboxevents

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"time"

	"github.com/go-outbox/outbox"
)

// Run is one run of a handler on one event, as a Middleware sees it.
type Run struct {
	// Handler is the handler's name (the consumer of its inbox record).
	Handler string
	// Type is the event's registered name.
	Type string
	// Event is the decoded event, of the handler's type E.
	Event any
	// Message is the message that carried the event.
	Message outbox.Message
}

// Middleware wraps every run of every handler of a Dispatcher, on the relay
// (Publish) and from a broker (Deliver) alike. next runs the handler; the
// middleware may change the context it gets, or the error it returns (to
// classify it, see Classify), or not call it. It runs inside the handler's
// transaction, after the inbox found the event not applied yet: an event
// applied before reaches no middleware, and an error it returns rolls the
// handler's changes back. A middleware that returns nil, whether it called
// next or not, commits the inbox record: the event counts as applied by the
// handler (and, where the transaction still commits, so do the handler's
// partial writes), so never return nil for a failed next. Give middlewares
// to NewDispatcher with Use.
type Middleware func(ctx context.Context, run Run, next func(ctx context.Context) error) error

// Use makes the dispatcher run every handler through mw, the first given
// the outermost: Use(Log(logger), Recover(), Timeout(time.Minute)) logs
// what Recover and Timeout return.
func Use(mw ...Middleware) DispatcherOption {
	return func(o *dispatcherOptions) {
		for _, m := range mw {
			if m != nil {
				o.middleware = append(o.middleware, m)
			}
		}
	}
}

// chain returns apply wrapped by mws, the first outermost.
func chain(mws []Middleware, run Run, apply func(ctx context.Context) error) func(ctx context.Context) error {
	next := apply
	for i := len(mws) - 1; i >= 0; i-- {
		mw, inner := mws[i], next
		next = func(ctx context.Context) error { return mw(ctx, run, inner) }
	}
	return next
}

// ErrPanicked marks the error Recover makes of a handler's panic.
var ErrPanicked = errors.New("outboxevents: handler panicked")

// Recover turns a panic of a handler into an error wrapping ErrPanicked,
// with the panic's value and stack: the handler's transaction is rolled
// back and the event retried (an ordinary failure: after the attempts it is
// dead-lettered, or parked by a broker consumer), instead of the process
// crashing. Wrap the error with outbox.Permanent in a later Classify to park
// a panicking handler's share at once.
func Recover() Middleware {
	return func(ctx context.Context, run Run, next func(ctx context.Context) error) (err error) {
		defer func() {
			if v := recover(); v != nil {
				err = fmt.Errorf("%w: handler %q on event %s (%s): %v\n%s", ErrPanicked, run.Handler, run.Message.ID, run.Type, v, debug.Stack())
			}
		}()
		return next(ctx)
	}
}

// Timeout gives each run of a handler at most d: its context ends then, and
// a handler that returns because of it fails with an error wrapping
// context.DeadlineExceeded, an ordinary failure (the event is retried). A
// handler that ignores its context is not stopped. d must be positive.
func Timeout(d time.Duration) Middleware {
	if d <= 0 {
		panic(fmt.Sprintf("outboxevents.Timeout(%v): the timeout must be positive", d))
	}
	return func(parent context.Context, run Run, next func(ctx context.Context) error) error {
		ctx, cancel := context.WithTimeoutCause(parent, d, fmt.Errorf("outboxevents: handler %q ran longer than its timeout, %v: %w", run.Handler, d, context.DeadlineExceeded))
		defer cancel()
		err := next(ctx)
		if err != nil && ctx.Err() != nil && parent.Err() == nil {
			// The timeout ended it, not a shutdown: say so.
			return fmt.Errorf("%w: %w", context.Cause(ctx), err)
		}
		return err
	}
}

// Classify passes each error a handler returns through fn, which returns it
// marked as it should count: outbox.Permanent (parked, or dead-lettered, at
// once), outbox.Unavailable (the handler's destination is down: no attempt
// counts) or as it is (retried). fn is not called for a success, and must
// not return nil for an error: that commits the event as applied.
func Classify(fn func(run Run, err error) error) Middleware {
	return func(ctx context.Context, run Run, next func(ctx context.Context) error) error {
		if err := next(ctx); err != nil {
			return fn(run, err)
		}
		return nil
	}
}

// PermanentOn marks as permanent (outbox.Permanent) each handler error that
// matches one of targets (errors.Is): retrying cannot help them, so the
// share is parked or dead-lettered at once instead of after its attempts.
func PermanentOn(targets ...error) Middleware {
	return Classify(func(_ Run, err error) error {
		for _, t := range targets {
			if errors.Is(err, t) {
				return outbox.Permanent(err)
			}
		}
		return err
	})
}

// Log logs each run of a handler on logger: at DEBUG level when it applied
// the event, at WARN level with the error when it failed, with the handler,
// the event's type, id and key, and how long it took.
func Log(logger *slog.Logger) Middleware {
	if logger == nil {
		logger = slog.Default()
	}
	return func(ctx context.Context, run Run, next func(ctx context.Context) error) error {
		start := time.Now()
		err := next(ctx)
		attrs := []slog.Attr{
			slog.String("handler", run.Handler), slog.String("type", run.Type),
			slog.String("event_id", run.Message.ID.String()), slog.String("key", run.Message.Key),
			slog.Duration("took", time.Since(start)),
		}
		if err != nil {
			attrs = append(attrs, slog.Any("error", err))
			logger.LogAttrs(ctx, slog.LevelWarn, "outboxevents: handler failed", attrs...)
			return err
		}
		logger.LogAttrs(ctx, slog.LevelDebug, "outboxevents: handler applied the event", attrs...)
		return nil
	}
}
