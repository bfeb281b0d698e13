package outboxpg

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/headerjson"
	"github.com/go-outbox/outbox/internal/sqlident"
)

// maxIdentifierLength is PostgreSQL's limit on a name, in bytes.
const maxIdentifierLength = 63

var _ outbox.ParkStore = (*InboxTable)(nil)

// parkedStatements are the statements on the parked table that sits beside
// an inbox table: <table>_parked, one row per consumer and parked message.
type parkedStatements struct {
	name    string // schema.table_parked, unquoted
	create  string
	park    string // $1 consumer, $2 id, $3 topic, $4 key, $5 headers, $6 payload, $7 created_at, $8 error, $9 attempts
	take    string // $1 consumer, $2 limit
	unpark  string // $1 consumer, $2 id
	list    string // $1 consumer or '', $2 after, $3 limit
	get     string // $1 consumer or '', $2 id
	retry   string // $1 consumer, $2 ids (empty: all)
	discard string // $1 consumer, $2 ids
	counts  string
}

const parkedColumns = `consumer, message_id, topic, key, headers, payload, created_at, error, attempts, parked_at, retry_requested`

func newParkedStatements(schema, table string) (parkedStatements, error) {
	name := table + "_parked"
	if err := sqlident.Check("outboxpg.InboxOptions.Table", name, maxIdentifierLength); err != nil {
		return parkedStatements{}, err
	}
	q := sqlident.Quote(schema) + "." + sqlident.Quote(name)
	return parkedStatements{
		name: schema + "." + name,
		create: `CREATE TABLE IF NOT EXISTS ` + q + ` (
	consumer        text        NOT NULL,
	message_id      uuid        NOT NULL,
	topic           text        NOT NULL,
	key             text        NOT NULL DEFAULT '',
	headers         jsonb       NULL,
	payload         bytea       NOT NULL,
	created_at      timestamptz NULL,
	error           text        NOT NULL,
	attempts        integer     NOT NULL,
	parked_at       timestamptz NOT NULL DEFAULT now(),
	retry_requested boolean     NOT NULL DEFAULT false,
	PRIMARY KEY (consumer, message_id)
);
CREATE INDEX IF NOT EXISTS ` + sqlident.Quote(name+"_retry_idx") + ` ON ` + q + ` (consumer, parked_at) WHERE retry_requested`,
		park: `INSERT INTO ` + q + ` (consumer, message_id, topic, key, headers, payload, created_at, error, attempts)
VALUES ($1, $2, $3, $4, $5::text::jsonb, $6, $7, $8, $9)
ON CONFLICT (consumer, message_id) DO UPDATE SET error = EXCLUDED.error, attempts = EXCLUDED.attempts, parked_at = now(), retry_requested = false`,
		// SKIP LOCKED: a second process taking at the same time takes
		// other requests, or none, rather than waiting to find them
		// cleared.
		take: `UPDATE ` + q + ` SET retry_requested = false WHERE (consumer, message_id) IN (
	SELECT consumer, message_id FROM ` + q + ` WHERE consumer = $1 AND retry_requested
	ORDER BY parked_at LIMIT $2 FOR UPDATE SKIP LOCKED)
RETURNING ` + parkedColumns,
		unpark:  `DELETE FROM ` + q + ` WHERE consumer = $1 AND message_id = $2`,
		list:    `SELECT ` + parkedColumns + ` FROM ` + q + ` WHERE ($1 = '' OR consumer = $1) AND message_id > $2 ORDER BY message_id, consumer LIMIT $3`,
		get:     `SELECT ` + parkedColumns + ` FROM ` + q + ` WHERE ($1 = '' OR consumer = $1) AND message_id = $2 ORDER BY consumer LIMIT 2`,
		retry:   `UPDATE ` + q + ` SET retry_requested = true WHERE consumer = $1 AND (cardinality($2::uuid[]) = 0 OR message_id = ANY ($2))`,
		discard: `DELETE FROM ` + q + ` WHERE consumer = $1 AND message_id = ANY ($2)`,
		counts:  `SELECT consumer, count(*) FROM ` + q + ` GROUP BY consumer ORDER BY consumer`,
	}, nil
}

