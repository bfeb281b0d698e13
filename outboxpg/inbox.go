package outboxpg

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/sqlident"
)

// InboxTableDefault is the inbox table used when InboxOptions.Table is empty.
const InboxTableDefault = "processed_messages"

// InboxOptions names an inbox table. The zero value uses
// public.processed_messages.
type InboxOptions struct {
	// Schema holds the table. It must match ^[a-z_][a-z0-9_]*$ and have at
	// most MaxSchemaLength bytes. Default SchemaDefault ("public").
	Schema string
	// Table is the inbox table. It must match ^[a-z_][a-z0-9_]*$ and have at
	// most MaxTableLength bytes. Default InboxTableDefault.
	Table string
}

// InboxTable is the table of message ids that consumers have processed, for
// outbox.Inbox: processed_messages(consumer, message_id, processed_at), one
// row per consumer and message. It is safe for concurrent use.
type InboxTable struct {
	pool    *pgxpool.Pool
	name    string // schema.table, unquoted
	schema  string // validated, unquoted
	qSchema string // quoted

	create  string // the table and its index
	mark    string // $1 consumer, $2 id
	purge   string // $1 before, $2 limit
	lockKey int64  // taken by PurgeProcessed
}

var _ outbox.InboxStore[pgx.Tx] = (*InboxTable)(nil)

// NewInboxTable returns the inbox table opts names. It validates opts and
// does not touch the database; call Migrate to create the table.
func NewInboxTable(pool *pgxpool.Pool, opts InboxOptions) (*InboxTable, error) {
	if pool == nil {
		return nil, &outbox.ConfigError{Field: "outboxpg.NewInboxTable pool", Value: "nil", Fix: "pass a pool from pgxpool.New(ctx, url)"}
	}
	schema, table := opts.Schema, opts.Table
	if schema == "" {
		schema = SchemaDefault
	}
	if table == "" {
		table = InboxTableDefault
	}
	if err := sqlident.Check("outboxpg.InboxOptions.Schema", schema, MaxSchemaLength); err != nil {
		return nil, err
	}
	if err := sqlident.Check("outboxpg.InboxOptions.Table", table, MaxTableLength); err != nil {
		return nil, err
	}
	q := sqlident.Quote(schema) + "." + sqlident.Quote(table)
	return &InboxTable{
		pool: pool,
		name: schema + "." + table,
		// The primary key makes a second record of a message conflict, and
		// makes an INSERT wait for a concurrent transaction that inserted
		// the same row: a duplicate delivered while the first is still
		// being handled waits, then is skipped.
		create: `CREATE TABLE IF NOT EXISTS ` + q + ` (
	consumer     text        NOT NULL,
	message_id   uuid        NOT NULL,
	processed_at timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (consumer, message_id)
);
CREATE INDEX IF NOT EXISTS ` + sqlident.Quote(table+"_processed_at_idx") + ` ON ` + q + ` (processed_at);`,
		schema:  schema,
		qSchema: sqlident.Quote(schema),
		mark:    `INSERT INTO ` + q + ` (consumer, message_id) VALUES ($1, $2) ON CONFLICT DO NOTHING`,
		purge: `DELETE FROM ` + q + ` WHERE (consumer, message_id) IN (
	SELECT consumer, message_id FROM ` + q + ` WHERE processed_at < $1 ORDER BY processed_at LIMIT $2)`,
		lockKey: lockKey("outboxpg inbox purge " + schema + "." + table),
	}, nil
}

// Name returns "schema.table".
func (t *InboxTable) Name() string { return t.name }

// Migrate creates the schema, the table and its index if they do not exist.
// Concurrent callers (consumers starting together) take turns on an
// advisory lock; an existing schema needs no CREATE privilege on the
// database.
func (t *InboxTable) Migrate(ctx context.Context) error {
	err := pgx.BeginFunc(ctx, t.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, lockKey("outboxpg inbox migrate")); err != nil {
			return err
		}
		var exists bool
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_namespace WHERE nspname = $1)`, t.schema).Scan(&exists); err != nil {
			return err
		}
		if !exists {
			if _, err := tx.Exec(ctx, `CREATE SCHEMA `+t.qSchema); err != nil {
				return err
			}
		}
		for stmt := range strings.SplitSeq(t.create, ";\n") {
			if _, err := tx.Exec(ctx, stmt); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("outboxpg: create inbox table %s: %w", t.name, err)
	}
	return nil
}

// RunInTx runs fn in a transaction on the pool and commits it if fn returns
// nil.
func (t *InboxTable) RunInTx(ctx context.Context, fn func(tx pgx.Tx) error) error {
	return pgx.BeginFunc(ctx, t.pool, fn)
}

// MarkProcessed records that consumer processed id, inside tx, and reports
// whether the record is new.
func (t *InboxTable) MarkProcessed(ctx context.Context, tx pgx.Tx, consumer string, id uuid.UUID) (bool, error) {
	tag, err := tx.Exec(ctx, t.mark, consumer, pgUUID(id))
	if err != nil {
		return false, fmt.Errorf("outboxpg: record message %s in inbox %s: %w", id, t.name, err)
	}
	return tag.RowsAffected() == 1, nil
}

// PurgeProcessed deletes up to limit records processed before before, oldest
// first, and returns how many it deleted; call it until it returns less than
// limit. A message redelivered after its record is gone is applied again, so
// keep records far longer than the broker redelivers
// (outbox.InboxRetentionDefault, 14 days). One caller at a time does the
// work: the others return (0, nil) at once.
func (t *InboxTable) PurgeProcessed(ctx context.Context, before time.Time, limit int) (n int, err error) {
	if limit <= 0 {
		return 0, fmt.Errorf("outboxpg: purge inbox %s: limit %d must be positive", t.name, limit)
	}
	n, err = execIfLocked(ctx, t.pool, t.lockKey, t.purge, before, limit)
	if err != nil {
		return 0, fmt.Errorf("outboxpg: purge inbox %s: %w", t.name, err)
	}
	return n, nil
}
