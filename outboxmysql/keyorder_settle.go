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
func (s *Store) retriedHeads(ctx context.Context, tx *sql.Tx, o owner, ids []uuid.UUID) ([]uuid.UUID, error) {
	return queryIDs(ctx, tx, o.sql(idList(s.kstmts.retried, len(ids)))+" FOR UPDATE", o.args(idArgs(ids)...)...)
}

// countOvertaken, in a store that skips dead messages in key order, adds
// the messages about to be published by o to the overtaken count
// of each dead message of their key that comes before them. It runs before
// the settlement deletes (or keeps) them; elsewhere it does nothing.
func (s *Store) countOvertaken(ctx context.Context, tx *sql.Tx, o owner, ids []uuid.UUID) error {
	if s.kstmts.countOvertaken == "" {
		return nil
	}
	stmt := strings.Replace(s.kstmts.countOvertaken, "#ids#", placeholders(len(ids)), 1)
	_, err := tx.ExecContext(ctx, o.sql(stmt), o.args(idArgs(ids)...)...)
	return err
}

// postponeHeld moves, in tx, the pending messages held behind each retried
// head to its new due time (spec §7), passing over rows other transactions
// hold (see the statement's comment).
func (s *Store) postponeHeld(ctx context.Context, tx *sql.Tx, heads []uuid.UUID) error {
	type head struct {
		key []byte
		seq int64
		due utcTime
	}
	rows, err := tx.QueryContext(ctx, idList(s.kstmts.postponeHeld, len(heads)), idArgs(heads)...)
	if err != nil {
		return err
	}
	var list []head
	for rows.Next() {
		var h head
		if err := rows.Scan(&h.key, &h.seq, &h.due); err != nil {
			rows.Close()
			return err
		}
		list = append(list, h)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	for _, h := range list {
		due := datetime(h.due.Time, false)
		behind, err := tx.QueryContext(ctx, s.kstmts.heldBehind, h.key, h.seq, due)
		if err != nil {
			return err
		}
		var ids []any
		for behind.Next() {
			var id []byte
			if err := behind.Scan(&id); err != nil {
				behind.Close()
				return err
			}
			ids = append(ids, id)
		}
		behind.Close()
		if err := behind.Err(); err != nil {
			return err
		}
		if len(ids) == 0 {
			continue
		}
		if _, err := tx.ExecContext(ctx, idList(s.kstmts.moveHeld, len(ids)), append([]any{due}, ids...)...); err != nil {
			return err
		}
	}
	return nil
}
