package outboxtest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/go-outbox/outbox"
)

// MaxDeliverDefault is DeliverConfig.MaxDeliver when zero: the consumer
// adapters' default.
const MaxDeliverDefault = 5

// DeliverConfig tunes DeliverWith. The zero value delivers each message once.
type DeliverConfig struct {
	// Consumer is the consumer's name the handler finds in its context
	// (outbox.ConsumerName), as the adapters put their
	// ConsumerConfig.Name there: outbox.ApplyOnce names its inbox after
	// it. Default ConsumerDefault.
	Consumer string
	// Copies is how many times each message is delivered (default 1). More
	// than one stands for the broker's redeliveries: after an
	// acknowledgement that was lost, or to a second consumer of a group.
	Copies int
	// Concurrent hands a message's copies to the handler at the same time,
	// as two consumers racing, instead of one after the other.
	Concurrent bool
	// MaxDeliver is how many attempts a copy gets before it is parked, as
	// the adapters' ConsumerConfig.MaxDeliver. Default MaxDeliverDefault.
	// As in the adapters, a failure marked outbox.Unavailable (or held
	// back) counts no attempt: the copy is tried again, after the pause the
	// error carries (outbox.RetryAfter), up to MaxUnavailable times, and
	// left neither acknowledged nor parked after that.
	MaxDeliver int
	// MaxUnavailable bounds the tries of a copy whose handler keeps
	// answering unavailable, so that a test of an outage ends: each waits
	// for the pause the error asks, at most maxUnavailablePause, so the
	// default gives up after about 10 s. Default MaxUnavailableDefault.
	MaxUnavailable int
}

// ConsumerDefault is DeliverConfig.Consumer when empty.
const ConsumerDefault = "outboxtest"

// maxUnavailablePause bounds one wait for an unavailable handler: an
// outboxevents.Dispatcher asks for pauses of up to 5 s, and answers held
// back, cheaply, until its pause ends.
const maxUnavailablePause = 100 * time.Millisecond

// MaxUnavailableDefault is DeliverConfig.MaxUnavailable when zero.
const MaxUnavailableDefault = 100

// Delivery is what became of one message Deliver handed to the handler.
type Delivery struct {
	// Message is the message, with the id Deliver gave it if it had none.
	Message outbox.Message
	// Attempts counts the handler's calls for the message, every copy's.
	Attempts int
	// Acked counts the copies acknowledged: those the handler returned nil
	// for, applied or skipped as duplicates by an inbox.
	Acked int
	// Parked counts the copies given up: failed MaxDeliver times, or once
	// with an outbox.Permanent error.
	Parked int
	// Err is the handler's last error for the message, nil if it never
	// failed.
	Err error
}

// Deliver hands each message once to handle as a consumer adapter
// (outboxnats.Consume, outboxamqp.Consume, outboxkafka.Consume) does: in
// order, each retried in place until handle returns nil (acknowledged), an
// outbox.Permanent error or its last attempt (parked). It returns what
// became of each message, in the order given. A message with no ID gets a
// new one, as the Writer would give it, since an inbox needs one.
//
// Unlike the adapters, it retries at once, without a backoff, so that tests
// stay fast (an unavailable handler's retry waits for the pause its error
// asks, at most 100 ms, see DeliverConfig.MaxUnavailable). The handler is typically an outbox.Inbox's Apply.
func Deliver(t testing.TB, handle func(context.Context, outbox.Message) error, msgs ...outbox.Message) []Delivery {
	t.Helper()
	return DeliverWith(t, handle, DeliverConfig{}, msgs...)
}

// DeliverWith is Deliver with redeliveries: each message comes cfg.Copies
// times, one copy after the other or, with cfg.Concurrent, all at once, so
// a test can check that an inbox applies it once.
func DeliverWith(t testing.TB, handle func(context.Context, outbox.Message) error, cfg DeliverConfig, msgs ...outbox.Message) []Delivery {
	t.Helper()
	copies := max(cfg.Copies, 1)
	maxDeliver := cfg.MaxDeliver
	if maxDeliver <= 0 {
		maxDeliver = MaxDeliverDefault
	}
	consumer := cfg.Consumer
	if consumer == "" {
		consumer = ConsumerDefault
	}
	ctx := outbox.WithConsumerName(t.Context(), consumer)
	maxUnavailable := cfg.MaxUnavailable
	if maxUnavailable <= 0 {
		maxUnavailable = MaxUnavailableDefault
	}
	out := make([]Delivery, len(msgs))
	for i, m := range msgs {
		if m.ID == uuid.Nil {
			id, err := uuid.NewV7()
			if err != nil {
				t.Fatalf("outboxtest: Deliver: new message id: %v", err)
			}
			m.ID = id
		}
		d := &delivery{Delivery: Delivery{Message: m}}
		if cfg.Concurrent {
			var wg sync.WaitGroup
			for range copies {
				wg.Go(func() { d.handle(ctx, handle, maxDeliver, maxUnavailable) })
			}
			wg.Wait()
		} else {
			for range copies {
				d.handle(ctx, handle, maxDeliver, maxUnavailable)
			}
		}
		out[i] = d.Delivery
	}
	return out
}

// delivery is a Delivery that concurrent copies update.
type delivery struct {
	Delivery
	mu sync.Mutex
}

// handle delivers one copy: attempts until it is acknowledged or parked,
// or the test's context ends.
func (d *delivery) handle(ctx context.Context, handle func(context.Context, outbox.Message) error, maxDeliver, maxUnavailable int) {
	unavailable := 0
	for attempt := 1; ctx.Err() == nil; {
		err := handle(ctx, d.Message)
		down := err != nil && !outbox.IsPermanent(err) && (outbox.IsUnavailable(err) || outbox.IsHeldBack(err))
		d.mu.Lock()
		d.Attempts++
		if err != nil {
			d.Err = err
		}
		switch {
		case err == nil:
			d.Acked++
		case down:
		case outbox.IsPermanent(err) || attempt >= maxDeliver:
			d.Parked++
		}
		d.mu.Unlock()
		switch {
		case err == nil, outbox.IsPermanent(err):
			return
		case down:
			if unavailable++; unavailable >= maxUnavailable {
				return
			}
			if pause, ok := outbox.RetryAfterOf(err); ok {
				sleep(ctx, min(pause, maxUnavailablePause))
			}
			continue
		case attempt >= maxDeliver:
			return
		}
		attempt++
	}
}

// sleep waits for d, or less if ctx ends first.
func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
