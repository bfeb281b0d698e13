package consume

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/go-outbox/outbox"
)

// retried is a parked message brought back by RetryParked: acknowledging it
// unparks it, parking it parks it again.
type retried struct {
	cfg Config
	m   outbox.Message
}

func (r *retried) Message() outbox.Message { return r.m }
func (r *retried) Attempt() int            { return 1 }
func (r *retried) Working()                {}

func (r *retried) Ack(ctx context.Context) error {
	return r.cfg.Parked.Unpark(ctx, r.cfg.Consumer, r.m.ID)
}

func (r *retried) Park(ctx context.Context, attempts int, cause error) error {
	return r.cfg.Parked.Park(ctx, r.cfg.Consumer, r.m, attempts, cause.Error())
}

// RetryParked runs until ctx ends: every cfg.RetryPoll it takes the parked
// messages of cfg.Consumer whose retry an operator requested (`outbox inbox
// parked retry`) and handles each with fn as Handle does, with a new round
// of attempts: a success unparks it, a failure parks it again with the new
// error. Retried messages are handled one at a time, outside the lanes: they
// left their key's order when they were parked. It does nothing if
// cfg.Parked is nil.
func RetryParked(ctx context.Context, cfg Config, fn func(context.Context, outbox.Message) error) {
	if cfg.Parked == nil {
		return
	}
	poll := cfg.RetryPoll
	if poll <= 0 {
		poll = RetryPollDefault
	}
	log := cfg.Logger.With(slog.String("consumer", cfg.Consumer))
	tick := time.NewTicker(poll)
	defer tick.Stop()
	for {
		for ctx.Err() == nil {
			msgs, err := cfg.Parked.TakeRetries(ctx, cfg.Consumer, retryBatch)
			if err != nil {
				if ctx.Err() == nil {
					log.Warn("outbox consumer: reading the retries of parked messages failed; trying again at the next poll", slog.Any("error", err))
				}
				break
			}
			for _, m := range msgs {
				log.Info("outbox consumer: retrying a parked message, as requested", slog.String("message_id", m.ID.String()), slog.String("topic", m.Topic))
				Handle(ctx, cfg, &retried{cfg: cfg, m: m}, fn)
			}
			if len(msgs) < retryBatch {
				break
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// StartRetrying runs RetryParked in a goroutine, if cfg.Parked is set; stop
// ends it and waits for it (a message it was handling stays parked, its
// request taken: retry it again).
func StartRetrying(ctx context.Context, cfg Config, fn func(context.Context, outbox.Message) error) (stop func()) {
	if cfg.Parked == nil {
		return func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	var done sync.WaitGroup
	done.Go(func() { RetryParked(ctx, cfg, fn) })
	return func() {
		cancel()
		done.Wait()
	}
}
