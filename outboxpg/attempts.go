package outboxpg

import (
	"context"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/go-outbox/outbox/outboxdriver"
)

var _ outboxdriver.AttemptRecorder = (*Store)(nil)

// RecordAttempts stores attempts and deletes each message's records older
// than its last AttemptsKept, in one statement.
func (s *Store) RecordAttempts(ctx context.Context, attempts []outboxdriver.Attempt) error {
	attempts = outboxdriver.LatestAttempts(attempts)
	if len(attempts) == 0 {
		return nil
	}
	var (
		ids      = make([]pgtype.UUID, len(attempts))
		numbers  = make([]int32, len(attempts))
		outcomes = make([]string, len(attempts))
		classes  = make([]string, len(attempts))
		errs     = make([]string, len(attempts))
	)
	for i, a := range attempts {
		ids[i], numbers[i] = pgUUID(a.MessageID), int32(a.Number)
		outcomes[i], classes[i], errs[i] = string(a.Outcome), string(a.Class), a.Error
	}
	_, err := s.pool.Exec(ctx, `
WITH input AS (
	SELECT * FROM unnest($1::uuid[], $2::int[], $3::text[], $4::text[], $5::text[]) AS i(message_id, attempt, outcome, class, error)
), recorded AS (
	INSERT INTO `+s.names.qAttempts+` (message_id, attempt, outcome, class, error)
	SELECT message_id, attempt, outcome, class, error FROM input
	ON CONFLICT (message_id, attempt) DO UPDATE SET
		at = now(), outcome = EXCLUDED.outcome, class = EXCLUDED.class, error = EXCLUDED.error
)
DELETE FROM `+s.names.qAttempts+` AS a USING input AS i
WHERE a.message_id = i.message_id AND a.attempt <= i.attempt - $6`,
		ids, numbers, outcomes, classes, errs, outboxdriver.AttemptsKept)
	if err != nil {
		return s.attemptsError("record attempts", err)
	}
	return nil
}

// Attempts returns the recorded attempts of message id, oldest first.
func (s *Store) Attempts(ctx context.Context, id uuid.UUID) ([]outboxdriver.Attempt, error) {
	rows, err := s.pool.Query(ctx, `SELECT attempt, at, outcome, class, error FROM `+s.names.qAttempts+` WHERE message_id = $1 ORDER BY attempt`, pgUUID(id))
	if err != nil {
		return nil, s.attemptsError("read attempts", err)
	}
	defer rows.Close()
	var list []outboxdriver.Attempt
	for rows.Next() {
		a := outboxdriver.Attempt{MessageID: id}
		var outcome, class string
		if err := rows.Scan(&a.Number, &a.At, &outcome, &class, &a.Error); err != nil {
			return nil, s.attemptsError("read attempts", err)
		}
		a.Outcome, a.Class = outboxdriver.AttemptOutcome(outcome), outboxdriver.AttemptClass(class)
		list = append(list, a)
	}
	if err := rows.Err(); err != nil {
		return nil, s.attemptsError("read attempts", err)
	}
	return list, nil
}

// ForgetAttempts deletes the records of messages ids.
func (s *Store) ForgetAttempts(ctx context.Context, ids []uuid.UUID) error {
	pgIDs := make([]pgtype.UUID, len(ids))
	for i, id := range ids {
		pgIDs[i] = pgUUID(id)
	}
	if _, err := s.pool.Exec(ctx, `DELETE FROM `+s.names.qAttempts+` WHERE message_id = ANY($1::uuid[])`, pgIDs); err != nil {
		return s.attemptsError("forget attempts", err)
	}
	return nil
}

// LastFailures returns the time of the last recorded attempt of each of ids.
func (s *Store) LastFailures(ctx context.Context, ids []uuid.UUID) (map[uuid.UUID]time.Time, error) {
	pgIDs := make([]pgtype.UUID, len(ids))
	for i, id := range ids {
		pgIDs[i] = pgUUID(id)
	}
	rows, err := s.pool.Query(ctx, `SELECT message_id, max(at) FROM `+s.names.qAttempts+` WHERE message_id = ANY($1::uuid[]) GROUP BY message_id`, pgIDs)
	if err != nil {
		return nil, s.attemptsError("read attempts", err)
	}
	defer rows.Close()
	last := map[uuid.UUID]time.Time{}
	for rows.Next() {
		var (
			id pgtype.UUID
			at time.Time
		)
		if err := rows.Scan(&id, &at); err != nil {
			return nil, s.attemptsError("read attempts", err)
		}
		last[uuid.UUID(id.Bytes)] = at
	}
	if err := rows.Err(); err != nil {
		return nil, s.attemptsError("read attempts", err)
	}
	return last, nil
}

// PurgeAttempts deletes up to limit records of messages no longer in the
// table.
func (s *Store) PurgeAttempts(ctx context.Context, limit int) (int, error) {
	tag, err := s.pool.Exec(ctx, `
DELETE FROM `+s.names.qAttempts+` WHERE ctid IN (
	SELECT a.ctid FROM `+s.names.qAttempts+` AS a
	WHERE NOT EXISTS (SELECT 1 FROM `+s.names.qTable+` AS m WHERE m.id = a.message_id)
	LIMIT $1)`, limit)
	if err != nil {
		return 0, s.attemptsError("purge attempts", err)
	}
	return int(tag.RowsAffected()), nil
}

func (s *Store) attemptsError(op string, err error) error {
	return sideTableError(op, "the attempts history", s.names.qAttempts, 8, "to keep the history of failed attempts", err)
}
