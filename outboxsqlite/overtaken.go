package outboxsqlite

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

	"github.com/google/uuid"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/sqlrow"
	"github.com/go-outbox/outbox/outboxdriver"
)

// skipsDead reports whether, in key order, the store lets a key go on past
// a dead message, and so counts the messages that overtake it.
func (s settings) skipsDead() bool { return s.orderByKey && !s.deadHoldsKey }

// noOvertakenColumn reports whether err is SQLite's complaint about a
// table before migration 5, which has no overtaken column.
func noOvertakenColumn(err error) bool {
	return err != nil && strings.Contains(err.Error(), "no such column: overtaken")
}

// queryListed runs q, a query of messageColumns and overtaken (Get,
// ListDead), and reads its messages. On a table before migration 5 it runs
// old instead, which reads 0: nothing counted there (only stores that skip
// dead messages in key order count, and they need migration 5), and
// `outbox dead` keeps working on a table that a relay needing no newer
// migration uses.
func (s *Store) queryListed(ctx context.Context, q, old string, args ...any) ([]outbox.Message, error) {
	rows, err := s.db.QueryContext(ctx, q, args...)
	if noOvertakenColumn(err) {
		rows, err = s.db.QueryContext(ctx, old, args...)
	}
	if err != nil {
		return nil, err
	}
	return collectListed(rows)
}

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

var _ outboxdriver.KeyOrderRetrier = (*Store)(nil)

// RetryDeadUnlessOvertaken retries the dead messages ids (every dead
// message if all) unless later messages of their key overtook one of
// them; then it retries none and returns those (see
// outboxdriver.KeyOrderRetrier). The look at the counts and the retry run
// in one write transaction, so no settlement counts in between. On a
// table before migration 5, which has no count, it retries as RetryDead
// and RetryAllDead do.
func (s *Store) RetryDeadUnlessOvertaken(ctx context.Context, ids []uuid.UUID, all bool) (int, []outbox.Message, error) {
	if !all && len(ids) == 0 {
		return 0, nil, nil
	}
	asked, args := `id IN (SELECT value FROM json_each(?1))`, []any{idsJSON(ids)}
	if all {
		asked, args = `true`, nil
	}
	var retried int64
	var overtaken []outbox.Message
	err := s.writeTx(ctx, func(ctx context.Context, c *sql.Conn, now int64) error {
		rows, err := c.QueryContext(ctx, `SELECT `+messageColumns+`, overtaken FROM `+s.set.qTable+`
WHERE status = 'dead' AND overtaken > 0 AND `+asked+` ORDER BY id`, args...)
		switch {
		case noOvertakenColumn(err): // nothing counted
		case err != nil:
			return err
		default:
			if overtaken, err = collectListed(rows); err != nil || len(overtaken) > 0 {
				return err
			}
		}
		retry, retryArgs := s.stmts.retryDead, []any{now, idsJSON(ids)}
		if all {
			retry, retryArgs = s.stmts.retryAll, []any{now}
		}
		res, err := c.ExecContext(ctx, retry, retryArgs...)
		if err != nil {
			return err
		}
		retried, err = res.RowsAffected()
		return err
	})
	if err != nil {
		return 0, nil, fmt.Errorf("outboxsqlite: retry dead messages in %s unless overtaken: %w", s.Name(), explain(err, s.path))
	}
	return int(retried), overtaken, nil
}
