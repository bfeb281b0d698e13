package outboxpg

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/sqlident"
	"github.com/go-outbox/outbox/outboxdriver"
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
// outbox.Inbox: processed_messages(consumer, message_id, processed_at,
// outgoing), one row per consumer and message. processed_at is when the
// message's effects were complete: its handling committed and, if the
// handler wrote messages to outbox tables (listed in outgoing, with the
// tables still awaited in outbox_tables, until then), they were all
// published. Beside it, processed_messages_parked keeps the
// messages consumers parked (outbox.ParkStore), for `outbox inbox parked`
// to list and retry. It is safe for concurrent use.
type InboxTable struct {
	pool    *pgxpool.Pool
	name    string // schema.table, unquoted
	schema  string // validated, unquoted
	table   string // validated, unquoted
	qSchema string // quoted

	q        string // the table, quoted
	create   string // the table and its index
	mark     string // $1 consumer, $2 id
	outgoing string // $1 consumer, $2 id, $3 ids, $4 outbox table
	waiting  string // the outbox tables that records wait for
	settled  string // $1 limit
	stats    string // per consumer
	purge    string // $1 age in microseconds, $2 limit
	lockKey  int64  // taken by PurgeProcessed

	parked parkedStatements // on the parked table beside it
	// current tells whether the tables are as this release makes them:
	// Migrate then changes nothing and takes no lock ($1 the newest
	// index, $2 the parked table's newest index, $3 schema, $4 table).
	current string
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
	parked, err := newParkedStatements(schema, table)
	if err != nil {
		return nil, err
	}
	q := sqlident.Quote(schema) + "." + sqlident.Quote(table)
	return &InboxTable{
		pool:   pool,
		parked: parked,
		current: `SELECT to_regclass($1) IS NOT NULL AND to_regclass($2) IS NOT NULL AND EXISTS (
	SELECT FROM information_schema.columns WHERE table_schema = $3 AND table_name = $4 AND column_name = 'outbox_tables')`,
		table: table,
		name:  schema + "." + table,
		// The primary key makes a second record of a message conflict, and
		// makes an INSERT wait for a concurrent transaction that inserted
		// the same row: a duplicate delivered while the first is still
		// being handled waits, then is skipped.
		create: `CREATE TABLE IF NOT EXISTS ` + q + ` (
	consumer     text        NOT NULL,
	message_id   uuid        NOT NULL,
	processed_at timestamptz NOT NULL DEFAULT now(),
	outgoing     uuid[]      NULL,
	duplicates   integer     NOT NULL DEFAULT 0,
	outbox_table text        NULL,
	outbox_tables text[]     NULL,
	PRIMARY KEY (consumer, message_id)
);
ALTER TABLE ` + q + ` ADD COLUMN IF NOT EXISTS outgoing uuid[] NULL;
ALTER TABLE ` + q + ` ADD COLUMN IF NOT EXISTS outbox_table text NULL;
ALTER TABLE ` + q + ` ADD COLUMN IF NOT EXISTS duplicates integer NOT NULL DEFAULT 0;
ALTER TABLE ` + q + ` ADD COLUMN IF NOT EXISTS outbox_tables text[] NULL;
CREATE INDEX IF NOT EXISTS ` + sqlident.Quote(table+"_processed_at_idx") + ` ON ` + q + ` (processed_at);
CREATE INDEX IF NOT EXISTS ` + sqlident.Quote(table+"_outgoing_idx") + ` ON ` + q + ` (processed_at) WHERE outgoing IS NOT NULL;
` + parked.create,
		schema:  schema,
		qSchema: sqlident.Quote(schema),
		q:       q,
		// A duplicate is counted on its record (`outbox inbox status`, the
		// console); xmax is 0 only on a row the statement inserted.
		mark: `INSERT INTO ` + q + ` AS i (consumer, message_id) VALUES ($1, $2)
ON CONFLICT (consumer, message_id) DO UPDATE SET duplicates = i.duplicates + 1
RETURNING i.xmax = 0`,
		// outbox_tables lists every table the record waits for.
		// outbox_table keeps the first, which is what a release before
		// outbox_tables wrote and waited for: such records, and those of
		// its processes still running in a rolling deploy, wait for
		// [outbox_table] (awaitedTables).
		outgoing: `UPDATE ` + q + ` SET outgoing = coalesce(outgoing, '{}') || $3::uuid[], outbox_table = coalesce(outbox_table, $4::text),
	outbox_tables = CASE WHEN $4::text = ANY (coalesce(outbox_tables, '{}')) THEN outbox_tables ELSE coalesce(outbox_tables, '{}') || $4::text END
WHERE consumer = $1 AND message_id = $2`,
		waiting: `SELECT DISTINCT t FROM ` + q + ` AS r, unnest(` + awaitedTables("r") + `) AS t WHERE r.outgoing IS NOT NULL AND t IS NOT NULL`,
		settled: `UPDATE ` + q + ` SET outgoing = NULL, outbox_table = NULL, outbox_tables = NULL, processed_at = now() WHERE (consumer, message_id) IN (
	SELECT consumer, message_id FROM ` + q + ` WHERE outgoing IS NOT NULL AND cardinality(outbox_tables) = 0
	ORDER BY processed_at LIMIT $1)`,
		stats: `SELECT consumer, count(*), count(*) FILTER (WHERE outgoing IS NOT NULL), coalesce(sum(duplicates), 0),
	(extract(epoch FROM now() - min(processed_at)) * 1000000)::bigint
FROM ` + q + ` GROUP BY consumer ORDER BY consumer`,
		purge: `DELETE FROM ` + q + ` WHERE (consumer, message_id) IN (
	SELECT consumer, message_id FROM ` + q + `
	WHERE outgoing IS NULL AND processed_at < now() - $1::bigint * interval '1 microsecond'
	ORDER BY processed_at LIMIT $2)`,
		lockKey: lockKey("outboxpg inbox purge " + schema + "." + table),
	}, nil
}

