package outboxpg

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/sqlrow"
)

// TakeRetry takes one of consumer's parked messages whose retry was
// requested, as TakeRetries does, and returns it with its mark
// (ParkedMessage.TakenAt): the end of its retry (UnparkRetried, ParkRetried,
// ReturnTaken) names the mark, so that a process whose take an operator
// took back (ForgetTaken) leaves alone the take of the process after it.
// ok is false when no retry is requested.
func (t *InboxTable) TakeRetry(ctx context.Context, consumer string) (outbox.ParkedMessage, bool, error) {
	parked, err := t.takeParked(ctx, consumer, 1)
	if err != nil || len(parked) == 0 {
		return outbox.ParkedMessage{}, false, err
	}
	return parked[0], true, nil
}

// TakeNext is TakeNextWaiting, returning the message with its mark, as
// TakeRetry does.
func (t *InboxTable) TakeNext(ctx context.Context, consumer, key string) (outbox.ParkedMessage, bool, error) {
	rows, err := t.pool.Query(ctx, t.parked.next, consumer, key)
	if err != nil {
		return outbox.ParkedMessage{}, false, fmt.Errorf("outboxpg: take the next waiting message of key %q of consumer %q from %s: %w", key, consumer, t.parked.name, err)
	}
	parked, err := pgx.CollectRows(rows, scanParked)
	if err != nil {
		return outbox.ParkedMessage{}, false, fmt.Errorf("outboxpg: take the next waiting message of key %q of consumer %q from %s: %w", key, consumer, t.parked.name, err)
	}
	if len(parked) == 0 {
		return outbox.ParkedMessage{}, false, nil
	}
	return parked[0], true, nil
}

// UnparkRetried unparks consumer's parked message id, which a consumer
// process took for a retry (with the mark taken, from TakeRetry or
// TakeNext) and applied, as Unpark does, and reports whether it did: false
// if an operator discarded it meanwhile (discard --taken), and its key went
// on without it, or took it back (retry --taken) and it is no longer this
// process's to unpark.
func (t *InboxTable) UnparkRetried(ctx context.Context, consumer string, id uuid.UUID, taken time.Time) (bool, error) {
	n, err := t.deleteParked(ctx, t.parked.unparkTaken, consumer, []uuid.UUID{id}, taken)
	if err != nil {
		return false, fmt.Errorf("outboxpg: unpark message %s of consumer %q in %s: %w", id, consumer, t.parked.name, err)
	}
	return n > 0, nil
}

// ParkRetried parks again consumer's message m, which a consumer process
// took for a retry (with the mark taken) and whose handler failed again,
// in place: it keeps its place in its key's order (the key's first) with
// the new error and attempts, and is no longer taken. It reports whether
// it did: a message an operator discarded or took back meanwhile is left
// alone.
func (t *InboxTable) ParkRetried(ctx context.Context, consumer string, m outbox.Message, taken time.Time, attempts int, reason string) (bool, error) {
	reason = sqlrow.StorableText(reason)
	tag, err := t.pool.Exec(ctx, t.parked.parkAgain, consumer, pgUUID(m.ID), reason, attempts, taken)
	if err != nil {
		return false, fmt.Errorf("outboxpg: park message %s of consumer %q again in %s: %w", m.ID, consumer, t.parked.name, err)
	}
	return tag.RowsAffected() > 0, nil
}

// ForgetTaken clears the mark of consumer's parked messages ids (all of
// them when no id is given) that a consumer process took for a retry
// (ParkedMessage.TakenAt), and returns how many it cleared: an operator
// tells that the process stopped before it unparked or parked them again,
// and RequestRetry or DiscardParked then work on them. If the process is in
// fact still handling one, a retry requested now hands it to a second
// process.
func (t *InboxTable) ForgetTaken(ctx context.Context, consumer string, ids ...uuid.UUID) (int, error) {
	if consumer == "" {
		return 0, errors.New("outboxpg: forget taken parked messages: no consumer; name the consumer that parked them")
	}
	tag, err := t.pool.Exec(ctx, t.parked.forget, consumer, pgUUIDs(ids))
	if err != nil {
		return 0, fmt.Errorf("outboxpg: forget taken parked messages of consumer %q in %s: %w", consumer, t.parked.name, err)
	}
	return int(tag.RowsAffected()), nil
}

// StalledCounts counts each consumer's parked messages that are first of
// their key and wait, with no retry requested and no process that took
// them: nothing will apply them, nor the rest of their key, until an
// operator requests their retry (consumers with none are left out).
func (t *InboxTable) StalledCounts(ctx context.Context) (map[string]int64, error) {
	return t.countParked(ctx, t.parked.stalled)
}

// TakenCounts counts each consumer's parked messages that a consumer
// process took for a retry and has not yet unparked or parked again
// (consumers with none are left out).
func (t *InboxTable) TakenCounts(ctx context.Context) (map[string]int64, error) {
	return t.countParked(ctx, t.parked.taken)
}

// ReturnTaken hands back consumer's parked message id, which a consumer
// process took for a retry (with the mark taken) and stops before it could
// finish: its retry is requested again, and the next process takes it. A
// message not taken, or taken since by another process, is left as it is.
func (t *InboxTable) ReturnTaken(ctx context.Context, consumer string, id uuid.UUID, taken time.Time) error {
	if _, err := t.pool.Exec(ctx, t.parked.giveBack, consumer, pgUUID(id), taken); err != nil {
		return fmt.Errorf("outboxpg: hand back parked message %s of consumer %q in %s: %w", id, consumer, t.parked.name, err)
	}
	return nil
}
