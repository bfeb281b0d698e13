package outboxotel

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// ParkedCounter counts the messages each consumer parked in an inbox table
// (outboxpg.InboxTable and outboxsqlite.InboxTable implement it, as `outbox
// inbox status` reads it). A table that also has WaitingCounts(ctx)
// (map[string]int64, error), as both do, has its waiting messages counted
// too.
type ParkedCounter interface {
	// ParkedCounts counts each consumer's parked messages, the waiting ones
	// included; consumers with none may be left out.
	ParkedCounts(ctx context.Context) (map[string]int64, error)
}

// waitingCounter is the optional part of a ParkedCounter: the parked
// messages that wait behind a parked message of their key.
type waitingCounter interface {
	WaitingCounts(ctx context.Context) (map[string]int64, error)
}

// Readier is what has a readiness check: the consumer adapters' Readiness
// (outboxamqp, outboxnats, outboxkafka), and *outbox.Relay.
type Readier interface {
	// Ready returns nil while it works, else why not.
	Ready() error
}

// inboxCounts is one read of an inbox table's parked counts.
type inboxCounts struct {
	parked, waiting map[string]int64
}

// WatchInbox registers the gauges of an inbox table's parked messages, by
// consumer: outbox.inbox.parked.messages (every parked message, the waiting
// ones included, as PARKED in `outbox inbox status`) and
// outbox.inbox.waiting.messages (those waiting behind a parked message of
// their key, WAITING there; 0 if the table does not count them). The
// consumers named, and every consumer found with parked messages since,
// are shown, at 0 when they have none, so that a series does not vanish
// when its messages are retried or discarded. The counts are read as
// WatchTable reads a table: at most once per Config.StatsCacheFor, one read
// at a time, bounded by Config.StatsTimeout, the last values shown
// meanwhile. Unregister the returned registration to stop.
func (o *Observer) WatchInbox(table ParkedCounter, consumers ...string) (metric.Registration, error) {
	parkedG, err1 := o.meter.Int64ObservableGauge("outbox.inbox.parked.messages",
		metric.WithDescription("Messages a consumer parked in its inbox table (the waiting ones included) until an operator retries or discards them."), metric.WithUnit("{message}"))
	waitingG, err2 := o.meter.Int64ObservableGauge("outbox.inbox.waiting.messages",
		metric.WithDescription("Parked messages that wait, in key order, behind a parked message of their key until it is retried or discarded."), metric.WithUnit("{message}"))
	if err := errors.Join(err1, err2); err != nil {
		return nil, fmt.Errorf("outboxotel: create gauges: %w", err)
	}
	waiting, _ := table.(waitingCounter)
	counts := newCache(o, "the inbox table's parked counts", func(ctx context.Context) (inboxCounts, error) {
		parked, err := table.ParkedCounts(ctx)
		if err != nil || waiting == nil {
			return inboxCounts{parked: parked}, err
		}
		w, err := waiting.WaitingCounts(ctx)
		return inboxCounts{parked: parked, waiting: w}, err
	})
	var (
		mu   sync.Mutex
		seen = map[string]metric.MeasurementOption{}
	)
	for _, c := range consumers {
		seen[c] = metric.WithAttributes(attribute.String("consumer", c))
	}
	return o.meter.RegisterCallback(func(ctx context.Context, obs metric.Observer) error {
		st, ok, err := counts.get(ctx)
		if err != nil {
			// Not returned: a periodic reader drops the whole export
			// when a callback fails.
			otel.Handle(err)
		}
		if !ok {
			return nil
		}
		mu.Lock()
		defer mu.Unlock()
		for c := range maps.Keys(st.parked) {
			if seen[c] == nil {
				seen[c] = metric.WithAttributes(attribute.String("consumer", c))
			}
		}
		for c, attrs := range seen {
			obs.ObserveInt64(parkedG, st.parked[c], attrs)
			obs.ObserveInt64(waitingG, st.waiting[c], attrs)
		}
		return nil
	}, parkedG, waitingG)
}

// WatchConsumer registers the gauge outbox.consumer.ready: 1 while
// ready.Ready() is nil, 0 otherwise, for an alert on a consumer that stopped
// consuming. ready is a consumer adapter's Readiness (set in its
// ConsumerConfig), consumer its name.
func (o *Observer) WatchConsumer(ready Readier, consumer string) (metric.Registration, error) {
	g, err := o.meter.Int64ObservableGauge("outbox.consumer.ready",
		metric.WithDescription("1 while the consumer adapter is connected and consuming (its Readiness is nil), 0 otherwise."))
	if err != nil {
		return nil, fmt.Errorf("outboxotel: create gauge: %w", err)
	}
	attrs := metric.WithAttributes(attribute.String("consumer", consumer))
	return o.meter.RegisterCallback(func(_ context.Context, obs metric.Observer) error {
		v := int64(0)
		if ready.Ready() == nil {
			v = 1
		}
		obs.ObserveInt64(g, v, attrs)
		return nil
	}, g)
}
