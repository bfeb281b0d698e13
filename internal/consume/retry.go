package consume

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/backoff"
)

// retried is a parked message brought back by RetryParked: acknowledging it
// unparks it, parking it parks it again.
type retried struct {
	cfg      Config
	log      *slog.Logger
	m        outbox.Message
	taken    time.Time // the store's mark of this process's take, which the end of the retry names
	settled  bool      // acknowledged or parked again: the handler is done with it
	unparked bool      // acknowledged: applied and unparked
}

// retryEnd is a ParkStore that marks the messages it hands out for a retry
// as taken, and whose end of a retry acts only on the take it names (its
// mark, ParkedMessage.TakenAt) and tells whether it did: an operator may
// have discarded the message while it was in the handler (`outbox inbox
// parked discard --taken`), or taken it back (`retry --taken`) for another
// process. It takes back (ReturnTaken) a message whose process did not end
// its retry. The inbox tables are.
type retryEnd interface {
	TakeRetry(ctx context.Context, consumer string) (outbox.ParkedMessage, bool, error)
	TakeNext(ctx context.Context, consumer, key string) (outbox.ParkedMessage, bool, error)
	UnparkRetried(ctx context.Context, consumer string, id uuid.UUID, taken time.Time) (bool, error)
	ParkRetried(ctx context.Context, consumer string, m outbox.Message, taken time.Time, attempts int, reason string) (bool, error)
	ReturnTaken(ctx context.Context, consumer string, id uuid.UUID, taken time.Time) error
}

func (r *retried) Message() outbox.Message { return r.m }
func (r *retried) Attempt() int            { return 1 }
func (r *retried) Working()                {}

func (r *retried) Ack(ctx context.Context) error {
	end, ok := r.cfg.Parked.(retryEnd)
	if !ok {
		err := r.cfg.Parked.Unpark(ctx, r.cfg.Consumer, r.m.ID)
		r.settled, r.unparked = err == nil, err == nil
		return err
	}
	found, err := end.UnparkRetried(ctx, r.cfg.Consumer, r.m.ID, r.taken)
	if err != nil {
		return err
	}
	r.settled = true
	if !found {
		// The discard passed its key on already, or another process has
		// the message now: the chain is not this process's to go on with.
		r.log.Warn("outbox consumer: a retried message was discarded while its handler ran, or taken back for another process (`outbox inbox parked discard|retry --taken`); "+
			"it was applied nonetheless, maybe after later messages of its key that a discard let go on, and a retry applies it again",
			slog.String("message_id", r.m.ID.String()), slog.String("key", r.m.Key))
		return nil
	}
	r.unparked = true
	return nil
}

func (r *retried) Park(ctx context.Context, attempts int, cause error) error {
	end, ok := r.cfg.Parked.(retryEnd)
	if !ok {
		err := r.cfg.Parked.Park(ctx, r.cfg.Consumer, r.m, attempts, cause.Error())
		r.settled = err == nil
		return err
	}
	found, err := end.ParkRetried(ctx, r.cfg.Consumer, r.m, r.taken, attempts, cause.Error())
	r.settled = err == nil
	if err == nil && !found {
		r.log.Warn("outbox consumer: a retried message was discarded while its handler ran, or taken back for another process (`outbox inbox parked discard|retry --taken`); "+
			"the handler failed again, and it is left as the operator left it",
			slog.String("message_id", r.m.ID.String()), slog.String("key", r.m.Key), slog.Any("error", cause))
	}
	return err
}

