package outbox

import (
	"context"
	"time"
)

// Observer is told what a relay does, for metrics and traces (the
// outboxotel module implements it on OpenTelemetry). A relay calls it from
// its workers, concurrently: every method must be safe for concurrent use
// and quick, since it runs on the relay's path. Set it in Config.Observer.
type Observer interface {
	// Exchanged reports one exchange with the store: the outcomes of the
	// last batch recorded and the next batch claimed, in one call.
	Exchanged(ctx context.Context, e Exchange)
	// Publishing is called before a batch goes to the publisher. The
	// returned context is the one the publisher gets (a tracer starts its
	// spans here); done is called with the publisher's results, one per
	// message, once it returned.
	Publishing(ctx context.Context, table string, batch []Message) (_ context.Context, done func(results []error))
	// Settled reports what the relay decided for one message after its
	// publication: err is the publisher's error (nil when published).
	Settled(ctx context.Context, table string, m *Message, outcome Outcome, err error)
}

// InboxObserver is told of every message an Inbox handled (see
// Inbox.Observe), for the metrics of consumers.
type InboxObserver interface {
	// Handled reports one Handle call: applied is true when the handler
	// ran and committed, false for a duplicate (err nil) or a failure.
	Handled(ctx context.Context, consumer string, applied bool, err error)
}

// ConsumeObserver is told of every attempt a consumer adapter (outboxnats,
// outboxamqp, outboxkafka Consume; outboxhttp.Handler) makes to handle a
// message, for traces and metrics of consumers (outboxotel.Observer
// implements it: a "process" span, child of the trace context the message
// carries).
type ConsumeObserver interface {
	// Consuming returns the context the handler runs in, and a function
	// the adapter calls with the handler's result.
	Consuming(ctx context.Context, consumer string, m Message) (_ context.Context, done func(err error))
}

// Exchange describes one exchange of a relay worker with the store.
type Exchange struct {
	// Table is the store's name (schema.table).
	Table string
	// Duration is how long the store call took.
	Duration time.Duration
	// Recorded counts the outcomes the call recorded.
	Recorded int
	// Claimed counts the messages it claimed.
	Claimed int
	// Err is the store's error, if the call failed (nothing was recorded
	// or claimed).
	Err error
}

// Outcome is what the relay decided for a message it tried to publish.
type Outcome string

// The outcomes a relay reports to its Observer.
const (
	// OutcomePublished: the publisher confirmed the message.
	OutcomePublished Outcome = "published"
	// OutcomeRetried: the attempt failed and counted; the message is due
	// again after a backoff.
	OutcomeRetried Outcome = "retried"
	// OutcomeDead: the relay dead-lettered the message (a permanent error,
	// or its last attempt failed).
	OutcomeDead Outcome = "dead"
	// OutcomePostponed: the destination was unavailable, or asked to wait,
	// or the message was held back behind a failed message of its key; it
	// waits without an attempt counted.
	OutcomePostponed Outcome = "postponed"
	// OutcomeReleased: the relay stopped, or its lease ran short, before
	// the message was published, or it was held back untried behind a
	// message of its key; it is due again at once (in key order, behind
	// that message), no attempt counted.
	OutcomeReleased Outcome = "released"
)

// noObserver is the relay's Observer when Config.Observer is nil.
type noObserver struct{}

func (noObserver) Exchanged(context.Context, Exchange) {}

func (noObserver) Publishing(ctx context.Context, _ string, _ []Message) (context.Context, func([]error)) {
	return ctx, func([]error) {}
}

func (noObserver) Settled(context.Context, string, *Message, Outcome, error) {}
