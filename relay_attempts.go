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

// recordAttempts writes notes to the store's history of failed attempts,
// if it keeps one, after the settlement that carried them was taken: the
// failures, and the end of the history of messages now published. It is
// for operators only: a failure is logged, and a store whose table has no
// history (not migrated that far) is told once and asked no more.
func (r *Relay) recordAttempts(ctx context.Context, notes attemptNotes) {
	rec, ok := r.store.(outboxdriver.AttemptRecorder)
	if !ok || (len(notes.failed) == 0 && len(notes.published) == 0) || r.noAttempts.Load() {
		return
	}
	storeCtx, cancel := r.storeCtx(ctx)
	defer cancel()
	var err error
	if len(notes.failed) > 0 {
		err = rec.RecordAttempts(storeCtx, notes.failed)
	}
	if len(notes.published) > 0 && err == nil {
		err = rec.ForgetAttempts(storeCtx, notes.published)
	}
	switch {
	case errors.Is(err, ErrNotMigrated):
		if r.noAttempts.CompareAndSwap(false, true) {
			r.log.Info("outbox relay: the table keeps no history of failed attempts; only each message's last error is kept", slog.Any("error", err))
		}
	case err != nil:
		r.log.Warn("outbox relay: recording the history of failed attempts failed; the messages' last errors are kept", slog.Any("error", err), slog.Int("attempts", len(notes.failed)))
	}
}

// pruneAttempts deletes, every attemptsPurgeInterval, the history of
// messages no longer in the table, in bounded batches.
func (r *Relay) pruneAttempts(ctx context.Context, rec outboxdriver.AttemptRecorder) {
	const batch = 1000
	t := time.NewTicker(attemptsPurgeInterval)
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
