package outboxsqlite

import (
	"context"
	"database/sql"
	"slices"
	"time"

	"github.com/go-outbox/outbox/outboxdriver"
)

var _ outboxdriver.TopicPauser = (*Store)(nil)

// The moves pass over leased rows, as outboxpg's do: a relay publishing
// one settles it, and if it puts it back unpublished, the relay that
// claims it next sees the pause and moves it.

// PauseTopic records the pause and moves the topic's due-range messages
// out of it, in one write transaction (migration 8).
func (s *Store) PauseTopic(ctx context.Context, topic, by, reason string) (int, error) {
	var moved int64
	err := s.writeTx(ctx, func(ctx context.Context, c *sql.Conn, now int64) error {
		if _, err := c.ExecContext(ctx, `
INSERT INTO `+s.set.qPaused+` (topic, paused_at, paused_by, reason) VALUES (?, ?, ?, ?)
ON CONFLICT (topic) DO UPDATE SET paused_by = excluded.paused_by, reason = excluded.reason`,
			topic, now, by, reason); err != nil {
			return err
		}
		res, err := c.ExecContext(ctx, `
UPDATE `+s.set.qTable+` SET available_at = available_at + ?1, lease_token = NULL, locked_until = NULL
WHERE status = 'pending' AND topic = ?2 AND available_at < ?3 AND (locked_until IS NULL OR locked_until <= ?4)`,
			outboxdriver.PauseShift.Microseconds(), topic, outboxdriver.PausedFrom.UnixMicro(), now)
		if err != nil {
			return err
		}
		moved, err = res.RowsAffected()
		return err
	})
	if err != nil {
		return 0, s.pausedError("pause topic "+topic, err)
	}
	return int(moved), nil
}

// moveBack moves back the paused messages no paused topic holds, on c in
// a write transaction.
func (s *Store) moveBack(ctx context.Context, c *sql.Conn) (int64, error) {
	res, err := c.ExecContext(ctx, `
UPDATE `+s.set.qTable+` AS o SET available_at = available_at - ?1
WHERE o.status = 'pending' AND o.available_at >= ?2
	AND o.topic NOT IN (SELECT topic FROM `+s.set.qPaused+`)
	AND NOT EXISTS (SELECT 1 FROM `+s.set.qTable+` AS h
		WHERE o.key <> '' AND h.key = o.key AND h.status = 'pending' AND h.rowid < o.rowid AND h.available_at >= ?2
			AND h.topic IN (SELECT topic FROM `+s.set.qPaused+`))`,
		outboxdriver.PauseShift.Microseconds(), outboxdriver.PausedFrom.UnixMicro())
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// ResumeTopic deletes the pause and moves back, in one write transaction.
func (s *Store) ResumeTopic(ctx context.Context, topic string) (int, error) {
	var moved int64
	err := s.writeTx(ctx, func(ctx context.Context, c *sql.Conn, _ int64) error {
		if _, err := c.ExecContext(ctx, `DELETE FROM `+s.set.qPaused+` WHERE topic = ?`, topic); err != nil {
			return err
		}
		var err error
		moved, err = s.moveBack(ctx, c)
		return err
	})
	if err != nil {
		return 0, s.pausedError("resume topic "+topic, err)
	}
	return int(moved), nil
}

// MoveBackUnpaused moves back the paused messages no paused topic holds.
func (s *Store) MoveBackUnpaused(ctx context.Context) (int, error) {
	var moved int64
	err := s.writeTx(ctx, func(ctx context.Context, c *sql.Conn, _ int64) error {
		var err error
		moved, err = s.moveBack(ctx, c)
		return err
	})
	if err != nil {
		return 0, s.pausedError("move back unpaused messages", err)
	}
	return int(moved), nil
}

// PausedTopics lists the paused topics and the topics with messages moved
// out of the due range, with their counts.
func (s *Store) PausedTopics(ctx context.Context) ([]outboxdriver.PausedTopic, error) {
	rows, err := s.db.QueryContext(ctx, `
WITH moved AS (
	SELECT topic, count(*) AS n FROM `+s.set.qTable+`
	WHERE status = 'pending' AND available_at >= ? GROUP BY topic
), topics AS (
	SELECT topic FROM `+s.set.qPaused+` UNION SELECT topic FROM moved
)
SELECT t.topic, p.topic IS NULL, p.paused_at, coalesce(p.paused_by, ''), coalesce(p.reason, ''), coalesce(m.n, 0)
FROM topics AS t
LEFT JOIN `+s.set.qPaused+` AS p ON p.topic = t.topic
LEFT JOIN moved AS m ON m.topic = t.topic
ORDER BY t.topic`, outboxdriver.PausedFrom.UnixMicro())
	if err != nil {
		return nil, s.pausedError("list paused topics", err)
	}
	defer rows.Close()
	var list []outboxdriver.PausedTopic
	for rows.Next() {
		var (
			p  outboxdriver.PausedTopic
			at sql.NullInt64
		)
		if err := rows.Scan(&p.Topic, &p.Resumed, &at, &p.By, &p.Reason, &p.Messages); err != nil {
			return nil, s.pausedError("list paused topics", err)
		}
		if at.Valid {
			p.At = time.UnixMicro(at.Int64)
		}
		list = append(list, p)
	}
	if err := rows.Err(); err != nil {
		return nil, s.pausedError("list paused topics", err)
	}
	return list, nil
}

// PausedTopicNames lists the paused topics' names.
func (s *Store) PausedTopicNames(ctx context.Context) ([]string, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT topic FROM `+s.set.qPaused+` ORDER BY topic`)
	if err != nil {
		return nil, s.pausedError("list paused topics", err)
	}
	defer rows.Close()
	var names []string
	for rows.Next() {
		var topic string
		if err := rows.Scan(&topic); err != nil {
			return nil, s.pausedError("list paused topics", err)
		}
		names = append(names, topic)
	}
	if err := rows.Err(); err != nil {
		return nil, s.pausedError("list paused topics", err)
	}
	return names, nil
}

// PausedAmong returns which of topics are paused. SQLite runs one write
// transaction at a time, so no pause or resume is under way while it reads.
func (s *Store) PausedAmong(ctx context.Context, topics []string) ([]string, error) {
	names, err := s.PausedTopicNames(ctx)
	if err != nil {
		return nil, err
	}
	var among []string
	for _, name := range names {
		if slices.Contains(topics, name) {
			among = append(among, name)
		}
	}
	return among, nil
}

// pausedError wraps err of an operation on the paused topics.
func (s *Store) pausedError(op string, err error) error {
	return s.sideTableError(op, "the paused topics table", s.set.qPaused, 8, "to pause topics", err)
}
