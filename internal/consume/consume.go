// Package consume is what the broker consumer adapters (outboxnats,
// outboxamqp, outboxkafka) share: deliveries spread over lanes by key, so
// that one key's messages are handled one at a time and in order while
// different keys run concurrently; each message handled until it succeeds,
// then acknowledged; retried in place with a backoff when it fails (its key
// waits); parked after a number of attempts, on the broker or, with a
// ParkStore, in the consumer's database, from where an operator's retry
// request brings it back (RetryParked).
package consume

import (
	"context"
	"fmt"
	"hash/fnv"
	"log/slog"
	"sync"
	"time"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/backoff"
)

// Delivery is one message as a broker delivered it.
type Delivery interface {
	// Message is the outbox message it carries.
	Message() outbox.Message
	// Attempt is how many times the broker delivered it, this time
	// included (1 when the broker does not say).
	Attempt() int
	// Ack acknowledges it: the broker forgets it.
	Ack(ctx context.Context) error
	// Park gives up on it after attempts failed attempts, the last with
	// cause: the broker keeps it aside (a dead-letter exchange, a
	// terminated JetStream message) or drops it. It is not called when
	// Config.Parked is set: the message goes to the store, then Ack.
	Park(ctx context.Context, attempts int, cause error) error
	// Working tells the broker the message is still being handled, so a
	// retry's wait does not make it deliver the message again.
	Working()
}

// RetryPollDefault is Config.RetryPoll when zero.
const RetryPollDefault = time.Second

// retryBatch is how many requested retries RetryParked takes at a time.
const retryBatch = 100

// Config is the part of a consumer's configuration the lanes use.
type Config struct {
	// Consumer names the consumer in logs and in Parked.
	Consumer string
	// Concurrency is the number of lanes: messages handled at once.
	Concurrency int
	// MaxDeliver is how many attempts a message gets before it is parked.
	MaxDeliver int
	// BackoffBase and BackoffMax bound the pause between two attempts.
	BackoffBase, BackoffMax time.Duration
	// Logger receives parked messages and retries.
	Logger *slog.Logger
	// Observer, if set, is told of every attempt.
	Observer outbox.ConsumeObserver
	// Parked, if set, receives parked messages instead of the broker: a
	// message is written there, then acknowledged. RetryParked brings back
	// those whose retry was requested.
	Parked outbox.ParkStore
	// RetryPoll is how often RetryParked looks for requested retries.
	// Default RetryPollDefault.
	RetryPoll time.Duration
}

// Lanes hands deliveries to fn, one lane per Concurrency.
type Lanes struct {
	cfg     Config
	fn      func(context.Context, outbox.Message) error
	lanes   []chan Delivery
	workers sync.WaitGroup
}

// Start starts the lanes; they handle deliveries with fn until ctx ends
// (then unfinished ones stay unacknowledged: the broker delivers them
// again) or Close.
func Start(ctx context.Context, cfg Config, fn func(context.Context, outbox.Message) error) *Lanes {
	l := &Lanes{cfg: cfg, fn: fn, lanes: make([]chan Delivery, cfg.Concurrency)}
	for i := range l.lanes {
		l.lanes[i] = make(chan Delivery, 16)
		l.workers.Go(func() {
			for d := range l.lanes[i] {
				Handle(ctx, l.cfg, d, l.fn)
			}
		})
	}
	return l
}

// Submit queues d on the lane of its key (of its id when it has none). It
// returns false if ctx ended first.
func (l *Lanes) Submit(ctx context.Context, d Delivery) bool {
	m := d.Message()
	key := m.Key
	if key == "" {
		key = m.ID.String()
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(key))
	select {
	case l.lanes[h.Sum32()%uint32(len(l.lanes))] <- d:
		return true
	case <-ctx.Done():
		return false
	}
}

// Close waits for the queued deliveries to be handled (or dropped, when the
// context of Start ended) and stops the lanes.
func (l *Lanes) Close() {
	for _, lane := range l.lanes {
		close(lane)
	}
	l.workers.Wait()
}

