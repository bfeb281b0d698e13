package outbox

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/go-outbox/outbox/outboxdriver"
)

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

// recordAttempts adds failures to the store's history of failed attempts,
// if it keeps one, after the settlement that carried them was taken. It is
// for operators only: a failure is logged, and a store whose table has no
// history (not migrated that far) is told once and asked no more.
func (r *Relay) recordAttempts(ctx context.Context, failures []outboxdriver.Attempt) {
	rec, ok := r.store.(outboxdriver.AttemptRecorder)
	if !ok || len(failures) == 0 || r.noAttempts.Load() {
		return
	}
	storeCtx, cancel := r.storeCtx(ctx)
	defer cancel()
	err := rec.RecordAttempts(storeCtx, failures)
	switch {
	case errors.Is(err, ErrNotMigrated):
		if r.noAttempts.CompareAndSwap(false, true) {
			r.log.Info("outbox relay: the table keeps no history of failed attempts; only each message's last error is kept", slog.Any("error", err))
		}
	case err != nil:
		r.log.Warn("outbox relay: recording the history of failed attempts failed; the messages' last errors are kept", slog.Any("error", err), slog.Int("attempts", len(failures)))
	}
}

// pruneAttempts deletes, every HeartbeatInterval, the history of messages
// no longer in the table (published or discarded), in bounded batches.
func (r *Relay) pruneAttempts(ctx context.Context, rec outboxdriver.AttemptRecorder) {
	const batch = 1000
	t := time.NewTicker(r.cfg.HeartbeatInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if r.noAttempts.Load() {
			continue
		}
		for {
			callCtx, cancel := context.WithTimeout(ctx, storeCallTimeout)
			n, err := rec.PurgeAttempts(callCtx, batch)
			cancel()
			if errors.Is(err, ErrNotMigrated) {
				r.noAttempts.Store(true)
			} else if err != nil && ctx.Err() == nil {
				r.log.Warn("outbox relay: purging the history of published messages' failed attempts failed", slog.Any("error", err))
			}
			if err != nil || n < batch {
				break
			}
		}
	}
}
