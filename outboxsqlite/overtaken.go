package outboxsqlite

import (
	"context"
	"database/sql"
	"strings"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/sqlrow"
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
