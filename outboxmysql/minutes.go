package outboxmysql

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/go-outbox/outbox/outboxdriver"
)

var _ outboxdriver.MinuteRollup = (*Store)(nil)

// AddMinute adds to the current minute's row of the rollup (migration 6)
// in one READ COMMITTED transaction. The row as it stood when the
// transaction read it decides the rest: a minute without a row yet deletes
// the rows past MinutesKept (so the purge runs once per minute, not per
// beat), and one without a sample counts the pending messages; a beat that
// finds the minute sampled never reads the outbox table. Two relays that
// both find no sample both count; the first to commit keeps its sample.
func (s *Store) AddMinute(ctx context.Context, published, failed int64) error {
	minutes := s.set.side(sideMinutes)
	err := s.inTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		var (
			minute  string
			exists  bool
			sampled sql.NullBool
		)
		err := tx.QueryRowContext(ctx, `
SELECT c.minute, m.minute IS NOT NULL, m.pending IS NOT NULL
FROM (SELECT DATE_FORMAT(UTC_TIMESTAMP(), '%Y-%m-%d %H:%i:00') AS minute) AS c
LEFT JOIN `+minutes+` AS m ON m.minute = c.minute`).Scan(&minute, &exists, &sampled)
		if err != nil {
			return err
		}
		if !exists {
			if _, err := tx.ExecContext(ctx, `DELETE FROM `+minutes+` WHERE minute < UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND`,
				micros(outboxdriver.MinutesKept)); err != nil {
				return err
			}
		}
		var pending, oldestMS sql.NullInt64
		if !sampled.Bool {
			if err := tx.QueryRowContext(ctx, `
SELECT COUNT(*), COALESCE(GREATEST(0, FLOOR(TIMESTAMPDIFF(MICROSECOND, MIN(created_at), UTC_TIMESTAMP(6)) / 1000)), 0)
FROM `+s.set.qTable+` WHERE status = 'pending'`).Scan(&pending, &oldestMS); err != nil {
				return err
			}
		}
		// MySQL assigns left to right, each seeing the ones before: the
		// sample's age is set while pending still says whether the row had
		// one.
		_, err = tx.ExecContext(ctx, `
INSERT INTO `+minutes+` (minute, published, failed, pending, oldest_ms) VALUES (?, ?, ?, ?, ?)
ON DUPLICATE KEY UPDATE
	published = published + VALUES(published),
	failed = failed + VALUES(failed),
	oldest_ms = IF(pending IS NULL, VALUES(oldest_ms), oldest_ms),
	pending = COALESCE(pending, VALUES(pending))`, minute, published, failed, pending, oldestMS)
		return err
	})
	if err != nil {
		return s.minutesError("add to the minute", err)
	}
	return nil
}

// Minutes returns the rollup's rows of the minutes that began within span
// before now, oldest first, and the database's clock.
func (s *Store) Minutes(ctx context.Context, span time.Duration) ([]outboxdriver.Minute, time.Time, error) {
	rows, err := s.db.QueryContext(ctx, `
SELECT minute, published, failed, pending, oldest_ms, UTC_TIMESTAMP(6) FROM `+s.set.side(sideMinutes)+`
WHERE minute > UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND ORDER BY minute`, micros(span))
	if err != nil {
		return nil, time.Time{}, s.minutesError("read minutes", err)
	}
	defer rows.Close()
	var (
		list []outboxdriver.Minute
		now  utcTime
	)
	for rows.Next() {
		var (
			m                 outboxdriver.Minute
			start             utcTime
			pending, oldestMS sql.NullInt64
		)
		if err := rows.Scan(&start, &m.Published, &m.Failed, &pending, &oldestMS, &now); err != nil {
			return nil, time.Time{}, s.minutesError("read minutes", err)
		}
		m.Start, m.Sampled = start.Time, pending.Valid
		m.Pending, m.OldestPending = pending.Int64, time.Duration(oldestMS.Int64)*time.Millisecond
		list = append(list, m)
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return nil, time.Time{}, s.minutesError("read minutes", err)
	}
	if !now.Valid {
		t, err := s.now(ctx)
		if err != nil {
			return nil, time.Time{}, s.minutesError("read minutes", err)
		}
		return list, t, nil
	}
	return list, now.Time, nil
}

// minutesError wraps err of an operation on the rollup table.
func (s *Store) minutesError(op string, err error) error {
	return s.sideTableError(op, "the per-minute rollup", sideMinutes, 6, "to chart the last hour", err)
}
