package outboxotel

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/go-outbox/outbox/outboxdriver"
)

// WatchTable registers the gauges of one table: pending messages, the age of
// the oldest pending one, dead messages, those behind a dead message; and,
// when store has them, the live relays and the age of their latest
// publication (an outboxdriver.RelayRegistry) and the stuck keys (an
// outboxdriver.StuckKeyFinder, with Config.StuckAfter). Each of these reads
// the database at most once per Config.StatsCacheFor, one read at a time,
// bounded by Config.StatsTimeout; when a read fails or is late its gauges
// show the last values read (none before the first) and the error goes to
// otel.Handle. A registry or stuck-key read that finds its table not
// migrated (outboxdriver.ErrNotMigrated) is reported once and not tried
// again: its gauges are left out, the others go on. Unregister the returned
// registration to stop.
//
// outbox.last_publish.age is left out while no registered relay has
// published yet (a new table, relays just started): a made-up age would fire
// alerts, and OutboxRelayLagging, on the oldest pending message's age,
// covers a relay that never publishes.
func (o *Observer) WatchTable(store outboxdriver.Admin, table string) (metric.Registration, error) {
	pending, err1 := o.meter.Int64ObservableGauge("outbox.pending.messages", metric.WithDescription("Messages waiting to be published, in flight included."), metric.WithUnit("{message}"))
	oldest, err2 := o.meter.Float64ObservableGauge("outbox.oldest_pending.age", metric.WithDescription("Age of the oldest pending message: the relay's lag."), metric.WithUnit("s"))
	dead, err3 := o.meter.Int64ObservableGauge("outbox.dead.messages", metric.WithDescription("Dead-lettered messages."), metric.WithUnit("{message}"))
	behind, err4 := o.meter.Int64ObservableGauge("outbox.behind_dead.messages", metric.WithDescription("Pending messages that wait, in key order, behind a dead message of their key until it is retried or discarded."), metric.WithUnit("{message}"))
	live, err5 := o.meter.Int64ObservableGauge("outbox.live.relays", metric.WithDescription("Relays registered for the table and seen within 3 of their heartbeat intervals, by the database's clock."), metric.WithUnit("{relay}"))
	lastPublish, err6 := o.meter.Float64ObservableGauge("outbox.last_publish.age", metric.WithDescription("Time since the latest publication of any relay registered for the table, as of its last heartbeat; absent while none published."), metric.WithUnit("s"))
	stuck, err7 := o.meter.Int64ObservableGauge("outbox.stuck.keys", metric.WithDescription("Keys whose head, the oldest pending message of the key, waited longer than the stuck threshold (outbox status --stuck-after)."), metric.WithUnit("{key}"))
	if err := errors.Join(err1, err2, err3, err4, err5, err6, err7); err != nil {
		return nil, fmt.Errorf("outboxotel: create gauges: %w", err)
	}
	stats := newCache(o, "the table's stats", store.Stats)
	var relays *optionalRead[relayCounts]
	if reg, ok := store.(outboxdriver.RelayRegistry); ok {
		relays = &optionalRead[relayCounts]{table: table, cache: newCache(o, "the relay registry", func(ctx context.Context) (relayCounts, error) {
			rows, now, err := reg.Relays(ctx)
			return countRelays(rows, now), err
		})}
	}
	var stuckKeys *optionalRead[int]
	if finder, ok := store.(outboxdriver.StuckKeyFinder); ok {
		after := o.cfg.StuckAfter
		stuckKeys = &optionalRead[int]{table: table, cache: newCache(o, "the stuck keys", func(ctx context.Context) (int, error) {
			// Limit 1: the gauge needs the total, which the store counts
			// before its limit, not the keys.
			_, total, err := finder.StuckKeys(ctx, after, 1)
			return total, err
		})}
	}
	attrs := metric.WithAttributes(attribute.String("table", table))
	return o.meter.RegisterCallback(func(ctx context.Context, obs metric.Observer) error {
		// The reads go on side by side, so that a collection waits for one
		// StatsTimeout at most however many hang.
		var (
			wg                sync.WaitGroup
			rc                relayCounts
			stuckN            int
			relaysOK, stuckOK bool
		)
		wg.Go(func() { rc, relaysOK = relays.get(ctx) })
		wg.Go(func() { stuckN, stuckOK = stuckKeys.get(ctx) })
		st, ok, err := stats.get(ctx)
		wg.Wait()
		if err != nil {
			// Not returned: a periodic reader drops the whole export, the
			// relay's counters too, when a callback fails.
			otel.Handle(fmt.Errorf("outboxotel: table %s: %w", table, err))
		}
		if ok {
			obs.ObserveInt64(pending, st.Pending, attrs)
			obs.ObserveFloat64(oldest, st.OldestPending.Seconds(), attrs)
			obs.ObserveInt64(dead, st.Dead, attrs)
			obs.ObserveInt64(behind, st.BehindDead, attrs)
		}
		if relaysOK {
			obs.ObserveInt64(live, rc.live, attrs)
			if rc.published {
				obs.ObserveFloat64(lastPublish, rc.lastPublishAge.Seconds(), attrs)
			}
		}
		if stuckOK {
			obs.ObserveInt64(stuck, int64(stuckN), attrs)
		}
		return nil
	}, pending, oldest, dead, behind, live, lastPublish, stuck)
}

// relayCounts is what the gauges take from one read of a relay registry.
type relayCounts struct {
	live int64
	// lastPublishAge is since the latest LastPublishAt of any registered
	// relay; published says whether any has one.
	lastPublishAge time.Duration
	published      bool
}

// countRelays judges rows by now, the database's clock when they were read,
// so that the clocks of the relays' and this process's machines do not
// matter.
func countRelays(rows []outboxdriver.RelayRow, now time.Time) relayCounts {
	var (
		c      relayCounts
		latest time.Time
	)
	for _, r := range rows {
		if r.Live(now) {
			c.live++
		}
		if r.LastPublishAt.After(latest) {
			latest = r.LastPublishAt
		}
	}
	if !latest.IsZero() {
		c.published = true
		c.lastPublishAge = max(now.Sub(latest), 0)
	}
	return c
}

// optionalRead is a cached read of a part of a store that its table may not
// have yet (a registry, a stuck-key query on a table not migrated that far).
// A nil one reads nothing.
type optionalRead[T any] struct {
	table string
	cache *cache[T]
	// off is set once the store said the part is not migrated: asking
	// again each period would fill the database's log with the same error.
	off atomic.Bool
}

// get returns the last values read and whether there are any to show.
func (r *optionalRead[T]) get(ctx context.Context) (v T, ok bool) {
	if r == nil || r.off.Load() {
		return v, false
	}
	v, ok, err := r.cache.get(ctx)
	switch {
	case errors.Is(err, outboxdriver.ErrNotMigrated):
		if r.off.CompareAndSwap(false, true) {
			otel.Handle(fmt.Errorf("outboxotel: table %s: %w; its gauge is left out until the process restarts after `outbox migrate up`", r.table, err))
		}
		return v, false
	case err != nil:
		otel.Handle(fmt.Errorf("outboxotel: table %s: %w", r.table, err))
	}
	return v, ok
}
