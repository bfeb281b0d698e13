package outboxmysql

import (
	"context"
	"database/sql"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/go-outbox/outbox/internal/sqlrow"
	"github.com/go-outbox/outbox/outboxdriver"
)

var _ outboxdriver.AttemptRecorder = (*Store)(nil)

// RecordAttempts stores attempts and deletes each message's records older
// than its last AttemptsKept, in one READ COMMITTED transaction (migration
// 4): one multi-row INSERT, then one DELETE.
func (s *Store) RecordAttempts(ctx context.Context, attempts []outboxdriver.Attempt) error {
	attempts = outboxdriver.LatestAttempts(attempts)
	if len(attempts) == 0 {
		return nil
	}
	table := s.set.side(sideAttempts)
	insert := `INSERT INTO ` + table + ` (message_id, attempt, at, outcome, class, error) VALUES ` +
		strings.Repeat("(?, ?, UTC_TIMESTAMP(6), ?, ?, ?), ", len(attempts)-1) + `(?, ?, UTC_TIMESTAMP(6), ?, ?, ?)
ON DUPLICATE KEY UPDATE at = VALUES(at), outcome = VALUES(outcome), class = VALUES(class), error = VALUES(error)`
	args := make([]any, 0, 5*len(attempts))
	// The newest attempt of each message decides which of its records go.
	newest := map[uuid.UUID]int{}
	for _, a := range attempts {
		args = append(args, a.MessageID[:], a.Number, string(a.Outcome), string(a.Class), sqlrow.StorableText(a.Error))
		newest[a.MessageID] = max(newest[a.MessageID], a.Number)
	}
	var (
		conds   []string
		delArgs []any
	)
	for id, n := range newest {
		if n > outboxdriver.AttemptsKept {
			conds = append(conds, "(message_id = ? AND attempt <= ?)")
			delArgs = append(delArgs, id[:], n-outboxdriver.AttemptsKept)
		}
	}
	err := s.inTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, insert, args...); err != nil {
			return err
		}
		if len(conds) == 0 {
			return nil
		}
		_, err := tx.ExecContext(ctx, `DELETE FROM `+table+` WHERE `+strings.Join(conds, " OR "), delArgs...)
		return err
	})
	if err != nil {
		return s.attemptsError("record attempts", err)
	}
	return nil
}

// Attempts returns the recorded attempts of message id, oldest first.
func (s *Store) Attempts(ctx context.Context, id uuid.UUID) ([]outboxdriver.Attempt, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT attempt, at, outcome, class, error FROM `+s.set.side(sideAttempts)+` WHERE message_id = ? ORDER BY attempt`, id[:])
	if err != nil {
		return nil, s.attemptsError("read attempts", err)
	}
	defer rows.Close()
	var list []outboxdriver.Attempt
	for rows.Next() {
		var (
			a              = outboxdriver.Attempt{MessageID: id}
			at             utcTime
			outcome, class string
		)
		if err := rows.Scan(&a.Number, &at, &outcome, &class, &a.Error); err != nil {
			return nil, s.attemptsError("read attempts", err)
		}
		a.At, a.Outcome, a.Class = at.Time, outboxdriver.AttemptOutcome(outcome), outboxdriver.AttemptClass(class)
		list = append(list, a)
	}
	if err := rows.Err(); err != nil {
		return nil, s.attemptsError("read attempts", err)
	}
	return list, nil
}

// ForgetAttempts deletes the records of messages ids.
func (s *Store) ForgetAttempts(ctx context.Context, ids []uuid.UUID) error {
	if len(ids) == 0 {
		return nil
	}
	if _, err := s.execCount(ctx, `DELETE FROM `+s.set.side(sideAttempts)+` WHERE message_id IN (`+placeholders(len(ids))+`)`, idArgs(ids)...); err != nil {
		return s.attemptsError("forget attempts", err)
	}
	return nil
}

// LastFailures returns the time of the last recorded attempt of each of ids.
func (s *Store) LastFailures(ctx context.Context, ids []uuid.UUID) (map[uuid.UUID]time.Time, error) {
	last := map[uuid.UUID]time.Time{}
	if len(ids) == 0 {
		return last, nil
	}
	rows, err := s.db.QueryContext(ctx, `SELECT message_id, MAX(at) FROM `+s.set.side(sideAttempts)+`
WHERE message_id IN (`+placeholders(len(ids))+`) GROUP BY message_id`, idArgs(ids)...)
	if err != nil {
		return nil, s.attemptsError("read attempts", err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			raw []byte
			at  utcTime
		)
		if err := rows.Scan(&raw, &at); err != nil {
			return nil, s.attemptsError("read attempts", err)
		}
		id, err := uuid.FromBytes(raw)
		if err != nil {
			return nil, s.attemptsError("read attempts", err)
		}
		last[id] = at.Time
	}
	if err := rows.Err(); err != nil {
		return nil, s.attemptsError("read attempts", err)
	}
	return last, nil
}

// PurgeAttempts deletes up to limit records of messages no longer in the
// table. At READ COMMITTED the subquery reads the outbox table without
// locking it, so the purge never holds up a claim or a writer.
func (s *Store) PurgeAttempts(ctx context.Context, limit int) (int, error) {
	if limit <= 0 {
		return 0, nil
	}
	n, err := s.execCount(ctx, `
DELETE FROM `+s.set.side(sideAttempts)+`
WHERE NOT EXISTS (SELECT 1 FROM `+s.set.qTable+` AS m WHERE m.id = message_id)
LIMIT ?`, limit)
	if err != nil {
		return 0, s.attemptsError("purge attempts", err)
	}
	return n, nil
}

func (s *Store) attemptsError(op string, err error) error {
	return s.sideTableError(op, "the attempts history", sideAttempts, 4, "to keep the history of failed attempts", err)
}
