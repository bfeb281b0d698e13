package outboxevents

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/consume"
)

// Defaults of RetryConfig.
const (
	RetryAttemptsDefault = 5
	RetryPollDefault     = consume.RetryPollDefault
)

// Pauses of a handler whose destination is unavailable: the first, doubled
// at each new failure up to the last, as the relay pauses a worker.
const (
	unavailablePauseMin = 100 * time.Millisecond
	unavailablePauseMax = 5 * time.Second
)

// RetryConfig configures Dispatcher.RetryParked. The zero value uses the
// defaults.
type RetryConfig struct {
	// Attempts is how many times a retried share is tried, with a backoff
	// from 100 ms to 5 s, before it is parked again with its new error. A
	// permanent error parks it again at once. A handler whose destination
	// is unavailable (outbox.Unavailable) spends no attempt: the retry
	// waits in place, holding the handler's other requested retries
	// behind it, until the destination is back. Default
	// RetryAttemptsDefault.
	Attempts int
	// Logger receives the retries and their failures. Default
	// slog.Default().
	Logger *slog.Logger
	// Poll is how often the table is asked for requested retries. Default
	// RetryPollDefault.
	Poll time.Duration
}

// RetryParked runs until ctx ends: every cfg.Poll, for each handler added so
// far, it takes the shares of events parked under the handler's name whose
// retry an operator requested (`outbox inbox parked retry --consumer
// <handler name>`), and runs that handler alone on each: a success applies
// it (once: its inbox record is written with it) and removes the parked
// row, a failure parks it again with the new error. After a success, the
// handler's shares of the event's key that waited behind it are applied
// next, in the order they arrived, until one fails (it is parked again: the
// key's new head) or none is left. A share taken by a process that stops
// before it is done stays parked: request its retry again. Run it beside
// the relay, after the handlers are added; processes that run it for the
// same handlers share the requests, one taker each. It returns an error at
// once if the dispatcher's inbox table keeps no parked messages, and nil
// when ctx ends.
func (d *Dispatcher[TTx]) RetryParked(ctx context.Context, cfg RetryConfig) error {
	if d.parked == nil {
		return errors.New("outboxevents: RetryParked: the dispatcher's inbox table keeps no parked messages (it is no outbox.ParkStore); use an outboxpg or outboxsqlite inbox table")
	}
	if cfg.Attempts < 0 || cfg.Poll < 0 {
		return &outbox.ConfigError{Field: "outboxevents.RetryConfig", Value: fmt.Sprintf("Attempts %d, Poll %v", cfg.Attempts, cfg.Poll), Fix: "use positive values, or 0 for the defaults"}
	}
	if cfg.Attempts == 0 {
		cfg.Attempts = RetryAttemptsDefault
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	d.mu.RLock()
	var handlers []*handler[TTx]
	for _, h := range d.byName {
		handlers = append(handlers, h)
	}
	d.mu.RUnlock()
	var running sync.WaitGroup
	for _, h := range handlers {
		running.Go(func() {
			consume.RetryParked(ctx, consume.Config{
				Consumer: h.name, Concurrency: 1, MaxDeliver: cfg.Attempts,
				BackoffBase: unavailablePauseMin, BackoffMax: unavailablePauseMax,
				Logger: cfg.Logger.With(slog.String("outboxevents_handler", h.name)), Parked: d.parked, RetryPoll: cfg.Poll,
				SkipParkedInKeyOrder: d.skip,
			}, func(ctx context.Context, m outbox.Message) error { return d.runOne(ctx, h, m) })
		})
	}
	running.Wait()
	return nil
}

// runOne applies m with h alone, through h's inbox.
func (d *Dispatcher[TTx]) runOne(ctx context.Context, h *handler[TTx], m outbox.Message) error {
	event, name, err := d.reg.Decode(m)
	if errors.Is(err, ErrNewerVersion) {
		return err
	}
	if err != nil {
		return outbox.Permanent(err)
	}
	return d.run(ctx, h, Run{Handler: h.name, Type: name, Event: event, Message: m})
}

// availability is a handler's pause after its destination was found
// unavailable: the handler is not run until the pause ends.
type availability struct {
	mu    sync.Mutex
	pause time.Duration // the last pause; 0 while the destination answers
	until time.Time
}

// left returns how long the pause still lasts at now.
func (a *availability) left(now time.Time) time.Duration {
	a.mu.Lock()
	defer a.mu.Unlock()
	return max(a.until.Sub(now), 0)
}

// down starts a new pause at now, twice the last one, and returns it.
func (a *availability) down(now time.Time) time.Duration {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.pause = min(max(2*a.pause, unavailablePauseMin), unavailablePauseMax)
	a.until = now.Add(a.pause)
	return a.pause
}

// up ends the pauses: the destination answered.
func (a *availability) up() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.pause, a.until = 0, time.Time{}
}
