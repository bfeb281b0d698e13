package outboxsqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/headerjson"
	"github.com/go-outbox/outbox/internal/sqlident"
	"github.com/go-outbox/outbox/internal/sqlrow"
)

var _ outbox.KeyParkStore = (*InboxTable)(nil)

// parkedStatements are the statements on the parked table that sits beside
// an inbox table: <table>_parked, one row per consumer and parked message.
// Times are microseconds since the Unix epoch, as in the inbox table.
type parkedStatements struct {
	name        string // main.table_parked
	create      string
	park        string // ?1 consumer, ?2 id, ?3 topic, ?4 key, ?5 headers, ?6 payload, ?7 created_at, ?8 error, ?9 attempts, ?10 now
	take        string // ?1 consumer, ?2 limit, ?3 now
	list        string // ?1 consumer or '', ?2 after, ?3 limit
	get         string // ?1 consumer or '', ?2 id
	retry       string // ?1 consumer, ?2 JSON array of ids (empty: all)
	remove      string // ?1 consumer, ?2 JSON array of ids: an unpark
	unparkTaken string // ?1 consumer, ?2 JSON array of ids, ?3 taken_at: the unpark of a retry's end
	discard     string // ?1 consumer, ?2 JSON array of ids
	counts      string

	parkAgain string // ?1 consumer, ?2 id, ?3 error, ?4 attempts, ?5 now, ?6 taken_at
	giveBack  string // ?1 consumer, ?2 id, ?3 taken_at
	forget    string // ?1 consumer, ?2 JSON array of ids (empty: all)
	stalled   string
	taken     string

	addCols   map[string]string // column -> the ALTER TABLE that adds it to a table of an older release
	head      string            // ?1 consumer, ?2 key
	behind    string            // ?1 consumer, ?2 id, ?3 topic, ?4 key, ?5 headers, ?6 payload, ?7 created_at, ?8 error, ?9 now
	next      string            // ?1 consumer, ?2 key, ?3 now
	release   string            // ?1 consumer, ?2 JSON array of the deleted rows' [key, seq]
	overtaken string            // ?1 consumer, ?2 key
	waiting   string
}

// parkedColumns are the columns scanParked reads, from the table aliased
// p; parkedSelect adds behind (a waiting message's key's first parked
// message) for a SELECT, parkedReturning leaves it NULL for a RETURNING.
const parkedColumns = `p.consumer, p.message_id, p.topic, p.key, p.headers, p.payload, p.created_at, p.error, p.attempts, p.parked_at, p.retry_requested, p.waiting, p.overtaken, p.taken_at`

func parkedSelect(q string) string {
	return parkedColumns + `, CASE WHEN p.waiting THEN (
	SELECT e.message_id FROM ` + q + ` AS e WHERE e.consumer = p.consumer AND e.key = p.key AND e.seq < p.seq ORDER BY e.seq LIMIT 1) END`
}

// parkedReturning is parkedColumns without the alias, which SQLite's
// RETURNING does not take.
const parkedReturning = `consumer, message_id, topic, key, headers, payload, created_at, error, attempts, parked_at, retry_requested, waiting, overtaken, taken_at, NULL`

// parkedKeyFirst is true of a row p that is the first parked message of its
// key for its consumer, in arrival order (seq), in table q.
func parkedKeyFirst(q string) string {
	return `NOT EXISTS (SELECT 1 FROM ` + q + ` AS e WHERE e.consumer = p.consumer AND e.key = p.key AND e.seq < p.seq)`
}

