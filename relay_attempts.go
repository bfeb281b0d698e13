package outbox

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/google/uuid"

	"github.com/go-outbox/outbox/outboxdriver"
)

// attemptNotes are what a settlement changes in the history of attempts:
// the failures it records, and the messages it publishes that had failed
// before, whose history goes.
type attemptNotes struct {
	failed    []outboxdriver.Attempt
	published []uuid.UUID
	// paused are the topics of the messages postponed for a pause, to
	// check once the settlement is recorded (afterPauseSettled).
	paused map[string]bool
}

// attemptsPurgeInterval is how often a relay deletes the history of
// messages no longer in the table that it did not publish itself
// (discarded, deleted by hand): a read of the whole history.
const attemptsPurgeInterval = time.Hour

// failedAttempt is the history record of m's attempt that failed with err.
func failedAttempt(m *Message, err error, outcome outboxdriver.AttemptOutcome, class outboxdriver.AttemptClass) outboxdriver.Attempt {
	return outboxdriver.Attempt{MessageID: m.ID, Number: m.Attempts + 1, Outcome: outcome, Class: class, Error: err.Error()}
}

// permanentClass is the class of a permanent failure: expired, or
// permanent.
func permanentClass(err error) outboxdriver.AttemptClass {
	if errors.Is(err, ErrExpired) {
		return outboxdriver.ClassExpired
	}
	return outboxdriver.ClassPermanent
}

// recordFailures writes the failures of notes to the store's history of
// failed attempts, if it keeps one, before the settlement that carries them
// is sent, and clears them: written once, whether that works or not. It is
// for operators only: a failure is logged, and a store whose table has no
// history (not migrated that far) is told once and asked again only by the
// hourly purge.
//
// It comes before the settlement, so it must not eat the lease the
// settlement has left: it gets a quarter of the time until settleBy (at
// most storeCallTimeout), and is skipped when that is under a millisecond.
func (r *Relay) recordFailures(ctx context.Context, notes *attemptNotes, settleBy time.Time) {
	failed := notes.failed
	notes.failed = nil
	budget := min(storeCallTimeout, time.Until(settleBy)/4)
	if len(failed) > 0 && budget < time.Millisecond {
		r.log.Warn("outbox relay: not writing the history of failed attempts: the lease of their batch is nearly over, and recording its outcomes comes first", slog.Int("attempts", len(failed)))
		return
	}
	r.withAttempts(ctx, len(failed), budget, func(ctx context.Context, rec outboxdriver.AttemptRecorder) error {
		return rec.RecordAttempts(ctx, failed)
	})
}

// forgetPublished deletes the history of the messages notes saw published,
// once the settlement that says so was taken.
func (r *Relay) forgetPublished(ctx context.Context, notes attemptNotes) {
	r.withAttempts(ctx, len(notes.published), storeCallTimeout, func(ctx context.Context, rec outboxdriver.AttemptRecorder) error {
		return rec.ForgetAttempts(ctx, notes.published)
	})
}

// withAttempts runs do, bounded by timeout, on the store's history of
// attempts when it keeps one and there are n things to do.
func (r *Relay) withAttempts(ctx context.Context, n int, timeout time.Duration, do func(context.Context, outboxdriver.AttemptRecorder) error) {
	rec, ok := r.store.(outboxdriver.AttemptRecorder)
	if !ok || n == 0 || r.noAttempts.Load() {
		return
	}
	storeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	defer cancel()
	err := do(storeCtx, rec)
	switch {
	case errors.Is(err, ErrNotMigrated):
		if r.noAttempts.CompareAndSwap(false, true) {
			r.log.Info("outbox relay: the table keeps no history of failed attempts; only each message's last error is kept (`outbox migrate up` adds it)", slog.Any("error", err))
		}
	case err != nil:
		r.log.Warn("outbox relay: writing the history of failed attempts failed; the messages' last errors are kept", slog.Any("error", err), slog.Int("messages", n))
	}
}

// pruneAttempts deletes the history of messages no longer in the table, in
// bounded batches: a heartbeat after the relay starts (relays that restart
// often purge too), then every attemptsPurgeInterval. A purge that works
// also turns the history back on after the table was migrated to it.
func (r *Relay) pruneAttempts(ctx context.Context, rec outboxdriver.AttemptRecorder) {
	const batch = 1000
	wait := time.NewTimer(r.cfg.HeartbeatInterval)
	defer wait.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-wait.C:
		}
		for {
			callCtx, cancel := context.WithTimeout(ctx, storeCallTimeout)
			n, err := rec.PurgeAttempts(callCtx, batch)
			cancel()
			switch {
			case errors.Is(err, ErrNotMigrated):
				r.noAttempts.Store(true)
			case err != nil && ctx.Err() == nil:
				r.log.Warn("outbox relay: purging the history of failed attempts of messages no longer in the table failed", slog.Any("error", err))
			case err == nil:
				r.noAttempts.Store(false)
			}
			if err != nil || n < batch {
				break
			}
		}
		wait.Reset(attemptsPurgeInterval)
	}
}
