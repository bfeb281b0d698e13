package outboxsqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/sqlident"
)

// InboxTableDefault is the inbox table used when NewInboxTable's table is
// empty.
const InboxTableDefault = "processed_messages"

// InboxTable is the table of message ids that consumers have processed, for
// outbox.Inbox: processed_messages(consumer, message_id, processed_at), one
// row per consumer and message, in the database file of a Store. Its
// transactions are the Store's (RunInTx), so they wait for SQLite's write
// lock the same way. It is safe for concurrent use.
type InboxTable struct {
	store *Store
	name  string

	create string
	mark   string // ?1 consumer, ?2 id, ?3 now in microseconds
	purge  string // ?1 before in microseconds, ?2 limit
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
	q := set.qTable
	return &InboxTable{
		store: store,
		name:  "main." + table,
		// The primary key makes a second record of a message a conflict.
		// SQLite runs one write transaction at a time, so a duplicate
		// delivered while the first is being handled waits for it.
		create: `CREATE TABLE IF NOT EXISTS ` + q + ` (
	consumer     TEXT    NOT NULL,
	message_id   TEXT    NOT NULL,
	processed_at INTEGER NOT NULL,
	PRIMARY KEY (consumer, message_id)
) STRICT, WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS ` + sqlident.Quote(table+"_processed_at_idx") + ` ON ` + q + ` (processed_at);`,
		mark: `INSERT INTO ` + q + ` (consumer, message_id, processed_at) VALUES (?1, ?2, ?3) ON CONFLICT DO NOTHING`,
		purge: `DELETE FROM ` + q + ` WHERE (consumer, message_id) IN (
	SELECT consumer, message_id FROM ` + q + ` WHERE processed_at < ?1 ORDER BY processed_at LIMIT ?2)`,
	}, nil
}

// Name returns "main.<table>".
func (t *InboxTable) Name() string { return t.name }

// Migrate creates the table and its index if they do not exist.
func (t *InboxTable) Migrate(ctx context.Context) error {
	return t.store.RunInTx(ctx, func(tx *sql.Tx) error {
		for stmt := range strings.SplitSeq(t.create, ";\n") {
			if _, err := tx.ExecContext(ctx, stmt); err != nil {
				return fmt.Errorf("outboxsqlite: create inbox table %s: %w", t.name, err)
			}
		}
		return nil
	})
}

// RunInTx runs fn in a write transaction of the Store (Store.RunInTx).
func (t *InboxTable) RunInTx(ctx context.Context, fn func(tx *sql.Tx) error) error {
	return t.store.RunInTx(ctx, fn)
}

// MarkProcessed records that consumer processed id, inside tx, and reports
// whether the record is new.
func (t *InboxTable) MarkProcessed(ctx context.Context, tx *sql.Tx, consumer string, id uuid.UUID) (bool, error) {
	res, err := tx.ExecContext(ctx, t.mark, consumer, id.String(), time.Now().UnixMicro())
	if err != nil {
		return false, fmt.Errorf("outboxsqlite: record message %s in inbox %s: %w", id, t.name, err)
	}
	n, err := res.RowsAffected()
	return n == 1, err
}

// PurgeProcessed deletes up to limit records processed before before, oldest
// first, and returns how many it deleted; call it until it returns less than
// limit. A message redelivered after its record is gone is applied again, so
// keep records far longer than the broker redelivers
// (outbox.InboxRetentionDefault, 14 days).
func (t *InboxTable) PurgeProcessed(ctx context.Context, before time.Time, limit int) (n int, err error) {
	if limit <= 0 {
		return 0, fmt.Errorf("outboxsqlite: purge inbox %s: limit %d must be positive", t.name, limit)
	}
	err = t.store.RunInTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, t.purge, before.UnixMicro(), limit)
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
	return n, nil
}
