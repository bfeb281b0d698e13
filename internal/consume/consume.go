// Package consume is what the broker consumer adapters (outboxnats,
// outboxamqp, outboxkafka, outboxredis) share: deliveries queued by key, so that one
// key's messages are handled one at a time and in order while different
// keys run concurrently; each message handled until it succeeds, then
// acknowledged; retried in place with a backoff when it fails (its key
// waits, and only its key: the pause holds no worker and the key's queue
// holds what arrives behind it); parked after a number of attempts, on the
// broker or, with a ParkStore, in the consumer's database, from where an
// operator's retry request brings it back (RetryParked).
package consume

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/google/uuid"

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

// Config is the part of a consumer's configuration the lanes use.
type Config struct {
	// Consumer names the consumer in logs and in Parked.
	Consumer string
	// Concurrency is how many messages are handled at once (workers).
	Concurrency int
	// MaxHeld is how many deliveries the lanes hold at most, queued or
	// being handled, whatever their keys; Submit waits while they hold as
	// many. Set it to the broker's window of unacknowledged deliveries
	// (prefetch, MaxAckPending): the broker then never sends more than the
	// lanes hold, and Submit never waits. Default MaxHeldPerWorker ×
	// Concurrency.
	MaxHeld int
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
	// SkipParkedInKeyOrder applies the later messages of a key that has a
	// parked message as they come, instead of parking them as waiting
	// behind it (which Parked, an outbox.KeyParkStore, does by default):
	// the key goes on, and the parked message, if retried, is applied
	// after them. Each message of such a key applied meanwhile is counted
	// on the parked one (ParkedMessage.Overtaken).
	SkipParkedInKeyOrder bool
}

// keyStore returns cfg.Parked as a KeyParkStore, or nil if it is none.
func (cfg Config) keyStore() outbox.KeyParkStore {
	ks, _ := cfg.Parked.(outbox.KeyParkStore)
	return ks
}

// attempt1 runs fn once, told to the observer.
func attempt1(ctx context.Context, cfg Config, m outbox.Message, fn func(context.Context, outbox.Message) error) error {
	ctx = outbox.WithConsumerName(ctx, cfg.Consumer)
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
	h := newHandling(cfg, d)
	for {
		wait, again := h.try(ctx, fn)
		if !again || !sleep(ctx, wait) {
			return
		}
	}
}

// handling is a delivery on its way through its attempts.
type handling struct {
	attempt  int // the attempt try runs next, counting the broker's earlier ones
	cfg      Config
	d        Delivery
	failures int  // failed attempts in this process, which set the pause
	free     bool // its key was found holding no parked message (or need not be looked at)
	log      *slog.Logger
	m        outbox.Message
}

func newHandling(cfg Config, d Delivery) *handling {
	m := d.Message()
	_, retry := d.(*retried)
	// A retried message is its key's head, or the next in line: it holds
	// its key, it is not held by it.
	free := retry || m.Key == "" || cfg.SkipParkedInKeyOrder || cfg.keyStore() == nil
	return &handling{attempt: max(d.Attempt(), 1), cfg: cfg, d: d, m: m, free: free,
		log: cfg.Logger.With(slog.String("consumer", cfg.Consumer), slog.String("message_id", m.ID.String()), slog.String("topic", m.Topic))}
}

// held parks h's message as waiting if its key has a parked message, and
// then acknowledges it. It reports whether the message was held; on an
// error (the database's) it returns the pause to take before looking again.
func (h *handling) held(ctx context.Context) (held bool, wait time.Duration, err error) {
	head, err := h.cfg.keyStore().ParkBehind(ctx, h.cfg.Consumer, h.m)
	if err != nil {
		h.failures++
		return false, backoff.Cap(h.cfg.BackoffBase, h.cfg.BackoffMax, h.failures), err
	}
	if head == uuid.Nil {
		h.free = true
		return false, 0, nil
	}
	if head != h.m.ID {
		h.log.Info("outbox consumer: message parked as waiting behind a parked message of its key; it is applied after that one is retried or discarded",
			slog.String("key", h.m.Key), slog.String("behind", head.String()))
	}
	if err := h.d.Ack(ctx); err != nil && ctx.Err() == nil {
		h.log.Warn("outbox consumer: acknowledgement of a message parked behind its key failed; the message will come again", slog.Any("error", err))
	}
	return true, 0, nil
}

