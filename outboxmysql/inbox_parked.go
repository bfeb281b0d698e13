package outboxmysql

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/google/uuid"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/headerjson"
	"github.com/go-outbox/outbox/internal/sqlrow"
)

var _ outbox.KeyParkStore = (*InboxTable)(nil)

// scanParked reads every row of parkedColumns and behind, and closes rows.
func scanParked(rows *sql.Rows) ([]outbox.ParkedMessage, error) {
	defer rows.Close()
	var parked []outbox.ParkedMessage
	for rows.Next() {
		var (
			p                          outbox.ParkedMessage
			consumer, id, topic, key   []byte
			behind                     []byte
			headers                    sql.NullString
			createdAt, parkedAt, taken utcTime
		)
		if err := rows.Scan(&consumer, &id, &topic, &key, &headers, &p.Payload, &createdAt, &p.Error, &p.Attempts, &parkedAt,
			&p.RetryRequested, &p.Waiting, &p.Overtaken, &taken, &behind); err != nil {
			return nil, err
		}
		p.Consumer, p.Topic, p.Key = string(consumer), string(topic), string(key)
		var err error
		if p.ID, err = uuid.FromBytes(id); err != nil {
			return nil, fmt.Errorf("parked message id %x of consumer %q: %w", id, p.Consumer, err)
		}
		if behind != nil {
			if p.Behind, err = uuid.FromBytes(behind); err != nil {
				return nil, fmt.Errorf("parked message id %x of consumer %q: %w", behind, p.Consumer, err)
			}
		}
		if headers.Valid {
			if p.Headers, err = headerjson.Decode([]byte(headers.String)); err != nil {
				return nil, fmt.Errorf("parked message %s of consumer %q: %w", p.ID, p.Consumer, err)
			}
		}
		if p.Payload == nil {
			p.Payload = []byte{}
		}
		p.CreatedAt, p.ParkedAt, p.TakenAt = createdAt.Time, parkedAt.Time, taken.Time
		parked = append(parked, p)
	}
	return parked, rows.Err()
}

// ParkedName returns "<table>_parked", the table of parked messages beside
// the inbox table, which Migrate creates.
func (t *InboxTable) ParkedName() string { return t.table + "_parked" }

// Park keeps m as parked by consumer (outbox.ParkStore): a consumer adapter
// whose config's Parked is t calls it for a message its handler keeps
// failing on, before it acknowledges the delivery.
func (t *InboxTable) Park(ctx context.Context, consumer string, m outbox.Message, attempts int, reason string) error {
	args, err := parkedArgs(consumer, m)
	if err != nil {
		return fmt.Errorf("outboxmysql: park message %s in %s: %w", m.ID, t.ParkedName(), err)
	}
	err = t.store.inTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, t.parked.park, append(args, sqlrow.StorableText(reason), attempts)...)
		return err
	})
	if err != nil {
		return fmt.Errorf("outboxmysql: park message %s of consumer %q in %s: %w", m.ID, consumer, t.ParkedName(), err)
	}
	return nil
}

// parkedArgs are the arguments consumer, id, topic, key, headers, payload
// and created_at of the statements that park m.
func parkedArgs(consumer string, m outbox.Message) ([]any, error) {
	if len(m.Key) > MaxParkedKeyBytes {
		return nil, fmt.Errorf("key of %d bytes is longer than the parked table holds (%d)", len(m.Key), MaxParkedKeyBytes)
	}
	var headers sql.NullString
	if len(m.Headers) > 0 {
		b, err := json.Marshal(m.Headers)
		if err != nil {
			return nil, fmt.Errorf("encode headers: %w", err)
		}
		headers = sql.NullString{String: string(b), Valid: true}
	}
	payload := m.Payload
	if payload == nil {
		payload = []byte{}
	}
	var createdAt sql.NullString
	if !m.CreatedAt.IsZero() {
		createdAt = sql.NullString{String: datetime(m.CreatedAt, false), Valid: true}
	}
	return []any{[]byte(consumer), m.ID[:], []byte(m.Topic), []byte(m.Key), headers, payload, createdAt}, nil
}

