package outboxsqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/sqlident"
	"github.com/go-outbox/outbox/outboxdriver"
)

// InboxTableDefault is the inbox table used when NewInboxTable's table is
// empty.
const InboxTableDefault = "processed_messages"

// InboxTable is the table of message ids that consumers have processed, for
// outbox.Inbox: processed_messages(consumer, message_id, processed_at,
// outgoing), one row per consumer and message, in the database file of a
// Store. processed_at is when the message's effects were complete: its
// handling committed and, if the handler wrote messages to outbox tables
// of the file (listed in outgoing, a JSON array, with the tables still
// awaited in outbox_tables, until then), they were all published. Beside
// it, processed_messages_parked keeps the messages consumers parked
// (outbox.ParkStore), for `outbox inbox parked` to list and retry. Its
// transactions are the Store's (RunInTx), so they wait for SQLite's write
// lock the same way. It is safe for concurrent use.
type InboxTable struct {
	store *Store
	name  string

	create   string
	addCols  map[string]string // column -> the ALTER TABLE that adds it to a table of an older release
	mark     string            // ?1 consumer, ?2 id, ?3 now in microseconds
	outgoing string            // ?1 consumer, ?2 id, ?3 JSON array of ids, ?4 outbox table
	waiting  string            // the outbox tables that records wait for
	settled  string            // ?1 now in microseconds, ?2 limit
	purge    string            // ?1 before in microseconds, ?2 limit
	stats    string            // ?1 now in microseconds

	// awaited gives, in SQL, the outbox tables record r waits for.
	awaited func(r string) string

	parked parkedStatements // on the parked table beside it
}

var _ outbox.InboxStore[*sql.Tx] = (*InboxTable)(nil)

// NewInboxTable returns the inbox table named table (InboxTableDefault if
// empty) in store's database file. It validates the name like
// Options.Table and does not touch the database; call Migrate to create
// the table.
func NewInboxTable(store *Store, table string) (*InboxTable, error) {
	if store == nil {
		return nil, &outbox.ConfigError{Field: "outboxsqlite.NewInboxTable store", Value: "nil", Fix: "pass the Store of the consumer's database file, from outboxsqlite.Open"}
	}
	if table == "" {
		table = InboxTableDefault
	}
	set, err := Options{Table: table}.resolve()
	if cerr := (*outbox.ConfigError)(nil); errors.As(err, &cerr) {
		cerr.Field = "outboxsqlite.NewInboxTable table"
	}
	if err != nil {
		return nil, err
	}
	parked, err := newParkedStatements(table)
	if err != nil {
		return nil, err
	}
	q := set.qTable
	// A record of a release before outbox_tables waited for the Store's
	// table only, and still does. The name is a checked identifier: safe
	// in a string literal.
	awaited := func(r string) string {
		return `coalesce(` + r + `.outbox_tables, json_array('` + store.Name() + `'))`
	}
	return &InboxTable{
		store:  store,
		name:   "main." + table,
		parked: parked,
		// The primary key makes a second record of a message a conflict.
		// SQLite runs one write transaction at a time, so a duplicate
		// delivered while the first is being handled waits for it.
		create: `CREATE TABLE IF NOT EXISTS ` + q + ` (
	consumer     TEXT    NOT NULL,
	message_id   TEXT    NOT NULL,
	processed_at INTEGER NOT NULL,
	outgoing     TEXT    NULL,
	duplicates   INTEGER NOT NULL DEFAULT 0,
	outbox_tables TEXT   NULL,
	PRIMARY KEY (consumer, message_id)
) STRICT, WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS ` + sqlident.Quote(table+"_processed_at_idx") + ` ON ` + q + ` (processed_at);
CREATE INDEX IF NOT EXISTS ` + sqlident.Quote(table+"_outgoing_idx") + ` ON ` + q + ` (processed_at) WHERE outgoing IS NOT NULL;
` + parked.create,
		addCols: map[string]string{
			"outgoing":      `ALTER TABLE ` + q + ` ADD COLUMN outgoing TEXT NULL`,
			"duplicates":    `ALTER TABLE ` + q + ` ADD COLUMN duplicates INTEGER NOT NULL DEFAULT 0`,
			"outbox_tables": `ALTER TABLE ` + q + ` ADD COLUMN outbox_tables TEXT NULL`,
		},
		awaited: awaited,
		// A duplicate is counted on its record (`outbox inbox status`, the
		// console): a count of 0 means the statement inserted the record.
		mark: `INSERT INTO ` + q + ` (consumer, message_id, processed_at) VALUES (?1, ?2, ?3)
ON CONFLICT (consumer, message_id) DO UPDATE SET duplicates = duplicates + 1
RETURNING duplicates`,
		// outbox_tables lists every table the record waits for, a JSON
		// array of names.
		outgoing: `UPDATE ` + q + ` SET outgoing = (SELECT json_group_array(value) FROM (
	SELECT value FROM json_each(coalesce(outgoing, '[]')) UNION ALL SELECT value FROM json_each(?3))),
	outbox_tables = CASE WHEN EXISTS (SELECT 1 FROM json_each(coalesce(outbox_tables, '[]')) WHERE value = ?4) THEN outbox_tables
		ELSE json_insert(coalesce(outbox_tables, '[]'), '$[#]', ?4) END
WHERE consumer = ?1 AND message_id = ?2`,
		waiting: `SELECT DISTINCT j.value FROM ` + q + ` AS r, json_each(` + awaited("r") + `) AS j WHERE r.outgoing IS NOT NULL`,
		// A record's effects are complete when it waits for no outbox
		// table any more; its countdown starts now.
		settled: `UPDATE ` + q + ` SET outgoing = NULL, outbox_tables = NULL, processed_at = ?1 WHERE (consumer, message_id) IN (
	SELECT consumer, message_id FROM ` + q + ` WHERE outgoing IS NOT NULL AND json_array_length(outbox_tables) = 0
	ORDER BY processed_at LIMIT ?2)`,
		stats: `SELECT consumer, count(*), count(outgoing), sum(duplicates), ?1 - min(processed_at) FROM ` + q + ` GROUP BY consumer ORDER BY consumer`,
		purge: `DELETE FROM ` + q + ` WHERE (consumer, message_id) IN (
	SELECT consumer, message_id FROM ` + q + ` WHERE outgoing IS NULL AND processed_at < ?1 ORDER BY processed_at LIMIT ?2)`,
	}, nil
}