func newParkedStatements(table string) (parkedStatements, error) {
	name := table + "_parked"
	// SQLite has no length limit; the name only has to be one.
	if err := sqlident.Check("outboxsqlite.NewInboxTable table", name, MaxTableLength+len("_parked")); err != nil {
		return parkedStatements{}, err
	}
	q := sqlident.Quote(name)
	return parkedStatements{
		name: "main." + name,
		create: `CREATE TABLE IF NOT EXISTS ` + q + ` (
	consumer        TEXT    NOT NULL,
	message_id      TEXT    NOT NULL,
	topic           TEXT    NOT NULL,
	key             TEXT    NOT NULL DEFAULT '',
	headers         TEXT    NULL,
	payload         BLOB    NOT NULL,
	created_at      INTEGER NULL,
	error           TEXT    NOT NULL,
	attempts        INTEGER NOT NULL,
	parked_at       INTEGER NOT NULL,
	retry_requested INTEGER NOT NULL DEFAULT 0,
	seq             INTEGER NOT NULL DEFAULT 0,
	waiting         INTEGER NOT NULL DEFAULT 0,
	overtaken       INTEGER NOT NULL DEFAULT 0,
	taken_at        INTEGER NULL,
	PRIMARY KEY (consumer, message_id)
) STRICT, WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS ` + sqlident.Quote(name+"_retry_idx") + ` ON ` + q + ` (consumer, parked_at) WHERE retry_requested;
CREATE INDEX IF NOT EXISTS ` + sqlident.Quote(name+"_key_idx") + ` ON ` + q + ` (consumer, key, seq)`,
		// Rows of an older release keep seq 0: their order among
		// themselves is their id's, which is their creation order.
		addCols: map[string]string{
			"seq":       `ALTER TABLE ` + q + ` ADD COLUMN seq INTEGER NOT NULL DEFAULT 0`,
			"waiting":   `ALTER TABLE ` + q + ` ADD COLUMN waiting INTEGER NOT NULL DEFAULT 0`,
			"overtaken": `ALTER TABLE ` + q + ` ADD COLUMN overtaken INTEGER NOT NULL DEFAULT 0`,
			"taken_at":  `ALTER TABLE ` + q + ` ADD COLUMN taken_at INTEGER NULL`,
		},
		// Write transactions take turns, so max(seq) + 1 is the arrival
		// order. A message parked after a failure is a key's head: it
		// waits for nobody, even when it was retried from waiting.
		park: `INSERT INTO ` + q + ` (consumer, message_id, topic, key, headers, payload, created_at, error, attempts, parked_at, seq)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, (SELECT coalesce(max(seq), 0) + 1 FROM ` + q + `))
ON CONFLICT (consumer, message_id) DO UPDATE SET error = excluded.error, attempts = excluded.attempts, parked_at = excluded.parked_at, retry_requested = 0, waiting = 0,
	taken_at = NULL`,
		// A waiting message is taken only as its key's first (RequestRetry
		// marks no other, but a retry requested before the message ahead
		// of it was parked again may remain).
		// The message is taken: in the taker's handler until it unparks
		// or parks it again. A taken one is not taken again even if its
		// retry is requested (by a client older than taken_at): it is
		// in a handler already. ?3 now.
		take: `UPDATE ` + q + ` SET retry_requested = 0, taken_at = ?3 WHERE (consumer, message_id) IN (
	SELECT consumer, message_id FROM ` + q + ` AS p WHERE consumer = ?1 AND retry_requested AND taken_at IS NULL AND (NOT waiting OR ` + parkedKeyFirst(q) + `)
	ORDER BY parked_at LIMIT ?2) AND retry_requested AND taken_at IS NULL
RETURNING ` + parkedReturning,
		list: `SELECT ` + parkedSelect(q) + ` FROM ` + q + ` AS p WHERE (?1 = '' OR consumer = ?1) AND message_id > ?2 ORDER BY message_id, consumer LIMIT ?3`,
		get:  `SELECT ` + parkedSelect(q) + ` FROM ` + q + ` AS p WHERE (?1 = '' OR consumer = ?1) AND message_id = ?2 ORDER BY consumer LIMIT 2`,
		// A taken message is in a handler: requested again, a second
		// process would take it.
		retry: `UPDATE ` + q + ` SET retry_requested = 1 WHERE (consumer, message_id) IN (
	SELECT consumer, message_id FROM ` + q + ` AS p WHERE consumer = ?1 AND (?2 = '[]' OR message_id IN (SELECT value FROM json_each(?2)))
	AND taken_at IS NULL AND (NOT waiting OR ` + parkedKeyFirst(q) + `))`,
		remove: `DELETE FROM ` + q + ` WHERE consumer = ?1 AND message_id IN (SELECT value FROM json_each(?2)) RETURNING key, seq`,
		// A retry's end acts only on its own take: an operator may
		// have taken the message back and another process taken it.
		unparkTaken: `DELETE FROM ` + q + ` WHERE consumer = ?1 AND message_id IN (SELECT value FROM json_each(?2)) AND taken_at = ?3 RETURNING key, seq`,
		// A taken message is in a handler: discarded, its key would go
		// on while it is applied, and a failure would park it again as
		// a new head.
		discard: `DELETE FROM ` + q + ` WHERE consumer = ?1 AND message_id IN (SELECT value FROM json_each(?2)) AND taken_at IS NULL RETURNING key, seq`,
		// In place: the row keeps its seq, its place in its key's order.
		parkAgain: `UPDATE ` + q + ` SET error = ?3, attempts = ?4, parked_at = ?5, retry_requested = 0, waiting = 0, taken_at = NULL
WHERE consumer = ?1 AND message_id = ?2 AND taken_at = ?6`,
		giveBack: `UPDATE ` + q + ` SET taken_at = NULL, retry_requested = 1 WHERE consumer = ?1 AND message_id = ?2 AND taken_at = ?3`,
		forget:   `UPDATE ` + q + ` SET taken_at = NULL WHERE consumer = ?1 AND (?2 = '[]' OR message_id IN (SELECT value FROM json_each(?2))) AND taken_at IS NOT NULL`,
		// First of its key and waiting, yet nobody requested it nor took
		// it: nothing will apply it, nor the rest of its key.
		stalled: `SELECT consumer, count(*) FROM ` + q + ` AS p WHERE waiting AND NOT retry_requested AND taken_at IS NULL AND ` + parkedKeyFirst(q) + `
GROUP BY consumer ORDER BY consumer`,
		taken:  `SELECT consumer, count(*) FROM ` + q + ` WHERE taken_at IS NOT NULL GROUP BY consumer ORDER BY consumer`,
		counts: `SELECT consumer, count(*) FROM ` + q + ` GROUP BY consumer ORDER BY consumer`,
		head:   `SELECT message_id FROM ` + q + ` WHERE consumer = ?1 AND key = ?2 ORDER BY seq LIMIT 1`,
		behind: `INSERT INTO ` + q + ` (consumer, message_id, topic, key, headers, payload, created_at, error, attempts, parked_at, waiting, seq)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, 0, ?9, 1, (SELECT coalesce(max(seq), 0) + 1 FROM ` + q + `))
ON CONFLICT (consumer, message_id) DO NOTHING`,
		// The unpark before it requested the retry of the next waiting
		// message: next and take each take it only by clearing that
		// request, so one of them hands it out, never both.
		next: `UPDATE ` + q + ` SET retry_requested = 0, taken_at = ?3 WHERE (consumer, message_id) IN (
	SELECT consumer, message_id FROM ` + q + ` WHERE consumer = ?1 AND key = ?2 ORDER BY seq LIMIT 1) AND waiting AND retry_requested AND taken_at IS NULL
RETURNING ` + parkedReturning,
		// A deleted head (unparked or discarded) passes its key on: the
		// key's next message, if it waits, is requested for a retry, in
		// the delete's transaction, so that a process that stops before
		// it takes that message (TakeNextWaiting) leaves it requested,
		// not stalled. p.seq > the deleted seq leaves a key alone whose
		// first row was not deleted: that one may be in a handler
		// already.
		release: `UPDATE ` + q + ` SET retry_requested = 1 WHERE (consumer, message_id) IN (
	SELECT consumer, message_id FROM ` + q + ` AS p WHERE consumer = ?1 AND waiting AND ` + parkedKeyFirst(q) + `
	AND EXISTS (SELECT 1 FROM json_each(?2) AS d WHERE json_extract(d.value, '$[0]') = p.key AND json_extract(d.value, '$[1]') < p.seq))`,
		overtaken: `UPDATE ` + q + ` SET overtaken = overtaken + 1 WHERE consumer = ?1 AND key = ?2`,
		waiting:   `SELECT consumer, count(*) FROM ` + q + ` WHERE waiting GROUP BY consumer ORDER BY consumer`,
	}, nil
}