// try runs one attempt. When it failed and may be tried again it returns
// again and the pause to take first (jittered), having told the broker the
// message is still being worked on; otherwise d was acknowledged or parked,
// or ctx ended with d unacknowledged. The pause is the caller's to take, so
// that the lanes spend it without holding a worker.
func (h *handling) try(ctx context.Context, fn func(context.Context, outbox.Message) error) (wait time.Duration, again bool) {
	if !h.free {
		held, wait, err := h.held(ctx)
		switch {
		case held || ctx.Err() != nil:
			return 0, false
		case err != nil:
			h.log.Warn("outbox consumer: looking for parked messages of the message's key failed; trying again", slog.Duration("retry_in", wait), slog.Any("error", err))
			h.d.Working()
			return wait/2 + rand.N(wait/2+1), true
		}
	}
	err := attempt1(ctx, h.cfg, h.m, fn)
	if err == nil {
		if err := h.d.Ack(ctx); err != nil && ctx.Err() == nil {
			if _, retry := h.d.(*retried); retry {
				h.log.Warn("outbox consumer: unparking a retried message failed; it is handed back and retried again, and the inbox skips it if it was applied", slog.Any("error", err))
			} else {
				h.log.Warn("outbox consumer: acknowledgement failed; the message will come again and the inbox skip it", slog.Any("error", err))
			}
		}
		h.overtook(ctx)
		return 0, false
	}
	if ctx.Err() != nil {
		return 0, false
	}
	if outbox.IsPermanent(err) {
		park(ctx, h.cfg, h.log, h.d, h.m, h.attempt, err)
		return 0, false
	}
	h.failures++
	pause := backoff.Cap(h.cfg.BackoffBase, h.cfg.BackoffMax, h.failures)
	if outbox.IsUnavailable(err) || outbox.IsHeldBack(err) {
		// The handler's destination is down, not the message wrong:
		// waiting counts no attempt, so an outage of any length parks
		// nothing. The pause the error asks for, if any, comes first.
		wait := pause/2 + rand.N(pause/2+1)
		if after, ok := outbox.RetryAfterOf(err); ok {
			// At most BackoffMax: Working is told once per wait, and a
			// longer wait than the broker's ack timeout (NATS AckWait)
			// would make it deliver the message again meanwhile.
			wait = max(wait, min(after, h.cfg.BackoffMax))
		}
		h.log.Warn("outbox consumer: the handler's destination is unavailable; retrying, counting no attempt", slog.Int("attempt", h.attempt), slog.Duration("retry_in", wait), slog.Any("error", err))
		h.d.Working()
		return wait, true
	}
	if h.attempt >= h.cfg.MaxDeliver {
		park(ctx, h.cfg, h.log, h.d, h.m, h.attempt, err)
		return 0, false
	}
	h.log.Warn("outbox consumer: handler failed; retrying", slog.Int("attempt", h.attempt), slog.Duration("retry_in", pause), slog.Any("error", err))
	h.d.Working()
	h.attempt++
	// Equal jitter, as backoff.NewJittered: keys that failed together do
	// not come back together.
	return pause/2 + rand.N(pause/2+1), true
}

// overtook counts h's message, just applied, on the parked messages of its
// key, when the consumer skips them in key order: a retry of one of them
// then knows it comes after later messages of its key.
func (h *handling) overtook(ctx context.Context) {
	ks := h.cfg.keyStore()
	if !h.cfg.SkipParkedInKeyOrder || ks == nil || h.m.Key == "" {
		return
	}
	if _, retry := h.d.(*retried); retry {
		return
	}
	if err := ks.CountOvertaken(ctx, h.cfg.Consumer, h.m.Key); err != nil && ctx.Err() == nil {
		h.log.Warn("outbox consumer: counting the message on the parked messages of its key failed; a retry of them will not know it came after this one",
			slog.String("key", h.m.Key), slog.Any("error", err))
	}
}

// sleep waits for d, or less if ctx ends first; it reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// RetryCommand is the CLI command that asks consumer's running processes to
// retry its parked message id, for the logs to name.
func RetryCommand(consumer string, id uuid.UUID) string {
	return fmt.Sprintf("outbox inbox parked retry --consumer %s %s", shellQuote(consumer), id)
}

// shellQuote quotes s for a POSIX shell when it holds anything but
// letters, digits and -_.:/@ (a consumer name is the user's).
func shellQuote(s string) string {
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_.:/@", r)) {
			return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
		}
	}
	return s
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
			log.Error("outbox consumer: recording the new failure of a retried message failed; it is handed back and retried again", slog.Any("error", err))
		}
		return
	}
	if cfg.Parked == nil {
		log.Error("outbox consumer: message parked: the handler failed; fix the cause and send it again", slog.Int("attempts", attempts), slog.Any("error", cause))
		if m.Key != "" {
			log.Warn("outbox consumer: a message parked on the broker does not hold its key: the later messages of the key are applied before it; set Parked (an inbox table) to keep key order",
				slog.String("key", m.Key))
		}
		if err := d.Park(ctx, attempts, cause); err != nil {
			log.Error("outbox consumer: parking failed; the broker will deliver the message again", slog.Any("error", err))
		}
		return
	}
	log.Error("outbox consumer: message parked in the consumer's database: the handler failed; fix the cause, then retry it with the command in retry_with",
		slog.Int("attempts", attempts), slog.Any("error", cause), slog.String("retry_with", RetryCommand(cfg.Consumer, m.ID)))
	if m.Key != "" && !cfg.SkipParkedInKeyOrder && cfg.keyStore() == nil {
		log.Warn("outbox consumer: Parked cannot hold a key (it is no outbox.KeyParkStore): the later messages of the key are applied before the parked one",
			slog.String("key", m.Key))
	}
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