// Name returns "main.<table>".
func (t *InboxTable) Name() string { return t.name }

// Migrate creates the table and its indexes, and the table of parked
// messages beside it (ParkedName), if they do not exist, and adds the
// outgoing and duplicates columns to a table made by an older release.
func (t *InboxTable) Migrate(ctx context.Context) error {
	return t.store.RunInTx(ctx, func(tx *sql.Tx) error {
		var stmts []string
		for table, addCols := range map[string]map[string]string{t.name: t.addCols, t.parked.name: t.parked.addCols} {
			columns, err := tableColumns(ctx, tx, strings.TrimPrefix(table, "main."))
			if err != nil {
				return fmt.Errorf("outboxsqlite: create inbox table %s: %w", t.name, err)
			}
			for column, add := range addCols {
				if len(columns) > 0 && !columns[column] {
					stmts = append(stmts, add)
				}
			}
		}
		stmts = append(stmts, strings.Split(t.create, ";\n")...)
		for _, stmt := range stmts {
			if _, err := tx.ExecContext(ctx, stmt); err != nil {
				return fmt.Errorf("outboxsqlite: create inbox table %s: %w", t.name, err)
			}
		}
		return nil
	})
}

// tableColumns returns the columns of table, none if it does not exist.
func tableColumns(ctx context.Context, tx *sql.Tx, table string) (map[string]bool, error) {
	rows, err := tx.QueryContext(ctx, `SELECT name FROM pragma_table_info(?1)`, table)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	columns := map[string]bool{}
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			return nil, err
		}
		columns[name] = true
	}
	return columns, rows.Err()
}

// RunInTx runs fn in a write transaction of the Store (Store.RunInTx).
func (t *InboxTable) RunInTx(ctx context.Context, fn func(tx *sql.Tx) error) error {
	return t.store.RunInTx(ctx, fn)
}