// scanParked reads every row of parkedColumns and closes rows.
func scanParked(rows *sql.Rows) ([]outbox.ParkedMessage, error) {
	defer rows.Close()
	var parked []outbox.ParkedMessage
	for rows.Next() {
		var (
			p                   outbox.ParkedMessage
			id                  string
			headers             sql.NullString
			createdAt           sql.NullInt64
			parkedAt            int64
			payload             []byte
			retry, attemptsRead int64
			waiting, overtaken  int64
			takenAt             sql.NullInt64
			behind              sql.NullString
		)
		if err := rows.Scan(&p.Consumer, &id, &p.Topic, &p.Key, &headers, &payload, &createdAt, &p.Error, &attemptsRead, &parkedAt, &retry,
			&waiting, &overtaken, &takenAt, &behind); err != nil {
			return nil, err
		}
		var err error
		if p.ID, err = uuid.Parse(id); err != nil {
			return nil, fmt.Errorf("parked message id %q of consumer %q: %w", id, p.Consumer, err)
		}
		if behind.Valid {
			if p.Behind, err = uuid.Parse(behind.String); err != nil {
				return nil, fmt.Errorf("parked message id %q of consumer %q: %w", behind.String, p.Consumer, err)
			}
		}
		p.Waiting, p.Overtaken = waiting != 0, int(overtaken)
		if headers.Valid {
			if p.Headers, err = headerjson.Decode([]byte(headers.String)); err != nil {
				return nil, fmt.Errorf("parked message %s of consumer %q: %w", p.ID, p.Consumer, err)
			}
		}
		p.Payload = append([]byte{}, payload...)
		if createdAt.Valid {
			p.CreatedAt = time.UnixMicro(createdAt.Int64).UTC()
		}
		p.Attempts = int(attemptsRead)
		p.ParkedAt = time.UnixMicro(parkedAt).UTC()
		p.RetryRequested = retry != 0
		if takenAt.Valid {
			p.TakenAt = time.UnixMicro(takenAt.Int64).UTC()
		}
		parked = append(parked, p)
	}
	return parked, rows.Err()
}

