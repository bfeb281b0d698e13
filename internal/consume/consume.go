// Package consume is what the broker consumer adapters (outboxnats,
// outboxamqp) share: deliveries spread over lanes by key, so that one key's
// messages are handled one at a time and in order while different keys run
// concurrently; each message handled until it succeeds, then acknowledged;
// retried in place with a backoff when it fails (its key waits); parked
// after a number of attempts.
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
	// Park gives up on it: the broker keeps it aside (a dead-letter
	// exchange, a terminated JetStream message) or drops it.
	Park(reason string) error
	// Working tells the broker the message is still being handled, so a
	// retry's wait does not make it deliver the message again.
	Working()
}

// Config is the part of a consumer's configuration the lanes use.
type Config struct {
	// Consumer names the consumer in logs.
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
// run out (then parks it) or ctx ends (then leaves it unacknowledged, for
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
			log.Error("outbox consumer: message parked: the handler failed; fix the cause and send it again", slog.Int("attempts", attempt), slog.Any("error", err))
			if err := d.Park(fmt.Sprintf("parked after %d attempt(s): %v", attempt, err)); err != nil {
				log.Error("outbox consumer: parking failed; the broker will deliver the message again", slog.Any("error", err))
			}
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
