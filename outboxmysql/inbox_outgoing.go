package outboxmysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/go-outbox/outbox/internal/sqlident"
)

// RecordOutgoing notes, in tx, that handling message id wrote the messages
// ids to the outbox table named table (a Store's Name) in the same
// database: the record is kept until they are published. A handler that
// writes to several outbox tables calls it once per table; the record then
// waits for the messages of every one.
func (t *InboxTable) RecordOutgoing(ctx context.Context, tx *sql.Tx, consumer string, id uuid.UUID, table string, ids []uuid.UUID) error {
	if err := sqlident.Check("outbox table", table, MaxTableLength); err != nil {
		return fmt.Errorf("outboxmysql: inbox %s: outgoing messages were written to %q, not an outbox table of this database; write them through an outboxmysql Store in the inbox's transaction", t.table, table)
	}
	if len(ids) == 0 {
		return nil
	}
	fail := func(err error) error {
		return fmt.Errorf("outboxmysql: record the outgoing messages of %s in inbox %s: %w", id, t.table, err)
	}
	for chunk := range chunks(ids, moveChunk) {
		args := make([]any, 0, 4*len(chunk))
		for _, o := range chunk {
			args = append(args, []byte(consumer), id[:], table, o[:])
		}
		if _, err := tx.ExecContext(ctx, `INSERT IGNORE INTO `+t.qOut+` (consumer, message_id, outbox_table, outgoing_id) VALUES `+
			strings.Repeat("(?, ?, ?, ?), ", len(chunk)-1)+"(?, ?, ?, ?)", args...); err != nil {
			return fail(err)
		}
	}
	if _, err := tx.ExecContext(ctx, `UPDATE `+t.q+` SET awaiting = TRUE WHERE consumer = ? AND message_id = ?`, []byte(consumer), id[:]); err != nil {
		return fail(err)
	}
	return nil
}

// Outgoing returns an outbox table and the ids of the messages the handling
// of message id by consumer wrote there and that the purge has not yet
// seen published (see outbox.OutgoingReader). A handling that wrote to
// several tables gives those of the first table by name.
func (t *InboxTable) Outgoing(ctx context.Context, consumer string, id uuid.UUID) (table string, ids []uuid.UUID, err error) {
	rows, err := t.store.db.QueryContext(ctx, `SELECT outbox_table, outgoing_id FROM `+t.qOut+`
WHERE consumer = ? AND message_id = ? ORDER BY outbox_table, outgoing_id`, []byte(consumer), id[:])
	if err != nil {
		return "", nil, fmt.Errorf("outboxmysql: read the outgoing messages of %s in inbox %s: %w", id, t.table, err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			name string
			raw  []byte
		)
		if err := rows.Scan(&name, &raw); err != nil {
			return "", nil, fmt.Errorf("outboxmysql: read the outgoing messages of %s in inbox %s: %w", id, t.table, err)
		}
		if table != "" && name != table {
			break
		}
		o, err := uuid.FromBytes(raw)
		if err != nil {
			return "", nil, fmt.Errorf("outboxmysql: read the outgoing messages of %s in inbox %s: %w", id, t.table, err)
		}
		table, ids = name, append(ids, o)
	}
	if err := rows.Err(); err != nil {
		return "", nil, fmt.Errorf("outboxmysql: read the outgoing messages of %s in inbox %s: %w", id, t.table, err)
	}
	return table, ids, nil
}

// PurgeProcessed first starts the countdown of records whose outgoing
// messages have all been published, then deletes up to limit records whose
// effects were complete more than olderThan ago by the database's clock,
// oldest first, and returns how many it deleted; call it until it returns
// less than limit. A record whose outgoing messages are pending or dead, in
// any outbox table, is never deleted; an outbox table it cannot read keeps
// its records and is reported in the error, after the others were purged.
// A message redelivered after its record is gone is applied again, so keep
// records far longer than the broker redelivers
// (outbox.InboxRetentionDefault, 14 days).
func (t *InboxTable) PurgeProcessed(ctx context.Context, olderThan time.Duration, limit int) (int, error) {
	if limit <= 0 {
		return 0, fmt.Errorf("outboxmysql: purge inbox %s: limit %d must be positive", t.table, limit)
	}
	if olderThan < 0 {
		return 0, fmt.Errorf("outboxmysql: purge inbox %s: age %v must not be negative", t.table, olderThan)
	}
	var (
		n         int
		settleErr error
	)
	err := t.store.inTx(ctx, func(ctx context.Context, tx *sql.Tx) (err error) {
		if settleErr, err = t.settle(ctx, tx, limit); err != nil {
			return err
		}
		res, err := tx.ExecContext(ctx, `DELETE FROM `+t.q+`
WHERE awaiting = FALSE AND processed_at < UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND
ORDER BY processed_at LIMIT ?`, micros(olderThan), limit)
		if err != nil {
			return err
		}
		deleted, err := res.RowsAffected()
		n = int(deleted)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("outboxmysql: purge inbox %s: %w", t.table, err)
	}
	if settleErr != nil {
		// The purge went on; the records waiting for those tables stay.
		return n, fmt.Errorf("outboxmysql: purge inbox %s: deleted %d, but: %w", t.table, n, settleErr)
	}
	return n, nil
}

// settle forgets, per outbox table, up to limit outgoing messages that are
// published or gone (a dead letter may yet be retried, so it is waited
// for), then starts the countdown, now, of up to limit records that wait
// for no outgoing message any more. A table that cannot be read (dropped,
// renamed) keeps its records waiting and is reported in failed; the others
// go on.
func (t *InboxTable) settle(ctx context.Context, tx *sql.Tx, limit int) (failed error, err error) {
	rows, err := tx.QueryContext(ctx, `SELECT DISTINCT outbox_table FROM `+t.qOut)
	if err != nil {
		return nil, err
	}
	var tables []string
	for rows.Next() {
		var table string
		if err := rows.Scan(&table); err != nil {
			rows.Close()
			return nil, err
		}
		tables = append(tables, table)
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return nil, err
	}
	var failures []error
	for _, table := range tables {
		err := sqlident.Check("outbox table", table, MaxTableLength)
		if err == nil {
			_, err = tx.ExecContext(ctx, `DELETE FROM `+t.qOut+`
WHERE outbox_table = ? AND NOT EXISTS (SELECT 1 FROM `+quote(table)+` AS o WHERE o.id = outgoing_id AND o.status <> 'published')
LIMIT ?`, table, limit)
		}
		if err != nil {
			failures = append(failures, fmt.Errorf("see which outgoing messages in %s were published: %w", table, err))
		}
	}
	if _, err := tx.ExecContext(ctx, `UPDATE `+t.q+` AS r SET r.awaiting = FALSE, r.processed_at = UTC_TIMESTAMP(6)
WHERE r.awaiting = TRUE AND NOT EXISTS (SELECT 1 FROM `+t.qOut+` AS g WHERE g.consumer = r.consumer AND g.message_id = r.message_id)
ORDER BY r.processed_at LIMIT ?`, limit); err != nil {
		return nil, err
	}
	return errors.Join(failures...), nil
}