// attempt1 runs fn once, told to the observer.
func attempt1(ctx context.Context, cfg Config, m outbox.Message, fn func(context.Context, outbox.Message) error) error {
	if cfg.Observer == nil {
		return fn(ctx, m)
	}
	ctx, done := cfg.Observer.Consuming(ctx, cfg.Consumer, m)
	err := fn(ctx, m)
	done(err)
	return err
}

// Handle runs fn on d until it succeeds (then acknowledges d), its attempts
// run out or fn returns an outbox.Permanent error (then parks it, in
// cfg.Parked if set) or ctx ends (then leaves it unacknowledged, for
// the broker to deliver again). Consumers that keep order by themselves
// (Kafka partitions) call it directly, one delivery after the other.
func Handle(ctx context.Context, cfg Config, d Delivery, fn func(context.Context, outbox.Message) error) {
	if ctx.Err() != nil {
		return
	}
	m := d.Message()
	log := cfg.Logger.With(slog.String("consumer", cfg.Consumer), slog.String("message_id", m.ID.String()), slog.String("topic", m.Topic))
	attempt := max(d.Attempt(), 1)
	retry := backoff.NewJittered(cfg.BackoffBase, cfg.BackoffMax)
	for {
		err := attempt1(ctx, cfg, m, fn)
		if err == nil {
			if err := d.Ack(ctx); err != nil && ctx.Err() == nil {
				log.Warn("outbox consumer: acknowledgement failed; the message will come again and the inbox skip it", slog.Any("error", err))
			}
			return
		}
		if ctx.Err() != nil {
			return
		}
		if outbox.IsPermanent(err) || attempt >= cfg.MaxDeliver {
			park(ctx, cfg, log, d, m, attempt, err)
			return
		}
		log.Warn("outbox consumer: handler failed; retrying", slog.Int("attempt", attempt), slog.Duration("retry_in", retry.Next()), slog.Any("error", err))
		d.Working()
		if !retry.Sleep(ctx, nil) {
			return
		}
		attempt++
	}
}

// Reason is what a broker keeps as the reason of a message parked after
// attempts, the last failing with cause.
func Reason(attempts int, cause error) string {
	return fmt.Sprintf("parked after %d attempt(s): %v", attempts, cause)
}

// park gives up on d after attempts, the last failing with cause: in
// cfg.Parked if set (then acknowledges it), else on the broker. A retried
// parked message (from RetryParked) is parked in the store again.
func park(ctx context.Context, cfg Config, log *slog.Logger, d Delivery, m outbox.Message, attempts int, cause error) {
	if _, ok := d.(*retried); ok {
		log.Error("outbox consumer: retried message parked again: the handler failed again", slog.Int("attempts", attempts), slog.Any("error", cause))
		if err := d.Park(ctx, attempts, cause); err != nil {
			log.Error("outbox consumer: recording the new failure of a retried message failed; it stays parked with its former error", slog.Any("error", err))
		}
		return
	}
	if cfg.Parked == nil {
		log.Error("outbox consumer: message parked: the handler failed; fix the cause and send it again", slog.Int("attempts", attempts), slog.Any("error", cause))
		if err := d.Park(ctx, attempts, cause); err != nil {
			log.Error("outbox consumer: parking failed; the broker will deliver the message again", slog.Any("error", err))
		}
		return
	}
	log.Error("outbox consumer: message parked in the consumer's database: the handler failed; fix the cause, then retry it with `outbox inbox parked retry`",
		slog.Int("attempts", attempts), slog.Any("error", cause))
	// Until the message is in the store it stays unacknowledged: if the
	// process stops, the broker delivers it again. Its key waits meanwhile,
	// as for a failing handler (which likely shares the database).
	wait := backoff.NewJittered(cfg.BackoffBase, cfg.BackoffMax)
	for {
		err := cfg.Parked.Park(ctx, cfg.Consumer, m, attempts, cause.Error())
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return
		}
		log.Warn("outbox consumer: writing the parked message to the database failed; trying again (it stays unacknowledged meanwhile)",
			slog.Duration("retry_in", wait.Next()), slog.Any("error", err))
		d.Working()
		if !wait.Sleep(ctx, nil) {
			return
		}
	}
	if err := d.Ack(ctx); err != nil && ctx.Err() == nil {
		log.Warn("outbox consumer: acknowledgement of a parked message failed; the message will come again", slog.Any("error", err))
	}
}

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
