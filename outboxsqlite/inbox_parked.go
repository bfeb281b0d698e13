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
)

var _ outbox.ParkStore = (*InboxTable)(nil)

// parkedStatements are the statements on the parked table that sits beside
// an inbox table: <table>_parked, one row per consumer and parked message.
// Times are microseconds since the Unix epoch, as in the inbox table.
type parkedStatements struct {
	name    string // main.table_parked
	create  string
	park    string // ?1 consumer, ?2 id, ?3 topic, ?4 key, ?5 headers, ?6 payload, ?7 created_at, ?8 error, ?9 attempts, ?10 now
	take    string // ?1 consumer, ?2 limit
	unpark  string // ?1 consumer, ?2 id
	list    string // ?1 consumer or '', ?2 after, ?3 limit
	get     string // ?1 consumer or '', ?2 id
	retry   string // ?1 consumer, ?2 JSON array of ids (empty: all)
	discard string // ?1 consumer, ?2 JSON array of ids
	counts  string
}

const parkedColumns = `consumer, message_id, topic, key, headers, payload, created_at, error, attempts, parked_at, retry_requested`

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
	PRIMARY KEY (consumer, message_id)
) STRICT, WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS ` + sqlident.Quote(name+"_retry_idx") + ` ON ` + q + ` (consumer, parked_at) WHERE retry_requested`,
		park: `INSERT INTO ` + q + ` (consumer, message_id, topic, key, headers, payload, created_at, error, attempts, parked_at)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)
ON CONFLICT (consumer, message_id) DO UPDATE SET error = excluded.error, attempts = excluded.attempts, parked_at = excluded.parked_at, retry_requested = 0`,
		take: `UPDATE ` + q + ` SET retry_requested = 0 WHERE (consumer, message_id) IN (
	SELECT consumer, message_id FROM ` + q + ` WHERE consumer = ?1 AND retry_requested ORDER BY parked_at LIMIT ?2)
RETURNING ` + parkedColumns,
		unpark:  `DELETE FROM ` + q + ` WHERE consumer = ?1 AND message_id = ?2`,
		list:    `SELECT ` + parkedColumns + ` FROM ` + q + ` WHERE (?1 = '' OR consumer = ?1) AND message_id > ?2 ORDER BY message_id, consumer LIMIT ?3`,
		get:     `SELECT ` + parkedColumns + ` FROM ` + q + ` WHERE (?1 = '' OR consumer = ?1) AND message_id = ?2 ORDER BY consumer LIMIT 2`,
		retry:   `UPDATE ` + q + ` SET retry_requested = 1 WHERE consumer = ?1 AND (?2 = '[]' OR message_id IN (SELECT value FROM json_each(?2)))`,
		discard: `DELETE FROM ` + q + ` WHERE consumer = ?1 AND message_id IN (SELECT value FROM json_each(?2))`,
		counts:  `SELECT consumer, count(*) FROM ` + q + ` GROUP BY consumer ORDER BY consumer`,
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
		)
		if err := rows.Scan(&p.Consumer, &id, &p.Topic, &p.Key, &headers, &payload, &createdAt, &p.Error, &attemptsRead, &parkedAt, &retry); err != nil {
			return nil, err
		}
		var err error
		if p.ID, err = uuid.Parse(id); err != nil {
			return nil, fmt.Errorf("parked message id %q of consumer %q: %w", id, p.Consumer, err)
		}
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
	var headers sql.NullString
	if len(m.Headers) > 0 {
		b, err := json.Marshal(m.Headers)
		if err != nil {
			return fmt.Errorf("outboxsqlite: park message %s in %s: encode headers: %w", m.ID, t.parked.name, err)
		}
		headers = sql.NullString{String: string(b), Valid: true}
	}
	payload := m.Payload
	if payload == nil {
		payload = []byte{}
	}
	var createdAt sql.NullInt64
	if !m.CreatedAt.IsZero() {
		createdAt = sql.NullInt64{Int64: m.CreatedAt.UnixMicro(), Valid: true}
	}
	err := t.store.RunInTx(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, t.parked.park, consumer, m.ID.String(), m.Topic, m.Key, headers, payload, createdAt, reason, attempts, time.Now().UnixMicro())
		return err
	})
	if err != nil {
		return fmt.Errorf("outboxsqlite: park message %s of consumer %q in %s: %w", m.ID, consumer, t.parked.name, err)
	}
	return nil
}

// TakeRetries returns up to limit of consumer's parked messages whose retry
// was requested and clears their request (outbox.ParkStore).
func (t *InboxTable) TakeRetries(ctx context.Context, consumer string, limit int) ([]outbox.Message, error) {
	var parked []outbox.ParkedMessage
	err := t.store.RunInTx(ctx, func(tx *sql.Tx) error {
		rows, err := tx.QueryContext(ctx, t.parked.take, consumer, limit)
		if err != nil {
			return err
		}
		parked, err = scanParked(rows)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("outboxsqlite: take the retries of consumer %q from %s: %w", consumer, t.parked.name, err)
	}
	msgs := make([]outbox.Message, len(parked))
	for i, p := range parked {
		msgs[i] = p.Message
	}
	return msgs, nil
}

// Unpark forgets consumer's parked message id (outbox.ParkStore).
func (t *InboxTable) Unpark(ctx context.Context, consumer string, id uuid.UUID) error {
	_, err := t.writeCount(ctx, t.parked.unpark, consumer, id.String())
	if err != nil {
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
// (TakeRetries) within its consumer's retry poll.
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
// how many it found. With no ids it deletes nothing.
func (t *InboxTable) DiscardParked(ctx context.Context, consumer string, ids ...uuid.UUID) (int, error) {
	if consumer == "" {
		return 0, errors.New("outboxsqlite: discard parked messages: no consumer; name the consumer that parked them")
	}
	if len(ids) == 0 {
		return 0, nil
	}
	n, err := t.writeCount(ctx, t.parked.discard, consumer, idsJSON(ids))
	if err != nil {
		return 0, fmt.Errorf("outboxsqlite: discard parked messages of consumer %q in %s: %w", consumer, t.parked.name, err)
	}
	return n, nil
}

// ParkedCounts counts each consumer's parked messages.
func (t *InboxTable) ParkedCounts(ctx context.Context) (map[string]int64, error) {
	rows, err := t.store.DB().QueryContext(ctx, t.parked.counts)
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
