package outboxpg

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/go-outbox/outbox/outboxdriver"
)

var _ outboxdriver.TopicPauser = (*Store)(nil)

// The moves pass over rows another transaction holds (SKIP LOCKED): a
// relay's open claim holds the rows it is publishing, and one it puts back
// unpublished is moved by the relay that claims it next, which sees the
// pause. They also pass over leased rows: moving a row changes its
// address, which its lease holder settles by (see addressBook).

// PauseTopic records the pause and moves the topic's due-range messages
// out of it, in one statement (migration 9).
func (s *Store) PauseTopic(ctx context.Context, topic, by, reason string) (int, error) {
	tag, err := s.pool.Exec(ctx, `
WITH paused AS (
	INSERT INTO `+s.names.qPaused+` (topic, paused_by, reason) VALUES ($1, $2, $3)
	ON CONFLICT (topic) DO UPDATE SET paused_by = EXCLUDED.paused_by, reason = EXCLUDED.reason
), moving AS MATERIALIZED (
	SELECT ctid FROM `+s.names.qTable+`
	WHERE status = 'pending' AND topic = $1 AND available_at < $4
		AND (locked_until IS NULL OR locked_until <= now())
	FOR UPDATE SKIP LOCKED
)
UPDATE `+s.names.qTable+` SET available_at = available_at + $5::bigint * interval '1 microsecond'
WHERE ctid = ANY(ARRAY(SELECT ctid FROM moving))`,
		topic, by, reason, outboxdriver.PausedFrom, outboxdriver.PauseShift.Microseconds())
	if err != nil {
		return 0, s.pausedError("pause topic "+topic, err)
	}
	return int(tag.RowsAffected()), nil
}

// moveBack is the statement that moves back the paused messages no paused
// topic holds, the topic in $3 counting as not paused (it is being resumed
// by the same statement, whose snapshot still has its row). It wakes the
// relays listening on the table when it moved any.
func (s *Store) moveBack(prefix string) string {
	return prefix + ` moving AS MATERIALIZED (
	SELECT o.ctid FROM ` + s.names.qTable + ` AS o
	WHERE o.status = 'pending' AND o.available_at >= $1
		AND o.topic NOT IN (SELECT topic FROM ` + s.names.qPaused + ` WHERE topic <> $3)
		AND NOT EXISTS (SELECT FROM ` + s.names.qTable + ` AS h
			WHERE o.key <> '' AND h.key = o.key AND h.status = 'pending' AND h.seq < o.seq AND h.available_at >= $1
				AND h.topic IN (SELECT topic FROM ` + s.names.qPaused + ` WHERE topic <> $3))
	FOR UPDATE OF o SKIP LOCKED
), moved AS (
	UPDATE ` + s.names.qTable + ` SET available_at = available_at - $2::bigint * interval '1 microsecond'
	WHERE ctid = ANY(ARRAY(SELECT ctid FROM moving))
	RETURNING 1
)
SELECT c.n FROM (SELECT count(*) AS n FROM moved) AS c
LEFT JOIN LATERAL (SELECT pg_notify($4, '') WHERE c.n > 0) AS woken ON true`
}

// ResumeTopic deletes the pause and moves back, in one statement.
func (s *Store) ResumeTopic(ctx context.Context, topic string) (int, error) {
	var moved int
	err := s.pool.QueryRow(ctx, s.moveBack(`WITH resumed AS (DELETE FROM `+s.names.qPaused+` WHERE topic = $3),`),
		outboxdriver.PausedFrom, outboxdriver.PauseShift.Microseconds(), topic, s.names.channel).Scan(&moved)
	if err != nil {
		return 0, s.pausedError("resume topic "+topic, err)
	}
	return moved, nil
}

// MoveBackUnpaused moves back the paused messages no paused topic holds.
func (s *Store) MoveBackUnpaused(ctx context.Context) (int, error) {
	// No topic is being resumed: $3 names none (a topic is never empty;
	// NULL would not do, as "topic <> NULL" keeps no row).
	var moved int
	err := s.pool.QueryRow(ctx, s.moveBack(`WITH`), outboxdriver.PausedFrom, outboxdriver.PauseShift.Microseconds(), "", s.names.channel).Scan(&moved)
	if err != nil {
		return 0, s.pausedError("move back unpaused messages", err)
	}
	return moved, nil
}

// PausedTopics lists the paused topics and the topics with messages moved
// out of the due range, with their counts.
func (s *Store) PausedTopics(ctx context.Context) ([]outboxdriver.PausedTopic, error) {
	rows, err := s.pool.Query(ctx, `
WITH moved AS (
	SELECT topic, count(*) AS n FROM `+s.names.qTable+`
	WHERE status = 'pending' AND available_at >= $1 GROUP BY topic
)
SELECT COALESCE(p.topic, m.topic), p.topic IS NULL, p.paused_at, COALESCE(p.paused_by, ''), COALESCE(p.reason, ''), COALESCE(m.n, 0)
FROM `+s.names.qPaused+` AS p FULL JOIN moved AS m ON m.topic = p.topic
ORDER BY 1`, outboxdriver.PausedFrom)
	if err != nil {
		return nil, s.pausedError("list paused topics", err)
	}
	defer rows.Close()
	var list []outboxdriver.PausedTopic
	for rows.Next() {
		var (
			p  outboxdriver.PausedTopic
			at pgtype.Timestamptz
		)
		if err := rows.Scan(&p.Topic, &p.Resumed, &at, &p.By, &p.Reason, &p.Messages); err != nil {
			return nil, s.pausedError("list paused topics", err)
		}
		p.At = at.Time
		list = append(list, p)
	}
	if err := rows.Err(); err != nil {
		return nil, s.pausedError("list paused topics", err)
	}
	return list, nil
}

// PausedTopicNames lists the paused topics' names.
func (s *Store) PausedTopicNames(ctx context.Context) ([]string, error) {
	rows, err := s.pool.Query(ctx, `SELECT topic FROM `+s.names.qPaused+` ORDER BY topic`)
	if err != nil {
		return nil, s.pausedError("list paused topics", err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, s.pausedError("list paused topics", err)
	}
	return names, nil
}

// pausedError wraps err of an operation on the paused topics.
func (s *Store) pausedError(op string, err error) error {
	return sideTableError(op, "the paused topics table", s.names.qPaused, 9, "to pause topics", err)
}