// ParkedName returns "main.<table>_parked", the table of parked messages
// beside the inbox table, which Migrate creates.
func (t *InboxTable) ParkedName() string { return t.parked.name }

// Park keeps m as parked by consumer (outbox.ParkStore): a consumer adapter
// whose config's Parked is t calls it for a message its handler keeps
// failing on, before it acknowledges the delivery.
func (t *InboxTable) Park(ctx context.Context, consumer string, m outbox.Message, attempts int, reason string) error {
	headers, payload, createdAt, err := parkedFields(m)
	if err != nil {
		return fmt.Errorf("outboxsqlite: park message %s in %s: %w", m.ID, t.parked.name, err)
	}
	err = t.store.RunInTx(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, t.parked.park, consumer, m.ID.String(), m.Topic, m.Key, headers, payload, createdAt, sqlrow.StorableText(reason), attempts, time.Now().UnixMicro())
		return err
	})
	if err != nil {
		return fmt.Errorf("outboxsqlite: park message %s of consumer %q in %s: %w", m.ID, consumer, t.parked.name, err)
	}
	return nil
}

// parkedFields are the arguments of m's headers, payload and creation time
// in the statements that park it.
func parkedFields(m outbox.Message) (headers sql.NullString, payload []byte, createdAt sql.NullInt64, err error) {
	if len(m.Headers) > 0 {
		b, err := json.Marshal(m.Headers)
		if err != nil {
			return headers, nil, createdAt, fmt.Errorf("encode headers: %w", err)
		}
		headers = sql.NullString{String: string(b), Valid: true}
	}
	payload = m.Payload
	if payload == nil {
		payload = []byte{}
	}
	if !m.CreatedAt.IsZero() {
		createdAt = sql.NullInt64{Int64: m.CreatedAt.UnixMicro(), Valid: true}
	}
	return headers, payload, createdAt, nil
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
	err := t.store.RunInTx(ctx, func(tx *sql.Tx) error {
		rows, err := tx.QueryContext(ctx, t.parked.take, consumer, limit, time.Now().UnixMicro())
		if err != nil {
			return err
		}
		parked, err = scanParked(rows)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("outboxsqlite: take the retries of consumer %q from %s: %w", consumer, t.parked.name, err)
	}
	return parked, nil
}

// Unpark forgets consumer's parked message id (outbox.ParkStore). If it
// was its key's first, the key's next message, if it waits, is requested
// for a retry in the same transaction (outbox.KeyParkStore).
func (t *InboxTable) Unpark(ctx context.Context, consumer string, id uuid.UUID) error {
	if _, err := t.deleteParked(ctx, t.parked.remove, consumer, []uuid.UUID{id}); err != nil {
		return fmt.Errorf("outboxsqlite: unpark message %s of consumer %q in %s: %w", id, consumer, t.parked.name, err)
	}
	return nil
}

// writeCount runs stmt with args in a write transaction and returns the
// rows it changed.
func (t *InboxTable) writeCount(ctx context.Context, stmt string, args ...any) (int, error) {
	var n int64
	err := t.store.RunInTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, stmt, args...)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	return int(n), err
}

