package outboxpg

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
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
// out of it (migration 9). Pauses and resumes of a table take turns (lockPaused).
func (s *Store) PauseTopic(ctx context.Context, topic, by, reason string) (int, error) {
	var moved int
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if err := s.lockPaused(ctx, tx); err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, `
WITH paused AS (
	INSERT INTO `+s.names.qPaused+` (topic, paused_by, reason) VALUES ($1, $2, $3)
	ON CONFLICT (topic) DO UPDATE SET paused_by = EXCLUDED.paused_by, reason = EXCLUDED.reason
), moving AS MATERIALIZED (
	SELECT ctid FROM `+s.names.qTable+`
	WHERE status = 'pending' AND topic = $1 AND available_at < $4
		AND (locked_until IS NULL OR locked_until <= now())
	FOR UPDATE SKIP LOCKED
)
UPDATE `+s.names.qTable+` SET available_at = available_at + $5::bigint * interval '1 microsecond', lease_token = NULL, locked_until = NULL
WHERE ctid = ANY(ARRAY(SELECT ctid FROM moving))`,
			topic, by, reason, outboxdriver.PausedFrom, outboxdriver.PauseShift.Microseconds())
		moved = int(tag.RowsAffected())
		return err
	})
	if err != nil {
		return 0, s.pausedError("pause topic "+topic, err)
	}
	return moved, nil
}

// lockPaused makes the pauses and resumes of the table take turns: a
// resume's move back must see every other resume's delete, or two resumes
// of topics that share a key would each leave a message the other topic
// held. Relays' reads (plain, or FOR SHARE) do not wait for it.
func (s *Store) lockPaused(ctx context.Context, tx pgx.Tx) error {
	_, err := tx.Exec(ctx, `LOCK TABLE `+s.names.qPaused+` IN SHARE ROW EXCLUSIVE MODE`)
	return err
}

// moveBack is the statement that moves back the paused messages no paused
// topic holds ($1 PausedFrom, $2 PauseShift in microseconds, $3 the
// channel). It wakes the relays listening on the table when it moved any.
const moveBackSQL = `
WITH moving AS MATERIALIZED (
	SELECT o.ctid FROM {t} AS o
	WHERE o.status = 'pending' AND o.available_at >= $1
		AND o.topic NOT IN (SELECT topic FROM {paused})
		AND NOT EXISTS (SELECT FROM {t} AS h
			WHERE o.key <> '' AND h.key = o.key AND h.status = 'pending' AND h.seq < o.seq AND h.available_at >= $1
				AND h.topic IN (SELECT topic FROM {paused}))
	FOR UPDATE OF o SKIP LOCKED
), moved AS (
	UPDATE {t} SET available_at = available_at - $2::bigint * interval '1 microsecond'
	WHERE ctid = ANY(ARRAY(SELECT ctid FROM moving))
	RETURNING 1
)
SELECT c.n FROM (SELECT count(*) AS n FROM moved) AS c
LEFT JOIN LATERAL (SELECT pg_notify($3, '') WHERE c.n > 0) AS woken ON true`

// moveBack runs moveBackSQL on q and returns how many it moved.
func (s *Store) moveBack(ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}) (int, error) {
	var moved int
	sql := strings.NewReplacer("{t}", s.names.qTable, "{paused}", s.names.qPaused).Replace(moveBackSQL)
	err := q.QueryRow(ctx, sql, outboxdriver.PausedFrom, outboxdriver.PauseShift.Microseconds(), s.names.channel).Scan(&moved)
	return moved, err
}

// ResumeTopic deletes the pause and then, in a statement of its own, moves
// back: its snapshot includes every postponement that committed before the
// delete did, and a relay whose postponement commits later waits for the
// delete in PausedAmong and moves it back itself.
func (s *Store) ResumeTopic(ctx context.Context, topic string) (int, error) {
	var moved int
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if err := s.lockPaused(ctx, tx); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `DELETE FROM `+s.names.qPaused+` WHERE topic = $1`, topic); err != nil {
			return err
		}
		var err error
		moved, err = s.moveBack(ctx, tx)
		return err
	})
	if err != nil {
		return 0, s.pausedError("resume topic "+topic, err)
	}
	return moved, nil
}

// MoveBackUnpaused moves back the paused messages no paused topic holds.
func (s *Store) MoveBackUnpaused(ctx context.Context) (int, error) {
	moved, err := s.moveBack(ctx, s.pool)
	if err != nil {
		return 0, s.pausedError("move back unpaused messages", err)
	}
	return moved, nil
}

// PausedAmong locks the paused rows of topics for share, without waiting:
// a resume under way holds its row (its delete) until it has moved back, and
// a pause its row until it has moved the topic out, so a row it cannot lock
// is a change under way (ErrPauseChanging). A relay needs UPDATE on the
// table to lock for share.
func (s *Store) PausedAmong(ctx context.Context, topics []string) ([]string, error) {
	rows, err := s.pool.Query(ctx, `SELECT topic FROM `+s.names.qPaused+` WHERE topic = ANY($1) ORDER BY topic FOR SHARE NOWAIT`, topics)
	if err == nil {
		var names []string
		if names, err = pgx.CollectRows(rows, pgx.RowTo[string]); err == nil {
			return names, nil
		}
	}
	if pgErr := (*pgconn.PgError)(nil); errors.As(err, &pgErr) && pgErr.Code == "55P03" { // lock_not_available
		return nil, fmt.Errorf("outboxpg: read paused topics in %s: %w", s.names.qPaused, outboxdriver.ErrPauseChanging)
	}
	return nil, s.pausedError("read paused topics", err)
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