// TakeRetries returns up to limit of consumer's parked messages whose retry
// was requested and clears their request (outbox.ParkStore).
func (t *InboxTable) TakeRetries(ctx context.Context, consumer string, limit int) ([]outbox.Message, error) {
	parked, err := t.takeParked(ctx, consumer, limit)
	if err != nil {
		return nil, err
	}
	msgs := make([]outbox.Message, len(parked))
	for i, p := range parked {
		msgs[i] = p.Message
	}
	return msgs, nil
}

func (t *InboxTable) takeParked(ctx context.Context, consumer string, limit int) ([]outbox.ParkedMessage, error) {
	var parked []outbox.ParkedMessage
	err := t.store.inTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		parked = nil
		ids, err := queryIDs(ctx, tx, t.parked.pickTake, []byte(consumer), limit)
		if err != nil || len(ids) == 0 {
			return err
		}
		args := append([]any{[]byte(consumer)}, idArgs(ids)...)
		if _, err := tx.ExecContext(ctx, t.parked.takeRows+inList(len(ids)), args...); err != nil {
			return err
		}
		rows, err := tx.QueryContext(ctx, t.parked.selectRows+inList(len(ids))+` ORDER BY p.parked_at, p.message_id`, args...)
		if err != nil {
			return err
		}
		parked, err = scanParked(rows)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("outboxmysql: take the retries of consumer %q from %s: %w", consumer, t.ParkedName(), err)
	}
	return parked, nil
}

// Unpark forgets consumer's parked message id (outbox.ParkStore). If it
// was its key's first, the key's next message, if it waits, is requested
// for a retry in the same transaction (outbox.KeyParkStore).
func (t *InboxTable) Unpark(ctx context.Context, consumer string, id uuid.UUID) error {
	if _, err := t.deleteParked(ctx, consumer, []uuid.UUID{id}, ""); err != nil {
		return fmt.Errorf("outboxmysql: unpark message %s of consumer %q in %s: %w", id, consumer, t.ParkedName(), err)
	}
	return nil
}

// ListParked returns up to limit parked messages of consumer ("" for every
// consumer) whose id comes after after (uuid.Nil to start), in id order.
func (t *InboxTable) ListParked(ctx context.Context, consumer string, after uuid.UUID, limit int) ([]outbox.ParkedMessage, error) {
	rows, err := t.store.db.QueryContext(ctx, t.parked.list, []byte(consumer), []byte(consumer), after[:], limit)
	if err == nil {
		var parked []outbox.ParkedMessage
		if parked, err = scanParked(rows); err == nil {
			return parked, nil
		}
	}
	return nil, fmt.Errorf("outboxmysql: list parked messages in %s: %w", t.ParkedName(), err)
}

// GetParked returns the parked message id of consumer ("" for whichever
// consumer parked it: an error if several did). It returns an error
// wrapping outbox.ErrNotFound if there is none.
func (t *InboxTable) GetParked(ctx context.Context, consumer string, id uuid.UUID) (outbox.ParkedMessage, error) {
	rows, err := t.store.db.QueryContext(ctx, t.parked.get, []byte(consumer), []byte(consumer), id[:])
	if err != nil {
		return outbox.ParkedMessage{}, fmt.Errorf("outboxmysql: get parked message %s from %s: %w", id, t.ParkedName(), err)
	}
	parked, err := scanParked(rows)
	if err != nil {
		return outbox.ParkedMessage{}, fmt.Errorf("outboxmysql: get parked message %s from %s: %w", id, t.ParkedName(), err)
	}
	switch {
	case len(parked) == 0 && consumer == "":
		return outbox.ParkedMessage{}, fmt.Errorf("outboxmysql: no consumer parked message %s in %s: %w", id, t.ParkedName(), outbox.ErrNotFound)
	case len(parked) == 0:
		return outbox.ParkedMessage{}, fmt.Errorf("outboxmysql: consumer %q parked no message %s in %s: %w", consumer, id, t.ParkedName(), outbox.ErrNotFound)
	case len(parked) > 1:
		return outbox.ParkedMessage{}, fmt.Errorf("outboxmysql: message %s is parked by consumers %q, %q and maybe more in %s; name one",
			id, parked[0].Consumer, parked[1].Consumer, t.ParkedName())
	}
	return parked[0], nil
}