// ListParked returns up to limit parked messages of consumer ("" for every
// consumer) whose id comes after after (uuid.Nil to start), in id order.
func (t *InboxTable) ListParked(ctx context.Context, consumer string, after uuid.UUID, limit int) ([]outbox.ParkedMessage, error) {
	rows, err := t.store.DB().QueryContext(ctx, t.parked.list, consumer, after.String(), limit)
	if err == nil {
		var parked []outbox.ParkedMessage
		if parked, err = scanParked(rows); err == nil {
			return parked, nil
		}
	}
	return nil, fmt.Errorf("outboxsqlite: list parked messages in %s: %w", t.parked.name, err)
}

// GetParked returns the parked message id of consumer ("" for whichever
// consumer parked it: an error if several did). It returns an error
// wrapping outbox.ErrNotFound if there is none.
func (t *InboxTable) GetParked(ctx context.Context, consumer string, id uuid.UUID) (outbox.ParkedMessage, error) {
	rows, err := t.store.DB().QueryContext(ctx, t.parked.get, consumer, id.String())
	if err != nil {
		return outbox.ParkedMessage{}, fmt.Errorf("outboxsqlite: get parked message %s from %s: %w", id, t.parked.name, err)
	}
	parked, err := scanParked(rows)
	if err != nil {
		return outbox.ParkedMessage{}, fmt.Errorf("outboxsqlite: get parked message %s from %s: %w", id, t.parked.name, err)
	}
	switch {
	case len(parked) == 0 && consumer == "":
		return outbox.ParkedMessage{}, fmt.Errorf("outboxsqlite: no consumer parked message %s in %s: %w", id, t.parked.name, outbox.ErrNotFound)
	case len(parked) == 0:
		return outbox.ParkedMessage{}, fmt.Errorf("outboxsqlite: consumer %q parked no message %s in %s: %w", consumer, id, t.parked.name, outbox.ErrNotFound)
	case len(parked) > 1:
		return outbox.ParkedMessage{}, fmt.Errorf("outboxsqlite: message %s is parked by consumers %q, %q and maybe more in %s; name one", id, parked[0].Consumer, parked[1].Consumer, t.parked.name)
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
		return 0, errors.New("outboxsqlite: request a retry of parked messages: no consumer; name the consumer that parked them")
	}
	n, err := t.writeCount(ctx, t.parked.retry, consumer, idsJSON(ids))
	if err != nil {
		return 0, fmt.Errorf("outboxsqlite: request a retry of parked messages of consumer %q in %s: %w", consumer, t.parked.name, err)
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
		return 0, errors.New("outboxsqlite: discard parked messages: no consumer; name the consumer that parked them")
	}
	if len(ids) == 0 {
		return 0, nil
	}
	n, err := t.deleteParked(ctx, t.parked.discard, consumer, ids)
	if err != nil {
		return 0, fmt.Errorf("outboxsqlite: discard parked messages of consumer %q in %s: %w", consumer, t.parked.name, err)
	}
	return n, nil
}

// deleteParked deletes consumer's parked messages ids with remove (remove
// or discard), and passes on the keys whose first message it deleted
// (release), in one transaction. It returns how many it deleted. Writers
// take turns, so two deletes of one key never overlap.
func (t *InboxTable) deleteParked(ctx context.Context, remove, consumer string, ids []uuid.UUID, args ...any) (int, error) {
	var deleted [][2]any // key, seq
	err := t.store.RunInTx(ctx, func(tx *sql.Tx) error {
		deleted = deleted[:0]
		rows, err := tx.QueryContext(ctx, remove, append([]any{consumer, idsJSON(ids)}, args...)...)
		if err != nil {
			return err
		}
		for rows.Next() {
			var (
				key string
				seq int64
			)
			if err := rows.Scan(&key, &seq); err != nil {
				rows.Close()
				return err
			}
			deleted = append(deleted, [2]any{key, seq})
		}
		rows.Close()
		if err := rows.Err(); err != nil || len(deleted) == 0 {
			return err
		}
		b, err := json.Marshal(deleted)
		if err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, t.parked.release, consumer, string(b))
		return err
	})
	return len(deleted), err
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

