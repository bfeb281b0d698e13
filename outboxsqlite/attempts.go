package outboxsqlite

import (
	"context"
	"database/sql"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/go-outbox/outbox/outboxdriver"
)

var _ outboxdriver.AttemptRecorder = (*Store)(nil)

// RecordAttempts stores attempts and deletes each message's records older
// than its last AttemptsKept, in one write transaction.
func (s *Store) RecordAttempts(ctx context.Context, attempts []outboxdriver.Attempt) error {
	attempts = outboxdriver.LatestAttempts(attempts)
	if len(attempts) == 0 {
		return nil
	}
	err := s.writeTx(ctx, func(ctx context.Context, c *sql.Conn, now int64) error {
		for _, a := range attempts {
			if _, err := c.ExecContext(ctx, `
INSERT INTO `+s.set.qAttempts+` (message_id, attempt, at, outcome, class, error) VALUES (?, ?, ?, ?, ?, ?)
ON CONFLICT (message_id, attempt) DO UPDATE SET
	at = excluded.at, outcome = excluded.outcome, class = excluded.class, error = excluded.error`,
				a.MessageID.String(), a.Number, now, string(a.Outcome), string(a.Class), a.Error); err != nil {
				return err
			}
			if _, err := c.ExecContext(ctx, `DELETE FROM `+s.set.qAttempts+` WHERE message_id = ? AND attempt <= ?`,
				a.MessageID.String(), a.Number-outboxdriver.AttemptsKept); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return s.attemptsError("record attempts", err)
	}
	return nil
}

// Attempts returns the recorded attempts of message id, oldest first.
func (s *Store) Attempts(ctx context.Context, id uuid.UUID) ([]outboxdriver.Attempt, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT attempt, at, outcome, class, error FROM `+s.set.qAttempts+` WHERE message_id = ? ORDER BY attempt`, id.String())
	if err != nil {
		return nil, s.attemptsError("read attempts", err)
	}
	defer rows.Close()
	var list []outboxdriver.Attempt
	for rows.Next() {
		a := outboxdriver.Attempt{MessageID: id}
		var (
			at             int64
			outcome, class string
		)
		if err := rows.Scan(&a.Number, &at, &outcome, &class, &a.Error); err != nil {
			return nil, s.attemptsError("read attempts", err)
		}
		a.At, a.Outcome, a.Class = time.UnixMicro(at), outboxdriver.AttemptOutcome(outcome), outboxdriver.AttemptClass(class)
		list = append(list, a)
	}
	if err := rows.Err(); err != nil {
		return nil, s.attemptsError("read attempts", err)
	}
	return list, nil
}

// ForgetAttempts deletes the records of messages ids, in one write
// transaction.
func (s *Store) ForgetAttempts(ctx context.Context, ids []uuid.UUID) error {
	err := s.writeTx(ctx, func(ctx context.Context, c *sql.Conn, _ int64) error {
		for page := range slices.Chunk(ids, idPage) {
			if _, err := c.ExecContext(ctx, `DELETE FROM `+s.set.qAttempts+` WHERE message_id IN (`+placeholders(len(page))+`)`, idArgs(page)...); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return s.attemptsError("forget attempts", err)
	}
	return nil
}

// idPage is how many ids one statement binds: SQLite binds at most 32766
// parameters.
const idPage = 500

func placeholders(n int) string { return "?" + strings.Repeat(", ?", n-1) }

func idArgs(ids []uuid.UUID) []any {
	args := make([]any, len(ids))
	for i, id := range ids {
		args[i] = id.String()
	}
	return args
}

// LastFailures returns the time of the last recorded attempt of each of ids.
func (s *Store) LastFailures(ctx context.Context, ids []uuid.UUID) (map[uuid.UUID]time.Time, error) {
	last := map[uuid.UUID]time.Time{}
	for page := range slices.Chunk(ids, idPage) {
		rows, err := s.db.QueryContext(ctx, `SELECT message_id, max(at) FROM `+s.set.qAttempts+
			` WHERE message_id IN (`+placeholders(len(page))+`) GROUP BY message_id`, idArgs(page)...)
		if err != nil {
			return nil, s.attemptsError("read attempts", err)
		}
		for rows.Next() {
			var (
				id string
				at int64
			)
			if err := rows.Scan(&id, &at); err != nil {
				rows.Close()
				return nil, s.attemptsError("read attempts", err)
			}
			if parsed, err := uuid.Parse(id); err == nil {
				last[parsed] = time.UnixMicro(at)
			}
		}
		err = rows.Err()
		rows.Close()
		if err != nil {
			return nil, s.attemptsError("read attempts", err)
		}
	}
	return last, nil
}

// PurgeAttempts deletes up to limit records of messages no longer in the
// table. The records are found by a read, outside the write lock that
// writers need, and deleted by message id in a short write transaction.
func (s *Store) PurgeAttempts(ctx context.Context, limit int) (int, error) {
	rows, err := s.db.QueryContext(ctx, `
SELECT a.message_id, a.attempt FROM `+s.set.qAttempts+` AS a
WHERE NOT EXISTS (SELECT 1 FROM `+s.set.qTable+` AS m WHERE m.id = a.message_id)
LIMIT ?`, limit)
	if err != nil {
		return 0, s.attemptsError("purge attempts", err)
	}
	type record struct {
		id      string
		attempt int
	}
	var orphans []record
	for rows.Next() {
		var r record
		if err := rows.Scan(&r.id, &r.attempt); err != nil {
			rows.Close()
			return 0, s.attemptsError("purge attempts", err)
		}
		orphans = append(orphans, r)
	}
	err = rows.Err()
	rows.Close()
	if err != nil {
		return 0, s.attemptsError("purge attempts", err)
	}
	if len(orphans) == 0 {
		return 0, nil
	}
	// A message written again under an orphan's id since the read (a
	// restore, say) keeps its history: the delete checks again.
	var n int64
	err = s.writeTx(ctx, func(ctx context.Context, c *sql.Conn, _ int64) error {
		for _, r := range orphans {
			res, err := c.ExecContext(ctx, `DELETE FROM `+s.set.qAttempts+` WHERE message_id = ? AND attempt = ?
	AND NOT EXISTS (SELECT 1 FROM `+s.set.qTable+` WHERE id = ?)`, r.id, r.attempt, r.id)
			if err != nil {
				return err
			}
			deleted, err := res.RowsAffected()
			if err != nil {
				return err
			}
			n += deleted
		}
		return nil
	})
	if err != nil {
		return 0, s.attemptsError("purge attempts", err)
	}
	return int(n), nil
}

func (s *Store) attemptsError(op string, err error) error {
	return s.sideTableError(op, "the attempts history", s.set.qAttempts, 7, "to keep the history of failed attempts", err)
}
