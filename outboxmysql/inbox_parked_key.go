package outboxmysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/google/uuid"

	"github.com/go-outbox/outbox"
)

// ParkBehind parks m as waiting behind consumer's parked messages of its key
// and returns the key's head, or parks nothing and returns uuid.Nil if the
// key has none (outbox.KeyParkStore). A message with no key is never held.
func (t *InboxTable) ParkBehind(ctx context.Context, consumer string, m outbox.Message) (uuid.UUID, error) {
	if m.Key == "" {
		return uuid.Nil, nil
	}
	fail := func(err error) (uuid.UUID, error) {
		return uuid.Nil, fmt.Errorf("outboxmysql: park message %s of consumer %q behind its key %q in %s: %w", m.ID, consumer, m.Key, t.ParkedName(), err)
	}
	if len(m.Key) > MaxParkedKeyBytes {
		// No parked message can have such a key, so none holds it.
		return uuid.Nil, nil
	}
	args, err := parkedArgs(consumer, m)
	if err != nil {
		return fail(err)
	}
	var head uuid.UUID
	err = t.store.inTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		head = uuid.Nil
		var raw []byte
		err := tx.QueryRowContext(ctx, t.parked.head, []byte(consumer), []byte(m.Key)).Scan(&raw)
		if errors.Is(err, sql.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		if head, err = uuid.FromBytes(raw); err != nil {
			return err
		}
		reason := "waiting behind parked message " + head.String() + " of key " + m.Key
		_, err = tx.ExecContext(ctx, t.parked.behind, append(args, reason)...)
		return err
	})
	if err != nil {
		return fail(err)
	}
	return head, nil
}

// TakeNextWaiting returns consumer's first parked message of key if it
// waits and its retry is requested (the unpark or discard of the message
// before it requested it), and clears the request (outbox.KeyParkStore).
func (t *InboxTable) TakeNextWaiting(ctx context.Context, consumer, key string) (outbox.Message, bool, error) {
	p, ok, err := t.TakeNext(ctx, consumer, key)
	return p.Message, ok, err
}

// TakeNext is TakeNextWaiting, returning the message with its mark, as
// TakeRetry does.
//
// The unpark before it requested the retry of the next waiting message:
// TakeNext and a take of requested retries each take it only by clearing
// that request under the row's lock, so one of them hands it out, never
// both.
func (t *InboxTable) TakeNext(ctx context.Context, consumer, key string) (outbox.ParkedMessage, bool, error) {
	var parked []outbox.ParkedMessage
	err := t.store.inTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		parked = nil
		var (
			id                           []byte
			seq                          int64
			waiting, requested, notTaken bool
		)
		err := tx.QueryRowContext(ctx, t.parked.headLock, []byte(consumer), []byte(key)).Scan(&id, &seq, &waiting, &requested, &notTaken)
		if errors.Is(err, sql.ErrNoRows) {
			return nil
		}
		if err != nil || !waiting || !requested || !notTaken {
			return err
		}
		if _, err := tx.ExecContext(ctx, t.parked.takeOne, []byte(consumer), id); err != nil {
			return err
		}
		rows, err := tx.QueryContext(ctx, t.parked.selectRows+inList(1), []byte(consumer), id)
		if err != nil {
			return err
		}
		parked, err = scanParked(rows)
		return err
	})
	if err != nil {
		return outbox.ParkedMessage{}, false, fmt.Errorf("outboxmysql: take the next waiting message of key %q of consumer %q from %s: %w", key, consumer, t.ParkedName(), err)
	}
	if len(parked) == 0 {
		return outbox.ParkedMessage{}, false, nil
	}
	return parked[0], true, nil
}

// CountOvertaken adds one to Overtaken of consumer's parked messages of key
// (outbox.KeyParkStore).
func (t *InboxTable) CountOvertaken(ctx context.Context, consumer, key string) error {
	if _, err := t.writeCount(ctx, t.parked.overtaken, []byte(consumer), []byte(key)); err != nil {
		return fmt.Errorf("outboxmysql: count a message applied past the parked messages of key %q of consumer %q in %s: %w", key, consumer, t.ParkedName(), err)
	}
	return nil
}

// writeCount runs stmt with args in a transaction of the store and returns
// the rows it changed.
func (t *InboxTable) writeCount(ctx context.Context, stmt string, args ...any) (int, error) {
	var n int64
	err := t.store.inTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, stmt, args...)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	return int(n), err
}

// ParkedCounts counts each consumer's parked messages.
func (t *InboxTable) ParkedCounts(ctx context.Context) (map[string]int64, error) {
	return t.countParked(ctx, t.parked.counts)
}

// WaitingCounts counts each consumer's parked messages that wait behind
// another of their key (consumers with none are left out).
func (t *InboxTable) WaitingCounts(ctx context.Context) (map[string]int64, error) {
	return t.countParked(ctx, t.parked.waiting)
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

// countParked runs stmt, which returns consumers and counts.
func (t *InboxTable) countParked(ctx context.Context, stmt string) (map[string]int64, error) {
	rows, err := t.store.db.QueryContext(ctx, stmt)
	if err != nil {
		return nil, fmt.Errorf("outboxmysql: count parked messages in %s: %w", t.ParkedName(), err)
	}
	defer rows.Close()
	counts := map[string]int64{}
	for rows.Next() {
		var (
			consumer []byte
			n        int64
		)
		if err := rows.Scan(&consumer, &n); err != nil {
			return nil, fmt.Errorf("outboxmysql: count parked messages in %s: %w", t.ParkedName(), err)
		}
		counts[string(consumer)] = n
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("outboxmysql: count parked messages in %s: %w", t.ParkedName(), err)
	}
	return counts, nil
}