// RequestRetry asks the running processes of consumer to handle its parked
// messages ids again (all of them when no id is given), and returns how many
// parked messages it found. One of the processes takes each request
// (TakeRetries) within its consumer's retry poll. A message a process took
// already (ParkedMessage.TakenAt) is left alone, not counted: it is in a
// handler; ForgetTaken first if that process stopped.
func (t *InboxTable) RequestRetry(ctx context.Context, consumer string, ids ...uuid.UUID) (int, error) {
	if consumer == "" {
		return 0, errors.New("outboxmysql: request a retry of parked messages: no consumer; name the consumer that parked them")
	}
	var n int
	err := t.store.inTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		n = 0
		// A retry of all finds its rows in one read; one of many ids
		// reads them in chunks, within MySQL's limit on placeholders.
		batches := [][]uuid.UUID{nil}
		if len(ids) > 0 {
			batches = slices.Collect(chunks(ids, moveChunk))
		}
		for _, batch := range batches {
			stmt, args := t.parked.pickRetry, []any{[]byte(consumer)}
			if batch != nil {
				stmt, args = stmt+` AND p.message_id IN `+inList(len(batch)), append(args, idArgs(batch)...)
			}
			found, err := queryIDs(ctx, tx, stmt+` FOR UPDATE`, args...)
			if err != nil {
				return err
			}
			// MySQL counts changed rows: one requested already counts
			// as found all the same.
			n += len(found)
			for chunk := range chunks(found, moveChunk) {
				if _, err := tx.ExecContext(ctx, t.parked.retryRows+inList(len(chunk)), append([]any{[]byte(consumer)}, idArgs(chunk)...)...); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("outboxmysql: request a retry of parked messages of consumer %q in %s: %w", consumer, t.ParkedName(), err)
	}
	return n, nil
}

// DiscardParked deletes consumer's parked messages ids for good, and returns
// how many it found. With no ids it deletes nothing. A discarded head of a
// key passes the key on: its next message, if it waits, is requested for a
// retry, and the consumer applies it and those behind it in order. A
// message a consumer process took for a retry (ParkedMessage.TakenAt) is
// left alone, not counted: it is in a handler; ForgetTaken first if that
// process stopped.
func (t *InboxTable) DiscardParked(ctx context.Context, consumer string, ids ...uuid.UUID) (int, error) {
	if consumer == "" {
		return 0, errors.New("outboxmysql: discard parked messages: no consumer; name the consumer that parked them")
	}
	if len(ids) == 0 {
		return 0, nil
	}
	n := 0
	for chunk := range chunks(ids, moveChunk) {
		d, err := t.deleteParked(ctx, consumer, chunk, ` AND taken_at IS NULL`)
		if err != nil {
			return n, fmt.Errorf("outboxmysql: discard parked messages of consumer %q in %s: %w", consumer, t.ParkedName(), err)
		}
		n += d
	}
	return n, nil
}

// deleteParked deletes consumer's parked messages ids that meet cond (with
// its arguments args), and passes on the keys whose first message it
// deleted, in one transaction. It returns how many it deleted.
func (t *InboxTable) deleteParked(ctx context.Context, consumer string, ids []uuid.UUID, cond string, args ...any) (int, error) {
	var n int
	err := t.store.inTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		n = 0
		byID := append([]any{[]byte(consumer)}, idArgs(ids)...)
		keys, err := readStrings(ctx, tx, t.parked.keysOf+inList(len(ids)), byID...)
		if err != nil {
			return err
		}
		if len(keys) > 0 {
			slices.Sort(keys)
			keyArgs := []any{[]byte(consumer)}
			for _, k := range keys {
				keyArgs = append(keyArgs, []byte(k))
			}
			rows, err := tx.QueryContext(ctx, t.parked.lockKeys+inList(len(keys))+" ORDER BY `key`, seq FOR UPDATE", keyArgs...)
			if err != nil {
				return err
			}
			if err := rows.Close(); err != nil {
				return err
			}
		}
		rows, err := tx.QueryContext(ctx, t.parked.pickDelete+inList(len(ids))+cond+` FOR UPDATE`, append(byID, args...)...)
		if err != nil {
			return err
		}
		var (
			deleted []uuid.UUID
			firstOf = map[string]int64{} // the least seq deleted of each key
		)
		for rows.Next() {
			var (
				raw, key []byte
				seq      int64
			)
			if err := rows.Scan(&raw, &key, &seq); err != nil {
				rows.Close()
				return err
			}
			id, err := uuid.FromBytes(raw)
			if err != nil {
				rows.Close()
				return err
			}
			deleted = append(deleted, id)
			if s, ok := firstOf[string(key)]; len(key) > 0 && (!ok || seq < s) {
				firstOf[string(key)] = seq
			}
		}
		if err := errors.Join(rows.Err(), rows.Close()); err != nil || len(deleted) == 0 {
			return err
		}
		if _, err := tx.ExecContext(ctx, t.parked.deleteRows+inList(len(deleted)), append([]any{[]byte(consumer)}, idArgs(deleted)...)...); err != nil {
			return err
		}
		n = len(deleted)
		return t.release(ctx, tx, consumer, firstOf)
	})
	return n, err
}