// countParked runs stmt, which returns consumers and counts.
func (t *InboxTable) countParked(ctx context.Context, stmt string) (map[string]int64, error) {
	rows, err := t.store.DB().QueryContext(ctx, stmt)
	if err != nil {
		return nil, fmt.Errorf("outboxsqlite: count parked messages in %s: %w", t.parked.name, err)
	}
	defer rows.Close()
	counts := map[string]int64{}
	for rows.Next() {
		var (
			consumer string
			n        int64
		)
		if err := rows.Scan(&consumer, &n); err != nil {
			return nil, fmt.Errorf("outboxsqlite: count parked messages in %s: %w", t.parked.name, err)
		}
		counts[consumer] = n
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("outboxsqlite: count parked messages in %s: %w", t.parked.name, err)
	}
	return counts, nil
}

// ParkBehind parks m as waiting behind consumer's parked messages of its key
// and returns the key's head, or parks nothing and returns uuid.Nil if the
// key has none (outbox.KeyParkStore). A message with no key is never held.
func (t *InboxTable) ParkBehind(ctx context.Context, consumer string, m outbox.Message) (uuid.UUID, error) {
	if m.Key == "" {
		return uuid.Nil, nil
	}
	fail := func(err error) (uuid.UUID, error) {
		return uuid.Nil, fmt.Errorf("outboxsqlite: park message %s of consumer %q behind its key %q in %s: %w", m.ID, consumer, m.Key, t.parked.name, err)
	}
	// Most keys have no parked message: a read finds it without the
	// write lock. One that finds a head looks again under the lock, where
	// the head and the new row are one step against an unpark.
	var head string
	err := t.store.DB().QueryRowContext(ctx, t.parked.head, consumer, m.Key).Scan(&head)
	if errors.Is(err, sql.ErrNoRows) {
		return uuid.Nil, nil
	}
	if err != nil {
		return fail(err)
	}
	headers, payload, createdAt, err := parkedFields(m)
	if err != nil {
		return fail(err)
	}
	err = t.store.RunInTx(ctx, func(tx *sql.Tx) error {
		head = ""
		err := tx.QueryRowContext(ctx, t.parked.head, consumer, m.Key).Scan(&head)
		if errors.Is(err, sql.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		reason := "waiting behind parked message " + head + " of key " + m.Key
		_, err = tx.ExecContext(ctx, t.parked.behind, consumer, m.ID.String(), m.Topic, m.Key, headers, payload, createdAt, reason, time.Now().UnixMicro())
		return err
	})
	if err != nil {
		return fail(err)
	}
	if head == "" {
		return uuid.Nil, nil
	}
	id, err := uuid.Parse(head)
	if err != nil {
		return fail(err)
	}
	return id, nil
}

// TakeNextWaiting returns consumer's first parked message of key if it
// waits and its retry is requested (the unpark or discard of the message
// before it requested it), and clears the request (outbox.KeyParkStore).
func (t *InboxTable) TakeNextWaiting(ctx context.Context, consumer, key string) (outbox.Message, bool, error) {
	p, ok, err := t.TakeNext(ctx, consumer, key)
	return p.Message, ok, err
}

// CountOvertaken adds one to Overtaken of consumer's parked messages of key
// (outbox.KeyParkStore).
func (t *InboxTable) CountOvertaken(ctx context.Context, consumer, key string) error {
	// Most keys have no parked message: a read finds it without the
	// write lock.
	var head string
	err := t.store.DB().QueryRowContext(ctx, t.parked.head, consumer, key).Scan(&head)
	if errors.Is(err, sql.ErrNoRows) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("outboxsqlite: count a message applied past the parked messages of key %q of consumer %q in %s: %w", key, consumer, t.parked.name, err)
	}
	if _, err := t.writeCount(ctx, t.parked.overtaken, consumer, key); err != nil {
		return fmt.Errorf("outboxsqlite: count a message applied past the parked messages of key %q of consumer %q in %s: %w", key, consumer, t.parked.name, err)
	}
	return nil
}
