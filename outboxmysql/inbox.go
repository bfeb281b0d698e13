package outboxmysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/outboxdriver"
)

// InboxTableDefault is the inbox table used when NewInboxTable's table is
// empty.
const InboxTableDefault = "processed_messages"

// InboxTable is the table of message ids that consumers have processed, for
// outbox.Inbox, in the database of a Store: one row per consumer and
// message, processed_messages(consumer, message_id, processed_at, awaiting,
// duplicates). processed_at is when the message's effects were complete:
// its handling committed and, if the handler wrote messages to outbox
// tables of the database, they were all published. Those messages are rows
// of processed_messages_outgoing until the purge sees them published, and
// awaiting is set while the record has any. Its transactions are the
// Store's (RunInTx). Beside it, processed_messages_parked keeps the
// messages consumers parked (outbox.KeyParkStore), for `outbox inbox
// parked` to list and retry. It is safe for concurrent use.
type InboxTable struct {
	store *Store
	table string
	q     string // the quoted inbox table
	qOut  string // the quoted table of outgoing messages beside it

	parked parkedStatements // on the table of parked messages beside it
}

var (
	_ outbox.InboxStore[*sql.Tx]       = (*InboxTable)(nil)
	_ outbox.OutgoingRecorder[*sql.Tx] = (*InboxTable)(nil)
	_ outbox.OutgoingReader            = (*InboxTable)(nil)
	_ outbox.InboxPurger               = (*InboxTable)(nil)
	_ outbox.ParkStore                 = (*InboxTable)(nil)
)

// NewInboxTable returns the inbox table named table (InboxTableDefault if
// empty) in store's database. It validates the name like Options.Table and
// does not touch the database; call Migrate to create the table.
func NewInboxTable(store *Store, table string) (*InboxTable, error) {
	if store == nil {
		return nil, &outbox.ConfigError{Field: "outboxmysql.NewInboxTable store", Value: "nil", Fix: "pass the Store of the consumer's database, from outboxmysql.New"}
	}
	if table == "" {
		table = InboxTableDefault
	}
	set, err := Options{Table: table}.resolve()
	if cerr := (*outbox.ConfigError)(nil); errors.As(err, &cerr) {
		cerr.Field = "outboxmysql.NewInboxTable table"
	}
	if err != nil {
		return nil, err
	}
	return &InboxTable{store: store, table: table, q: set.qTable, qOut: set.side("outgoing"), parked: newParkedStatements(table)}, nil
}

// Name returns the table's name.
func (t *InboxTable) Name() string { return t.table }

// Migrate creates the table, and the tables of outgoing messages and of
// parked messages (ParkedName) beside it, if they do not exist. Each is one
// statement: a table migrated by an older release gains the parked table.
//
// consumer is VARBINARY, compared byte for byte like topics and keys, and
// long enough for outbox.MaxConsumerLength. The primary key makes a second
// record of a message a conflict, which waits for the first's transaction.
func (t *InboxTable) Migrate(ctx context.Context) error {
	for _, stmt := range []string{`CREATE TABLE IF NOT EXISTS ` + t.q + ` (
	consumer      VARBINARY(200) NOT NULL,
	message_id    BINARY(16)     NOT NULL,
	processed_at  DATETIME(6)    NOT NULL,
	awaiting      BOOLEAN        NOT NULL DEFAULT FALSE,
	duplicates    BIGINT         NOT NULL DEFAULT 0,
	PRIMARY KEY (consumer, message_id),
	KEY ` + quote(t.table+"_purge_idx") + ` (awaiting, processed_at)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin`,
		`CREATE TABLE IF NOT EXISTS ` + t.qOut + ` (
	consumer      VARBINARY(200) NOT NULL,
	message_id    BINARY(16)     NOT NULL,
	outbox_table  VARCHAR(64)    CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
	outgoing_id   BINARY(16)     NOT NULL,
	PRIMARY KEY (consumer, message_id, outbox_table, outgoing_id),
	KEY ` + quote(t.table+"_outgoing_idx") + ` (outbox_table, outgoing_id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin`, t.parked.create} {
		if _, err := t.store.db.ExecContext(ctx, stmt); err != nil {
			return fmt.Errorf("outboxmysql: create inbox table %s: %w", t.table, err)
		}
	}
	return nil
}

// RunInTx runs fn in a transaction of the Store (Store.RunInTx).
func (t *InboxTable) RunInTx(ctx context.Context, fn func(tx *sql.Tx) error) error {
	return t.store.RunInTx(ctx, fn)
}

// MarkProcessed records that consumer processed id, inside tx, and reports
// whether the record is new. A duplicate is counted on the record (`outbox
// inbox status`): the statement inserts (one row affected) or counts (two).
func (t *InboxTable) MarkProcessed(ctx context.Context, tx *sql.Tx, consumer string, id uuid.UUID) (bool, error) {
	res, err := tx.ExecContext(ctx, `INSERT INTO `+t.q+` (consumer, message_id, processed_at) VALUES (?, ?, UTC_TIMESTAMP(6))
ON DUPLICATE KEY UPDATE duplicates = duplicates + 1`, []byte(consumer), id[:])
	if err != nil {
		return false, fmt.Errorf("outboxmysql: record message %s in inbox %s: %w", id, t.table, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, fmt.Errorf("outboxmysql: record message %s in inbox %s: %w", id, t.table, err)
	}
	return n == 1, nil
}

// ConsumerStats counts each consumer's records (`outbox inbox status`). It
// reads the whole table: an operator's query, not a metric to scrape often.
func (t *InboxTable) ConsumerStats(ctx context.Context) ([]outboxdriver.InboxConsumerStats, error) {
	rows, err := t.store.db.QueryContext(ctx, `
SELECT consumer, COUNT(*), COALESCE(SUM(awaiting), 0), COALESCE(SUM(duplicates), 0),
	GREATEST(0, TIMESTAMPDIFF(MICROSECOND, MIN(processed_at), UTC_TIMESTAMP(6)))
FROM `+t.q+` GROUP BY consumer ORDER BY consumer`)
	if err != nil {
		return nil, fmt.Errorf("outboxmysql: count records of inbox %s: %w", t.table, err)
	}
	defer rows.Close()
	var stats []outboxdriver.InboxConsumerStats
	for rows.Next() {
		var (
			st        outboxdriver.InboxConsumerStats
			consumer  []byte
			ageMicros int64
		)
		if err := rows.Scan(&consumer, &st.Records, &st.AwaitingOutgoing, &st.Duplicates, &ageMicros); err != nil {
			return nil, fmt.Errorf("outboxmysql: count records of inbox %s: %w", t.table, err)
		}
		st.Consumer, st.OldestAge = string(consumer), time.Duration(ageMicros)*time.Microsecond
		stats = append(stats, st)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("outboxmysql: count records of inbox %s: %w", t.table, err)
	}
	return stats, nil
}