// MarkProcessed records that consumer processed id, inside tx, and reports
// whether the record is new.
func (t *InboxTable) MarkProcessed(ctx context.Context, tx *sql.Tx, consumer string, id uuid.UUID) (bool, error) {
	var duplicates int64
	if err := tx.QueryRowContext(ctx, t.mark, consumer, id.String(), time.Now().UnixMicro()).Scan(&duplicates); err != nil {
		return false, fmt.Errorf("outboxsqlite: record message %s in inbox %s: %w", id, t.name, err)
	}
	return duplicates == 0, nil
}

// RecordOutgoing notes, in tx, that handling message id wrote the messages
// ids to the outbox table named table ("main.<table>", a Store's Name), in
// the same database file: the record is kept until they are published. A
// handler that writes to several outbox tables calls it once per table; the
// record then waits for the messages of every one.
func (t *InboxTable) RecordOutgoing(ctx context.Context, tx *sql.Tx, consumer string, id uuid.UUID, table string, ids []uuid.UUID) error {
	if _, err := settleStatement(t.quoted(), t.awaited, table); err != nil {
		return err
	}
	list, err := json.Marshal(ids)
	if err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, t.outgoing, consumer, id.String(), string(list), table); err != nil {
		return fmt.Errorf("outboxsqlite: record the outgoing messages of %s in inbox %s: %w", id, t.name, err)
	}
	return nil
}

// PurgeProcessed first starts the countdown of records whose outgoing
// messages have all been published, then deletes up to limit records whose
// effects were complete more than olderThan ago, oldest first, and returns
// how many it deleted; call it until it returns less than limit. A record
// whose outgoing messages are pending, in any outbox table, is never
// deleted; an outbox table it cannot read keeps its records and is
// reported in the error, after the others were purged. A message
// redelivered after its record is gone is applied again, so keep records
// far longer than the broker redelivers (outbox.InboxRetentionDefault, 14
// days).
func (t *InboxTable) PurgeProcessed(ctx context.Context, olderThan time.Duration, limit int) (n int, err error) {
	if limit <= 0 {
		return 0, fmt.Errorf("outboxsqlite: purge inbox %s: limit %d must be positive", t.name, limit)
	}
	if olderThan < 0 {
		return 0, fmt.Errorf("outboxsqlite: purge inbox %s: age %v must not be negative", t.name, olderThan)
	}
	var settleErr error
	err = t.store.RunInTx(ctx, func(tx *sql.Tx) error {
		now := time.Now().UnixMicro()
		var err error
		if settleErr, err = t.settle(ctx, tx, now, limit); err != nil {
			return err
		}
		res, err := tx.ExecContext(ctx, t.purge, now-olderThan.Microseconds(), limit)
		if err != nil {
			return err
		}
		deleted, err := res.RowsAffected()
		n = int(deleted)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("outboxsqlite: purge inbox %s: %w", t.name, err)
	}
	if settleErr != nil {
		// The purge went on; the records waiting for those tables stay.
		return n, fmt.Errorf("outboxsqlite: purge inbox %s: deleted %d, but: %w", t.name, n, settleErr)
	}
	return n, nil
}

// ConsumerStats counts each consumer's records (`outbox inbox status`). It
// reads the whole table: an operator's query, not a metric to scrape often.
func (t *InboxTable) ConsumerStats(ctx context.Context) ([]outboxdriver.InboxConsumerStats, error) {
	rows, err := t.store.DB().QueryContext(ctx, t.stats, time.Now().UnixMicro())
	if err != nil {
		return nil, fmt.Errorf("outboxsqlite: count records of inbox %s: %w", t.name, err)
	}
	defer rows.Close()
	var stats []outboxdriver.InboxConsumerStats
	for rows.Next() {
		var st outboxdriver.InboxConsumerStats
		var ageMicros int64
		if err := rows.Scan(&st.Consumer, &st.Records, &st.AwaitingOutgoing, &st.Duplicates, &ageMicros); err != nil {
			return nil, fmt.Errorf("outboxsqlite: count records of inbox %s: %w", t.name, err)
		}
		st.OldestAge = time.Duration(ageMicros) * time.Microsecond
		stats = append(stats, st)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("outboxsqlite: count records of inbox %s: %w", t.name, err)
	}
	return stats, nil
}