// scanParked reads one row of parkedColumns.
func scanParked(row pgx.CollectableRow) (outbox.ParkedMessage, error) {
	var (
		p         outbox.ParkedMessage
		id        pgtype.UUID
		headers   []byte
		createdAt *time.Time
	)
	if err := row.Scan(&p.Consumer, &id, &p.Topic, &p.Key, &headers, &p.Payload, &createdAt, &p.Error, &p.Attempts, &p.ParkedAt, &p.RetryRequested); err != nil {
		return p, err
	}
	p.ID = id.Bytes
	if headers != nil {
		h, err := headerjson.Decode(headers)
		if err != nil {
			return p, fmt.Errorf("parked message %s of consumer %q: %w", p.ID, p.Consumer, err)
		}
		p.Headers = h
	}
	if p.Payload == nil {
		p.Payload = []byte{}
	}
	if createdAt != nil {
		p.CreatedAt = createdAt.UTC()
	}
	p.ParkedAt = p.ParkedAt.UTC()
	return p, nil
}

// ParkedName returns "schema.table_parked", the table of parked messages
// beside the inbox table, which Migrate creates.
func (t *InboxTable) ParkedName() string { return t.parked.name }

// Park keeps m as parked by consumer (outbox.ParkStore): a consumer adapter
// whose config's Parked is t calls it for a message its handler keeps
// failing on, before it acknowledges the delivery.
func (t *InboxTable) Park(ctx context.Context, consumer string, m outbox.Message, attempts int, reason string) error {
	var headers *string
	if len(m.Headers) > 0 {
		b, err := json.Marshal(m.Headers)
		if err != nil {
			return fmt.Errorf("outboxpg: park message %s in %s: encode headers: %w", m.ID, t.parked.name, err)
		}
		s := string(b)
		headers = &s
	}
	payload := m.Payload
	if payload == nil {
		payload = []byte{}
	}
	var createdAt *time.Time
	if !m.CreatedAt.IsZero() {
		createdAt = &m.CreatedAt
	}
	// PostgreSQL text cannot hold NUL; an error message that has one is
	// still worth keeping.
	reason = strings.ReplaceAll(reason, "\x00", `\x00`)
	if _, err := t.pool.Exec(ctx, t.parked.park, consumer, pgUUID(m.ID), m.Topic, m.Key, headers, payload, createdAt, reason, attempts); err != nil {
		return fmt.Errorf("outboxpg: park message %s of consumer %q in %s: %w", m.ID, consumer, t.parked.name, err)
	}
	return nil
}

// TakeRetries returns up to limit of consumer's parked messages whose retry
// was requested and clears their request (outbox.ParkStore).
func (t *InboxTable) TakeRetries(ctx context.Context, consumer string, limit int) ([]outbox.Message, error) {
	rows, err := t.pool.Query(ctx, t.parked.take, consumer, limit)
	if err != nil {
		return nil, fmt.Errorf("outboxpg: take the retries of consumer %q from %s: %w", consumer, t.parked.name, err)
	}
	parked, err := pgx.CollectRows(rows, scanParked)
	if err != nil {
		return nil, fmt.Errorf("outboxpg: take the retries of consumer %q from %s: %w", consumer, t.parked.name, err)
	}
	msgs := make([]outbox.Message, len(parked))
	for i, p := range parked {
		msgs[i] = p.Message
	}
	return msgs, nil
}

// Unpark forgets consumer's parked message id (outbox.ParkStore).
func (t *InboxTable) Unpark(ctx context.Context, consumer string, id uuid.UUID) error {
	if _, err := t.pool.Exec(ctx, t.parked.unpark, consumer, pgUUID(id)); err != nil {
		return fmt.Errorf("outboxpg: unpark message %s of consumer %q in %s: %w", id, consumer, t.parked.name, err)
	}
	return nil
}

// ListParked returns up to limit parked messages of consumer ("" for every
// consumer) whose id comes after after (uuid.Nil to start), in id order.
func (t *InboxTable) ListParked(ctx context.Context, consumer string, after uuid.UUID, limit int) ([]outbox.ParkedMessage, error) {
	rows, err := t.pool.Query(ctx, t.parked.list, consumer, pgUUID(after), limit)
	if err != nil {
		return nil, fmt.Errorf("outboxpg: list parked messages in %s: %w", t.parked.name, err)
	}
	parked, err := pgx.CollectRows(rows, scanParked)
	if err != nil {
		return nil, fmt.Errorf("outboxpg: list parked messages in %s: %w", t.parked.name, err)
	}
	return parked, nil
}

