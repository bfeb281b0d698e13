package outboxmysql

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/google/uuid"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/sqlrow"
	"github.com/go-outbox/outbox/outboxdriver"
)

var _ outboxdriver.KeyOrderRetrier = (*Store)(nil)

// collectListed reads rows of messageColumns and overtaken (Get,
// ListDead), and closes rows. A row whose headers do not decode comes
// without them.
func collectListed(rows *sql.Rows) ([]outbox.Message, error) {
	defer rows.Close()
	msgs, _, err := sqlrow.Collect(rows, 0, func(rows *sql.Rows) (outbox.Message, error, error) {
		var overtaken int
		m, headerErr, err := scanMessage(rows, &overtaken)
		m.Overtaken = overtaken
		return m, headerErr, err
	})
	return msgs, err
}

// RetryDeadUnlessOvertaken retries the dead messages ids (every dead
// message if all) unless later messages of their key overtook one of
// them; then it retries none and returns those (see
// outboxdriver.KeyOrderRetrier). It locks the dead messages it looks at
// before it reads their counts, in the transaction that retries them, and
// retries exactly those: a settlement that would count on one of them
// waits, and then finds it pending, not dead; a message that dies meanwhile
// is left dead, unchecked.
func (s *Store) RetryDeadUnlessOvertaken(ctx context.Context, ids []uuid.UUID, all bool) (int, []outbox.Message, error) {
	if !all && len(ids) == 0 {
		return 0, nil, nil
	}
	asked, args := `TRUE`, []any(nil)
	if !all {
		asked, args = idList(`id IN (`, len(ids)), idArgs(ids)
	}
	var (
		retried   int
		overtaken []outbox.Message
	)
	err := s.inTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		retried, overtaken = 0, nil
		rows, err := tx.QueryContext(ctx, `SELECT id, overtaken FROM `+s.set.qTable+` WHERE status = 'dead' AND `+asked+` FOR UPDATE`, args...)
		if err != nil {
			return err
		}
		var counted, locked []uuid.UUID
		for rows.Next() {
			var (
				id []byte
				n  int
			)
			if err := rows.Scan(&id, &n); err != nil {
				rows.Close()
				return err
			}
			locked = append(locked, uuid.UUID(id))
			if n > 0 {
				counted = append(counted, uuid.UUID(id))
			}
		}
		if err := rows.Err(); err != nil {
			return err
		}
		if len(counted) > 0 {
			rows, err := tx.QueryContext(ctx, idList(`SELECT `+messageColumns+`, overtaken FROM `+s.set.qTable+` WHERE id IN (`, len(counted))+` ORDER BY id`, idArgs(counted)...)
			if err != nil {
				return err
			}
			overtaken, err = collectListed(rows)
			return err
		}
		// Only the rows checked above: a new READ COMMITTED statement would
		// also match messages that died since, never checked.
		if len(locked) == 0 {
			return nil
		}
		res, err := tx.ExecContext(ctx, idList(s.stmts.retryDead, len(locked)), idArgs(locked)...)
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		retried = int(n)
		return err
	})
	if err != nil {
		return 0, nil, fmt.Errorf("outboxmysql: retry dead messages in %s unless overtaken: %w", s.Name(), err)
	}
	return retried, overtaken, nil
}
