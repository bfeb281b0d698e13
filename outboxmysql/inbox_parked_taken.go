package outboxmysql

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"

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

// UnparkRetried unparks consumer's parked message id, which a consumer
// process took for a retry (with the mark taken, from TakeRetry or
// TakeNext) and applied, as Unpark does, and reports whether it did: false
// if an operator discarded it meanwhile (discard --taken), and its key went
// on without it, or took it back (retry --taken) and it is no longer this
// process's to unpark.
func (t *InboxTable) UnparkRetried(ctx context.Context, consumer string, id uuid.UUID, taken time.Time) (bool, error) {
	n, err := t.deleteParked(ctx, consumer, []uuid.UUID{id}, ` AND taken_at = ?`, datetime(taken, false))
	if err != nil {
		return false, fmt.Errorf("outboxmysql: unpark message %s of consumer %q in %s: %w", id, consumer, t.ParkedName(), err)
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
	n, err := t.writeCount(ctx, t.parked.parkAgain, sqlrow.StorableText(reason), attempts, []byte(consumer), m.ID[:], datetime(taken, false))
	if err != nil {
		return false, fmt.Errorf("outboxmysql: park message %s of consumer %q again in %s: %w", m.ID, consumer, t.ParkedName(), err)
	}
	return n > 0, nil
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
		return 0, errors.New("outboxmysql: forget taken parked messages: no consumer; name the consumer that parked them")
	}
	fail := func(err error) (int, error) {
		return 0, fmt.Errorf("outboxmysql: forget taken parked messages of consumer %q in %s: %w", consumer, t.ParkedName(), err)
	}
	if len(ids) == 0 {
		n, err := t.writeCount(ctx, t.parked.forget, []byte(consumer))
		if err != nil {
			return fail(err)
		}
		return n, nil
	}
	total := 0
	for chunk := range chunks(ids, moveChunk) {
		n, err := t.writeCount(ctx, t.parked.forget+` AND message_id IN `+inList(len(chunk)), append([]any{[]byte(consumer)}, idArgs(chunk)...)...)
		if err != nil {
			return fail(err)
		}
		total += n
	}
	return total, nil
}

// ReturnTaken hands back consumer's parked message id, which a consumer
// process took for a retry (with the mark taken) and stops before it could
// finish: its retry is requested again, and the next process takes it. A
// message not taken, or taken since by another process, is left as it is.
func (t *InboxTable) ReturnTaken(ctx context.Context, consumer string, id uuid.UUID, taken time.Time) error {
	if _, err := t.writeCount(ctx, t.parked.giveBack, []byte(consumer), id[:], datetime(taken, false)); err != nil {
		return fmt.Errorf("outboxmysql: hand back parked message %s of consumer %q in %s: %w", id, consumer, t.ParkedName(), err)
	}
	return nil
}
