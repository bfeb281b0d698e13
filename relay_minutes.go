package outbox

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/go-outbox/outbox/outboxdriver"
)

// minuteCounts are what the relay's recorded settlements published and
// failed since its last add to the store's per-minute rollup (the
// console's charts of the last hour).
type minuteCounts struct {
	failed    atomic.Int64
	published atomic.Int64
}

// settled counts a settlement the store recorded: its published messages,
// and its failed attempts (retried or dead). A postponement (Unsent: the
// destination could not be reached) and a release count no attempt, so
// they are not failures here either.
func (c *minuteCounts) settled(s outboxdriver.Settlement) {
	failed := len(s.Dead)
	for _, r := range s.Retry {
		if !r.Unsent {
			failed++
		}
	}
	if len(s.Published) > 0 {
		c.published.Add(int64(len(s.Published)))
	}
	if failed > 0 {
		c.failed.Add(int64(failed))
	}
}

// take returns the counts and starts them again from zero.
func (c *minuteCounts) take() (published, failed int64) {
	return c.published.Swap(0), c.failed.Swap(0)
}

// putBack returns counts an add could not write, for the next one.
func (c *minuteCounts) putBack(published, failed int64) {
	c.published.Add(published)
	c.failed.Add(failed)
}

// minuteIdleAdd is how long a relay with nothing to count lets pass
// between its adds: under a minute, so that every minute it runs has a row
// with a sample of the backlog (a relay that publishes nothing while
// messages pile up is what the charts are for), yet an idle relay writes
// about once a minute, not every heartbeat.
const minuteIdleAdd = 50 * time.Second

// minuteAdds is the state of a relay's adds to the per-minute rollup,
// kept by its heartbeat loop. Its zero value, with rollup set, is ready.
type minuteAdds struct {
	rollup outboxdriver.MinuteRollup // nil: the store keeps no rollup
	// firstBeat is the heartbeat of the relay's first add, counting the
	// one at start as 0, drawn by the first call (firstAddBeat) unless
	// firstDrawn; beats counts the heartbeats seen until then.
	firstDrawn       bool
	firstBeat, beats int
	// last is when an add last succeeded (zero: never).
	last time.Time
	// failures counts the adds that failed in a row.
	failures int
	// notMigrated is set once the store said the table is missing; skip
	// counts the heartbeats to let pass before asking again.
	notMigrated bool
	skip        int
}

// firstAddBeat draws the heartbeat of a relay's first add to the rollup:
// not the one at start, and not the same for every relay. An add that
// finds its minute without a sample counts the backlog (a scan of every
// pending message), and relays start together, after a deploy or an
// outage, when the backlog is at its largest: a relay of many tables starts
// a relay per table at once. Counted at start, it took a quarter of the
// first second of a 50,000-message drain from the relays; drawn between
// the second and the sixth heartbeat (10 to 50 s with the default
// interval), the scans of relays started together are spread, and each
// minute still gets its sample.
func firstAddBeat() int { return 1 + rand.IntN(5) }

// addMinute adds the counts since the last add to the rollup, at a
// heartbeat: from its first add on (firstAddBeat), at every one that has
// something to count, and every minuteIdleAdd otherwise. Counts an add
// could not write are kept for the next. A store without the rollup's
// table (not migrated that far) is told once, at INFO, and asked again
// every registryRetryBeats heartbeats.
func (r *Relay) addMinute(ctx context.Context, a *minuteAdds, now time.Time) {
	if a.rollup == nil {
		return
	}
	if !a.firstDrawn {
		a.firstBeat, a.firstDrawn = firstAddBeat(), true
	}
	if a.beats < a.firstBeat {
		a.beats++
		return
	}
	if a.skip > 0 {
		a.skip--
		return
	}
	published, failed := r.lastWork.minutes.take()
	if published == 0 && failed == 0 && !a.last.IsZero() && now.Sub(a.last) < minuteIdleAdd {
		return
	}
	callCtx, cancel := context.WithTimeout(ctx, storeCallTimeout)
	err := a.rollup.AddMinute(callCtx, published, failed)
	cancel()
	if err == nil {
		a.last, a.failures, a.notMigrated = now, 0, false
		return
	}
	r.lastWork.minutes.putBack(published, failed)
	switch {
	case errors.Is(err, ErrNotMigrated):
		if !a.notMigrated {
			r.log.Info("outbox relay: not adding to the per-minute rollup; the console's charts will not count it until the table is migrated", slog.Any("error", err))
		}
		a.notMigrated, a.skip = true, registryRetryBeats
	case ctx.Err() == nil:
		if a.failures++; a.failures == beatFailuresToWarn {
			r.log.Warn("outbox relay: its adds to the per-minute rollup keep failing; the console's charts miss what it published since (kept, added once an add succeeds)", slog.Any("error", err))
		}
	}
}

// flushMinutes adds, once the relay stopped, what it counted since its last
// heartbeat, so that a relay stopped cleanly leaves its last seconds in the
// charts.
func (r *Relay) flushMinutes(rollup outboxdriver.MinuteRollup) {
	published, failed := r.lastWork.minutes.take()
	if published == 0 && failed == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), storeCallTimeout)
	defer cancel()
	if err := rollup.AddMinute(ctx, published, failed); err != nil {
		r.log.Debug("outbox relay: could not add its last counts to the per-minute rollup", slog.Any("error", err),
			slog.Int64("published", published), slog.Int64("failed", failed))
	}
}