// release passes on each key whose messages from seq on were deleted: the
// key's first message now, if it waits and came after them, is requested
// for a retry, in the delete's transaction, so that a process that stops
// before it takes that message (TakeNextWaiting) leaves it requested, not
// stalled. A key whose first row was not deleted is left alone: that one
// may be in a handler already. The read of the first row is a locking
// read, which sees the newest committed rows and waits for rows others
// are changing: it meets a row that an overlapping delete removes, or
// that a concurrent ParkBehind adds behind the deleted one (which holds
// the key's first row in share mode until it commits), only once that
// has committed, and so passes the key to the row that is first then.
func (t *InboxTable) release(ctx context.Context, tx *sql.Tx, consumer string, firstOf map[string]int64) error {
	// In key order, as the key's rows were locked.
	for _, key := range slices.Sorted(maps.Keys(firstOf)) {
		deletedSeq := firstOf[key]
		var (
			id                           []byte
			seq                          int64
			waiting, requested, notTaken bool
		)
		err := tx.QueryRowContext(ctx, t.parked.headLock, []byte(consumer), []byte(key)).Scan(&id, &seq, &waiting, &requested, &notTaken)
		if errors.Is(err, sql.ErrNoRows) {
			continue
		}
		if err != nil {
			return err
		}
		if !waiting || seq < deletedSeq {
			continue
		}
		if _, err := tx.ExecContext(ctx, t.parked.requestOne, []byte(consumer), id); err != nil {
			return err
		}
	}
	return nil
}

// readStrings runs the query stmt, which returns one column, and reads it.
func readStrings(ctx context.Context, tx *sql.Tx, stmt string, args ...any) ([]string, error) {
	rows, err := tx.QueryContext(ctx, stmt, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var b []byte
		if err := rows.Scan(&b); err != nil {
			return nil, err
		}
		out = append(out, string(b))
	}
	return out, rows.Err()
}