// GetParked returns the parked message id of consumer ("" for whichever
// consumer parked it: an error if several did). It returns an error
// wrapping outbox.ErrNotFound if there is none.
func (t *InboxTable) GetParked(ctx context.Context, consumer string, id uuid.UUID) (outbox.ParkedMessage, error) {
	rows, err := t.pool.Query(ctx, t.parked.get, consumer, pgUUID(id))
	if err != nil {
		return outbox.ParkedMessage{}, fmt.Errorf("outboxpg: get parked message %s from %s: %w", id, t.parked.name, err)
	}
	parked, err := pgx.CollectRows(rows, scanParked)
	if err != nil {
		return outbox.ParkedMessage{}, fmt.Errorf("outboxpg: get parked message %s from %s: %w", id, t.parked.name, err)
	}
	return oneParked(parked, "outboxpg", t.parked.name, consumer, id)
}

// oneParked is the answer of GetParked to the rows it found.
func oneParked(parked []outbox.ParkedMessage, pkg, table, consumer string, id uuid.UUID) (outbox.ParkedMessage, error) {
	switch {
	case len(parked) == 0 && consumer == "":
		return outbox.ParkedMessage{}, fmt.Errorf("%s: no consumer parked message %s in %s: %w", pkg, id, table, outbox.ErrNotFound)
	case len(parked) == 0:
		return outbox.ParkedMessage{}, fmt.Errorf("%s: consumer %q parked no message %s in %s: %w", pkg, consumer, id, table, outbox.ErrNotFound)
	case len(parked) > 1:
		return outbox.ParkedMessage{}, fmt.Errorf("%s: message %s is parked by consumers %q, %q and maybe more in %s; name one", pkg, id, parked[0].Consumer, parked[1].Consumer, table)
	}
	return parked[0], nil
}

// RequestRetry asks the running processes of consumer to handle its parked
// messages ids again (all of them when no id is given), and returns how many
// parked messages it found. One of the processes takes each request
// (TakeRetries) within its consumer's retry poll.
func (t *InboxTable) RequestRetry(ctx context.Context, consumer string, ids ...uuid.UUID) (int, error) {
	if consumer == "" {
		return 0, errors.New("outboxpg: request a retry of parked messages: no consumer; name the consumer that parked them")
	}
	tag, err := t.pool.Exec(ctx, t.parked.retry, consumer, pgUUIDs(ids))
	if err != nil {
		return 0, fmt.Errorf("outboxpg: request a retry of parked messages of consumer %q in %s: %w", consumer, t.parked.name, err)
	}
	return int(tag.RowsAffected()), nil
}

// DiscardParked deletes consumer's parked messages ids for good, and returns
// how many it found.
func (t *InboxTable) DiscardParked(ctx context.Context, consumer string, ids ...uuid.UUID) (int, error) {
	if consumer == "" {
		return 0, errors.New("outboxpg: discard parked messages: no consumer; name the consumer that parked them")
	}
	if len(ids) == 0 {
		return 0, nil
	}
	tag, err := t.pool.Exec(ctx, t.parked.discard, consumer, pgUUIDs(ids))
	if err != nil {
		return 0, fmt.Errorf("outboxpg: discard parked messages of consumer %q in %s: %w", consumer, t.parked.name, err)
	}
	return int(tag.RowsAffected()), nil
}

// ParkedCounts counts each consumer's parked messages.
func (t *InboxTable) ParkedCounts(ctx context.Context) (map[string]int64, error) {
	rows, err := t.pool.Query(ctx, t.parked.counts)
	if err != nil {
		return nil, fmt.Errorf("outboxpg: count parked messages in %s: %w", t.parked.name, err)
	}
	counts := map[string]int64{}
	var (
		consumer string
		n        int64
	)
	_, err = pgx.ForEachRow(rows, []any{&consumer, &n}, func() error { counts[consumer] = n; return nil })
	if err != nil {
		return nil, fmt.Errorf("outboxpg: count parked messages in %s: %w", t.parked.name, err)
	}
	return counts, nil
}
