package outbox

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime/debug"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/go-outbox/outbox/outboxdriver"
)

// relayForget is how long a relay's row may go unseen before another
// relay's beat deletes it: long enough that `outbox status` still shows a
// relay that died last night, short enough that crashed relays do not pile
// up.
const relayForget = 24 * time.Hour

// lastWork records when the relay last claimed messages and last had one
// published, for its registry row, and what its recorded settlements
// published and failed since its last add to the per-minute rollup.
type lastWork struct {
	claimed   atomic.Int64 // Unix nanoseconds; 0 when never
	minutes   minuteCounts
	published atomic.Int64
}

func (a *lastWork) since(at *atomic.Int64, now time.Time) time.Duration {
	t := at.Load()
	if t == 0 {
		return -1
	}
	return max(now.Sub(time.Unix(0, t)), 0)
}

// register keeps the relay's row in the store's registry until ctx ends:
// one beat at once, then one every HeartbeatInterval. A store without a
// registry table (not migrated that far) is told once, at INFO, and the
// relay runs on unregistered; other failures are logged and the next beat
// tries again. It reports through registered whether any beat succeeded, so
// that Run removes the row when it stops. Each beat also adds to the
// per-minute rollup, if the store keeps one (addMinute).
func (r *Relay) register(ctx context.Context, reg outboxdriver.RelayRegistry, id uuid.UUID, registered *atomic.Bool) {
	beat := outboxdriver.RelayBeat{
		ID: id, PID: os.Getpid(), Version: moduleVersion(), Config: r.describe(),
		Interval: r.cfg.HeartbeatInterval, Forget: relayForget,
	}
	beat.Host, _ = os.Hostname()
	t := time.NewTicker(r.cfg.HeartbeatInterval)
	defer t.Stop()
	var (
		failures, skip int
		notMigrated    bool
		minutes        minuteAdds
	)
	minutes.rollup, _ = r.store.(outboxdriver.MinuteRollup)
	for {
		if skip > 0 {
			// The registry table was missing: ask again now and then, so
			// that a relay started before `outbox migrate up` registers
			// without a restart.
			skip--
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			continue
		}
		now := time.Now()
		beat.SinceClaim = r.lastWork.since(&r.lastWork.claimed, now)
		beat.SincePublish = r.lastWork.since(&r.lastWork.published, now)
		callCtx, cancel := context.WithTimeout(ctx, storeCallTimeout)
		err := reg.BeatRelay(callCtx, beat)
		cancel()
		switch {
		case err == nil:
			registered.Store(true)
			failures, notMigrated = 0, false
		case errors.Is(err, ErrNotMigrated):
			if !notMigrated {
				r.log.Info("outbox relay: not registered in the relay registry; `outbox status` will not list it until the table is migrated", slog.Any("error", err))
			}
			notMigrated, skip = true, registryRetryBeats
		case ctx.Err() == nil:
			// A beat that fails now and then changes nothing; one that
			// keeps failing makes the relay look gone to operators.
			if failures++; failures == beatFailuresToWarn {
				r.log.Warn("outbox relay: its heartbeat in the relay registry keeps failing; `outbox status` may show it as gone", slog.Any("error", err))
			}
		}
		r.addMinute(ctx, &minutes, now)
		r.sweepPaused(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// registryRetryBeats is how many heartbeats a relay lets pass between its
// tries of a registry table that was missing.
const registryRetryBeats = 10

// beatFailuresToWarn is how many heartbeats in a row may fail before the
// relay warns: after outboxdriver.RelayStaleBeats an operator sees it gone.
const beatFailuresToWarn = outboxdriver.RelayStaleBeats - 1

// unregister removes the relay's row once it stopped, so that it does not
// linger as a relay that died, after adding its last counts to the
// per-minute rollup.
func (r *Relay) unregister(reg outboxdriver.RelayRegistry, id uuid.UUID) {
	if rollup, ok := r.store.(outboxdriver.MinuteRollup); ok {
		r.flushMinutes(rollup)
	}
	ctx, cancel := context.WithTimeout(context.Background(), storeCallTimeout)
	defer cancel()
	if err := reg.RemoveRelay(ctx, id); err != nil {
		r.log.Warn("outbox relay: could not remove its row from the relay registry; it shows as gone until it is forgotten", slog.Any("error", err), slog.Duration("forgotten_after", relayForget))
	}
}

// describe is the relay's configuration as JSON, for its registry row.
func (r *Relay) describe() string {
	c := r.cfg
	d := map[string]any{
		"publisher":          fmt.Sprintf("%T", r.pub),
		"workers":            c.Workers,
		"batch_size":         c.BatchSize,
		"lease":              c.LeaseDuration.String(),
		"max_attempts":       c.MaxAttempts,
		"poll_interval":      c.PollInterval.String(),
		"retention":          c.Retention.String(),
		"backoff":            c.BackoffBase.String() + ".." + c.BackoffMax.String(),
		"heartbeat_interval": c.HeartbeatInterval.String(),
	}
	if k, ok := r.store.(outboxdriver.KeyOrderClaimer); ok {
		d["order_by_key"] = k.ClaimsInKeyOrder()
	}
	b, err := json.Marshal(d)
	if err != nil {
		return "{}"
	}
	return string(b)
}

// modulePath is the outbox module, whose version a relay reports.
const modulePath = "github.com/go-outbox/outbox"

// moduleVersion is the version of the outbox module built into this
// binary, "(devel)" when built from a checkout.
func moduleVersion() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "(unknown)"
	}
	if info.Main.Path == modulePath {
		return info.Main.Version
	}
	for _, dep := range info.Deps {
		if dep.Path != modulePath {
			continue
		}
		if dep.Replace != nil {
			return cmp.Or(dep.Replace.Version, "(devel)")
		}
		return dep.Version
	}
	return "(unknown)"
}
