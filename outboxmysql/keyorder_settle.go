package outboxmysql

import (
	"context"
	"database/sql"
	"strings"

	"github.com/google/uuid"
)

// retriedHeads returns those of ids that a retry under token applies to,
// and locks them: in key order only those move their keys back in the
// queue (postponeHeld), and MySQL's UPDATE returns no rows to say which.
func (s *Store) retriedHeads(ctx context.Context, tx *sql.Tx, token []byte, ids []uuid.UUID) ([]uuid.UUID, error) {
	rows, err := tx.QueryContext(ctx, idList(s.kstmts.retried, len(ids))+" FOR UPDATE", append([]any{token}, idArgs(ids)...)...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []uuid.UUID
	for rows.Next() {
		var b []byte
		if err := rows.Scan(&b); err != nil {
			return nil, err
		}
		id, err := uuid.FromBytes(b)
		if err != nil {
			return nil, err
		}
		out = append(out, id)
	}
	return out, rows.Err()
}

// countOvertaken, in a store that skips dead messages in key order, adds
// the messages about to be published under token to the overtaken count
// of each dead message of their key that comes before them. It runs before
// the settlement deletes (or keeps) them; elsewhere it does nothing.
func (s *Store) countOvertaken(ctx context.Context, tx *sql.Tx, token []byte, ids []uuid.UUID) error {
	if s.kstmts.countOvertaken == "" {
		return nil
	}
	stmt := strings.Replace(s.kstmts.countOvertaken, "#ids#", placeholders(len(ids)), 1)
	_, err := tx.ExecContext(ctx, stmt, append([]any{token}, idArgs(ids)...)...)
	return err
}
