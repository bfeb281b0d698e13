package outboxsqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/go-outbox/outbox/internal/sqlident"
)

// quoted returns the inbox table's name, quoted.
func (t *InboxTable) quoted() string {
	return sqlident.Quote(strings.TrimPrefix(t.name, "main."))
}

// settleStatement returns the statement that stops the records of inbox q
// (quoted) waiting for outbox table (?2): those none of whose outgoing
// messages is left unpublished there (pending, or dead, since a dead letter
// may yet be retried), up to ?1. The ids of the messages a record's handler
// wrote to its other tables are in outgoing too, but are not in this table:
// UUIDv7 ids do not collide. A record that waits for no table any more
// starts its countdown (InboxTable.settled). awaited gives the tables a
// record waits for.
func settleStatement(q string, awaited func(r string) string, table string) (string, error) {
	name, ok := strings.CutPrefix(table, "main.")
	if !ok || sqlident.Check("outbox table", name, MaxTableLength) != nil {
		return "", fmt.Errorf("outboxsqlite: inbox: outgoing messages were written to %q, not an outbox table of this database file (main.<table>); write them through an outboxsqlite Store in the inbox's transaction", table)
	}
	return `UPDATE ` + q + ` SET outbox_tables = (SELECT json_group_array(j.value) FROM json_each(` + awaited(q) + `) AS j WHERE j.value <> ?2)
WHERE (consumer, message_id) IN (
	SELECT r.consumer, r.message_id FROM ` + q + ` AS r
	WHERE r.outgoing IS NOT NULL AND EXISTS (SELECT 1 FROM json_each(` + awaited("r") + `) AS j WHERE j.value = ?2)
		AND NOT EXISTS (SELECT 1 FROM json_each(r.outgoing) AS j JOIN ` + sqlident.Quote(name) + ` AS o ON o.id = j.value WHERE o.status <> 'published')
	ORDER BY r.processed_at LIMIT ?1)`, nil
}

// settle starts the countdown (at now) of the records whose outgoing
// messages were all published, in every outbox table they were written to,
// up to limit per outbox table. A table that cannot be read (dropped,
// renamed) keeps its records waiting and is reported in failed; the others
// go on.
func (t *InboxTable) settle(ctx context.Context, tx *sql.Tx, now int64, limit int) (failed error, err error) {
	rows, err := tx.QueryContext(ctx, t.waiting)
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
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	var failures []error
	for _, table := range tables {
		stmt, err := settleStatement(t.quoted(), t.awaited, table)
		if err == nil {
			_, err = tx.ExecContext(ctx, stmt, limit, table)
		}
		if err != nil {
			failures = append(failures, fmt.Errorf("see which outgoing messages in %s were published: %w", table, err))
		}
	}
	if _, err := tx.ExecContext(ctx, t.settled, now, limit); err != nil {
		return nil, err
	}
	return errors.Join(failures...), nil
}
