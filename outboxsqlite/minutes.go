package outboxsqlite

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/go-outbox/outbox/outboxdriver"
)

var _ outboxdriver.MinuteRollup = (*Store)(nil)

// minuteMicros is a minute in the rollup's unit, microseconds.
const minuteMicros = int64(time.Minute / time.Microsecond)

// AddMinute adds to the current minute's row of the rollup (migration 9) in
// one write transaction. The row as it stood decides the rest: a minute
// without a row yet deletes the rows past MinutesKept (so the purge runs
// once per minute, not per beat), and one without a sample counts the
// pending messages; a beat that finds the minute sampled never reads the
// outbox table.
func (s *Store) AddMinute(ctx context.Context, published, failed int64) error {
	err := s.writeTx(ctx, func(ctx context.Context, c *sql.Conn, now int64) error {
		minute := now - now%minuteMicros
		var sampled sql.NullInt64
		err := c.QueryRowContext(ctx, `SELECT pending FROM `+s.set.qMinutes+` WHERE minute = ?`, minute).Scan(&sampled)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			if _, err := c.ExecContext(ctx, `DELETE FROM `+s.set.qMinutes+` WHERE minute < ?`, now-outboxdriver.MinutesKept.Microseconds()); err != nil {
				return err
			}
		case err != nil:
			return err
		}
		var pending, oldestMS sql.NullInt64
		if !sampled.Valid {
			var oldest sql.NullInt64
			if err := c.QueryRowContext(ctx, `
SELECT count(*), min(created_at) FROM `+s.set.qTable+` WHERE status = 'pending'`).Scan(&pending, &oldest); err != nil {
				return err
			}
			oldestMS = sql.NullInt64{Valid: true}
			if oldest.Valid {
				oldestMS.Int64 = max(now-oldest.Int64, 0) / 1000
			}
		}
		_, err = c.ExecContext(ctx, `
INSERT INTO `+s.set.qMinutes+` (minute, published, failed, pending, oldest_ms) VALUES (?, ?, ?, ?, ?)
ON CONFLICT (minute) DO UPDATE SET
	published = published + excluded.published,
	failed = failed + excluded.failed,
	pending = COALESCE(pending, excluded.pending),
	oldest_ms = CASE WHEN pending IS NULL THEN excluded.oldest_ms ELSE oldest_ms END`,
			minute, published, failed, pending, oldestMS)
		return err
	})
	if err != nil {
		return s.minutesError("add to the minute", err)
	}
	return nil
}

// Minutes returns the rollup's rows of the minutes that began within span
// before now, oldest first, and the clock (this process's, which is the
// database's) when it read them.
func (s *Store) Minutes(ctx context.Context, span time.Duration) ([]outboxdriver.Minute, time.Time, error) {
	now := time.Now()
	rows, err := s.db.QueryContext(ctx, `
SELECT minute, published, failed, pending, oldest_ms FROM `+s.set.qMinutes+`
WHERE minute > ? ORDER BY minute`, now.UnixMicro()-span.Microseconds())
	if err != nil {
		return nil, time.Time{}, s.minutesError("read minutes", err)
	}
	defer rows.Close()
	var list []outboxdriver.Minute
	for rows.Next() {
		var (
			m                 outboxdriver.Minute
			start             int64
			pending, oldestMS sql.NullInt64
		)
		if err := rows.Scan(&start, &m.Published, &m.Failed, &pending, &oldestMS); err != nil {
			return nil, time.Time{}, s.minutesError("read minutes", err)
		}
		m.Start, m.Sampled = time.UnixMicro(start), pending.Valid
		m.Pending, m.OldestPending = pending.Int64, time.Duration(oldestMS.Int64)*time.Millisecond
		list = append(list, m)
	}
	if err := rows.Err(); err != nil {
		return nil, time.Time{}, s.minutesError("read minutes", err)
	}
	return list, now, nil
}

// minutesError wraps err of an operation on the rollup table.
func (s *Store) minutesError(op string, err error) error {
	return s.sideTableError(op, "the per-minute rollup", s.set.qMinutes, 9, "to chart the last hour", err)
}