// RetryParked runs until ctx ends: every cfg.RetryPoll it takes the parked
// messages of cfg.Consumer whose retry an operator requested (`outbox inbox
// parked retry`), one at a time, and handles each with fn as Handle does, with a new round
// of attempts: a success unparks it, a failure parks it again with the new
// error. Retried messages are handled one at a time, outside the lanes.
// When one is unparked, the messages of its key that wait behind it
// (outbox.KeyParkStore) are handled next, in arrival order, until one fails
// (it is parked again: the key's new head) or none is left, and the key goes
// on. It does nothing if cfg.Parked is nil.
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
			// One at a time: a message taken is marked in a handler, so
			// a batch would mark the rest taken while none of them is,
			// and a process killed meanwhile would leave them all taken.
			t, ok, err := takeRetry(ctx, cfg)
			if err != nil {
				if ctx.Err() == nil {
					log.Warn("outbox consumer: reading the retries of parked messages failed; trying again at the next poll", slog.Any("error", err))
				}
				break
			}
			if !ok {
				break
			}
			log.Info("outbox consumer: retrying a parked message, as requested", slog.String("message_id", t.m.ID.String()), slog.String("topic", t.m.Topic))
			if handedBack := retryKey(ctx, cfg, log, t, fn); handedBack {
				// Its end was not recorded, and its retry is requested
				// again: taken again now, it would run in a loop as fast
				// as the database answers. The next poll takes it.
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
// ends it and waits for it. A message it was handling stays parked and is
// handed back (its retry requested again, for the next process) if the
// store can (the inbox tables); else it stays parked with no retry
// requested, and `outbox inbox parked retry` requests it again.
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

// take is a parked message taken for a retry, with the store's mark of the
// take (zero from a store that marks none).
type take struct {
	m     outbox.Message
	taken time.Time
}

// takeRetry takes one requested retry of cfg.Consumer's.
func takeRetry(ctx context.Context, cfg Config) (take, bool, error) {
	if end, ok := cfg.Parked.(retryEnd); ok {
		p, ok, err := end.TakeRetry(ctx, cfg.Consumer)
		return take{m: p.Message, taken: p.TakenAt}, ok, err
	}
	msgs, err := cfg.Parked.TakeRetries(ctx, cfg.Consumer, 1)
	if err != nil || len(msgs) == 0 {
		return take{}, false, err
	}
	return take{m: msgs[0]}, true, nil
}

// takeNext takes the next message waiting behind key, once its first was
// unparked.
func takeNext(ctx context.Context, cfg Config, ks outbox.KeyParkStore, key string) (take, bool, error) {
	if end, ok := cfg.Parked.(retryEnd); ok {
		p, ok, err := end.TakeNext(ctx, cfg.Consumer, key)
		return take{m: p.Message, taken: p.TakenAt}, ok, err
	}
	m, ok, err := ks.TakeNextWaiting(ctx, cfg.Consumer, key)
	return take{m: m}, ok, err
}

// retryKey handles the parked message t took, then, while each succeeds,
// the messages of its key that waited behind it. It reports whether it
// handed a message back unsettled.
func retryKey(ctx context.Context, cfg Config, log *slog.Logger, t take, fn func(context.Context, outbox.Message) error) (handedBack bool) {
	ks := cfg.keyStore()
	for {
		m := t.m
		r := &retried{cfg: cfg, log: log, m: m, taken: t.taken}
		Handle(ctx, cfg, r, fn)
		// Not settled: ctx ended in the handler, or the unpark or park
		// again failed. Either way the message is still taken by this
		// process, and nothing else takes it, nor the rest of its key,
		// until it is handed back.
		if !r.settled {
			handBack(ctx, cfg, log, t)
			return true
		}
		if !r.unparked || m.Key == "" || ks == nil {
			return false
		}
		next, ok, err := takeNext(ctx, cfg, ks, m.Key)
		if err != nil {
			if ctx.Err() == nil {
				log.Warn("outbox consumer: taking the next message waiting behind a retried one failed; it stays parked: retry it with `outbox inbox parked retry`",
					slog.String("key", m.Key), slog.Any("error", err))
			}
			return false
		}
		if !ok {
			return false
		}
		log.Info("outbox consumer: applying a message that waited behind a parked message of its key", slog.String("message_id", next.m.ID.String()),
			slog.String("key", next.m.Key), slog.String("behind", m.ID.String()))
		t = next
	}
}

// handBackTimeout bounds the hand-back of a message, on a context of its
// own: the process may be stopping, or the store briefly failing.
const handBackTimeout = 5 * time.Second

// handBack returns the parked message t.m, which this process took and did
// not settle (its process is stopping, or its unpark or park again failed),
// to the store: its retry is requested again, so a process (this one, if it
// still runs) takes it again instead of it staying taken until an operator
// takes it back. It tries again, with backoff, until handBackTimeout.
func handBack(ctx context.Context, cfg Config, log *slog.Logger, t take) {
	m := t.m
	end, ok := cfg.Parked.(retryEnd)
	if !ok {
		return
	}
	stopping := ctx.Err() != nil
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), handBackTimeout)
	defer cancel()
	var err error
	for failures := 1; ; failures++ {
		if err = end.ReturnTaken(ctx, cfg.Consumer, m.ID, t.taken); err == nil {
			break
		}
		if !sleep(ctx, backoff.Cap(handBackBackoffBase, handBackBackoffMax, failures)) {
			log.Warn("outbox consumer: handing back a retried message failed; it stays taken by this process: "+
				"take it back with `outbox inbox parked retry --consumer C --taken ID` (this process no longer handles it)",
				slog.String("message_id", m.ID.String()), slog.Any("error", err))
			return
		}
	}
	if stopping {
		log.Info("outbox consumer: stopped during the retry of a parked message; handed it back, its retry requested again", slog.String("message_id", m.ID.String()))
		return
	}
	log.Warn("outbox consumer: the end of a retried message's retry was not recorded; handed it back, its retry requested again: it is retried at the next poll",
		slog.String("message_id", m.ID.String()))
}

// handBackBackoffBase and handBackBackoffMax pace handBack's attempts.
const (
	handBackBackoffBase = 50 * time.Millisecond
	handBackBackoffMax  = time.Second
)