// Name returns "schema.table".
func (t *InboxTable) Name() string { return t.name }

// Migrate creates the schema, the table and its indexes, and the table of
// parked messages beside it (ParkedName), if they do not exist.
// Concurrent callers (consumers starting together) take turns on an
// advisory lock; an existing schema needs no CREATE privilege on the
// database.
func (t *InboxTable) Migrate(ctx context.Context) error {
	// Consumers migrate at every start: ALTER TABLE and CREATE INDEX take
	// locks that queue behind in-flight handler transactions (and make
	// everything after them wait), so a current table is left alone.
	var current bool
	err := t.pool.QueryRow(ctx, t.current, t.schema+"."+t.table+"_outgoing_idx", t.parked.keyIndex, t.schema, t.table).Scan(&current)
	if err == nil && current {
		return nil
	}
	err = pgx.BeginFunc(ctx, t.pool, func(tx pgx.Tx) error {
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
	var inserted bool
	if err := tx.QueryRow(ctx, t.mark, consumer, pgUUID(id)).Scan(&inserted); err != nil {
		return false, fmt.Errorf("outboxpg: record message %s in inbox %s: %w", id, t.name, err)
	}
	return inserted, nil
}

// RecordOutgoing notes, in tx, that handling message id wrote the messages
// ids to the outbox table named table ("schema.table", a Store's Name), in
// the same database: the record is kept until they are published. A handler
// that writes to several outbox tables calls it once per table; the record
// then waits for the messages of every one.
func (t *InboxTable) RecordOutgoing(ctx context.Context, tx pgx.Tx, consumer string, id uuid.UUID, table string, ids []uuid.UUID) error {
	if _, err := settleStatement(t.q, table); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, t.outgoing, consumer, pgUUID(id), pgUUIDs(ids), table); err != nil {
		return fmt.Errorf("outboxpg: record the outgoing messages of %s in inbox %s: %w", id, t.name, err)
	}
	return nil
}

// awaitedTables is the SQL expression of the outbox tables record r still
// waits for: outbox_tables, or, on a record of a release before that
// column, its one outbox_table.
func awaitedTables(r string) string {
	return `coalesce(` + r + `.outbox_tables, ARRAY[` + r + `.outbox_table])`
}

// settleStatement returns the statement that stops the records of inbox q
// (quoted) waiting for outbox table: those none of whose outgoing messages
// is left unpublished there (pending, or dead, since a dead letter may yet
// be retried). The ids of the messages a record's handler wrote to its
// other tables are in outgoing too, but are not in this table: UUIDv7 ids
// do not collide. A record that waits for no table any more starts its
// countdown (InboxTable.settled).
func settleStatement(q, table string) (string, error) {
	schema, name, ok := strings.Cut(table, ".")
	if !ok || sqlident.Check("outbox table", schema, MaxSchemaLength) != nil || sqlident.Check("outbox table", name, MaxTableLength) != nil {
		return "", fmt.Errorf("outboxpg: inbox: outgoing messages were written to %q, not an outbox table of this database (schema.table); write them through an outboxpg Store in the inbox's transaction", table)
	}
	return `UPDATE ` + q + ` AS u SET outbox_tables = array_remove(` + awaitedTables("u") + `, $2::text) WHERE (u.consumer, u.message_id) IN (
	SELECT r.consumer, r.message_id FROM ` + q + ` AS r
	WHERE r.outgoing IS NOT NULL AND $2::text = ANY (` + awaitedTables("r") + `)
		AND NOT EXISTS (SELECT FROM ` + sqlident.Quote(schema) + `.` + sqlident.Quote(name) + ` AS o WHERE o.id = ANY (r.outgoing) AND o.status <> 'published')
	ORDER BY r.processed_at LIMIT $1)`, nil
}

// settle starts the countdown of the records whose outgoing messages were
// all published, in every outbox table they were written to, up to limit
// per outbox table. The outbox tables are read only when some record waits
// for them: a consumer that writes no outgoing messages needs no outbox.
func (t *InboxTable) settle(ctx context.Context, tx pgx.Tx, limit int) (failed error, err error) {
	rows, err := tx.Query(ctx, t.waiting)
	if err != nil {
		return nil, err
	}
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, err
	}
	var failures []error
	for _, table := range tables {
		// A table that cannot be read (renamed, or no SELECT for this
		// role) keeps its records waiting; the others go on, each in a
		// savepoint so that one failure does not abort the purge.
		if err := t.settleTable(ctx, tx, table, limit); err != nil {
			failures = append(failures, fmt.Errorf("see which outgoing messages in %s were published: %w", table, err))
		}
	}
	if _, err := tx.Exec(ctx, t.settled, limit); err != nil {
		return nil, err
	}
	return errors.Join(failures...), nil
}

func (t *InboxTable) settleTable(ctx context.Context, tx pgx.Tx, table string, limit int) error {
	stmt, err := settleStatement(t.q, table)
	if err != nil {
		return err
	}
	return pgx.BeginFunc(ctx, tx, func(sp pgx.Tx) error {
		_, err := sp.Exec(ctx, stmt, limit, table)
		return err
	})
}

// PurgeProcessed first starts the countdown of records whose outgoing
// messages have all been published, then deletes up to limit records whose
// effects were complete more than olderThan ago (by the database's clock),
// oldest first, and returns how many it deleted; call it until it returns
// less than limit. A record whose outgoing messages are pending is never
// deleted. A message redelivered after its record is gone is applied again,
// so keep records far longer than the broker redelivers
// (outbox.InboxRetentionDefault, 14 days). One caller at a time does the
// work: the others return (0, nil) at once.
func (t *InboxTable) PurgeProcessed(ctx context.Context, olderThan time.Duration, limit int) (n int, err error) {
	if limit <= 0 {
		return 0, fmt.Errorf("outboxpg: purge inbox %s: limit %d must be positive", t.name, limit)
	}
	if olderThan < 0 {
		return 0, fmt.Errorf("outboxpg: purge inbox %s: age %v must not be negative", t.name, olderThan)
	}
	var settleErr error
	err = pgx.BeginFunc(ctx, t.pool, func(tx pgx.Tx) error {
		var locked bool
		if err := tx.QueryRow(ctx, `SELECT pg_try_advisory_xact_lock($1)`, t.lockKey).Scan(&locked); err != nil || !locked {
			return err
		}
		var err error
		if settleErr, err = t.settle(ctx, tx, limit); err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, t.purge, olderThan.Microseconds(), limit)
		n = int(tag.RowsAffected())
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("outboxpg: purge inbox %s: %w", t.name, err)
	}
	if settleErr != nil {
		// The purge went on; the records waiting for those tables stay.
		return n, fmt.Errorf("outboxpg: purge inbox %s: deleted %d, but: %w", t.name, n, settleErr)
	}
	return n, nil
}

// ConsumerStats counts each consumer's records (`outbox inbox status`). It
// reads the whole table: an operator's query, not a metric to scrape often.
func (t *InboxTable) ConsumerStats(ctx context.Context) ([]outboxdriver.InboxConsumerStats, error) {
	rows, err := t.pool.Query(ctx, t.stats)
	if err != nil {
		return nil, fmt.Errorf("outboxpg: count records of inbox %s: %w", t.name, err)
	}
	stats, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (outboxdriver.InboxConsumerStats, error) {
		var st outboxdriver.InboxConsumerStats
		var ageMicros int64
		err := row.Scan(&st.Consumer, &st.Records, &st.AwaitingOutgoing, &st.Duplicates, &ageMicros)
		st.OldestAge = time.Duration(ageMicros) * time.Microsecond
		return st, err
	})
	if err != nil {
		return nil, fmt.Errorf("outboxpg: count records of inbox %s: %w", t.name, err)
	}
	return stats, nil
}
