package outboxmysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/go-outbox/outbox/outboxdriver"
)

var _ outboxdriver.TopicPauser = (*Store)(nil)

// PauseLockTimeout is how long a pause or resume waits for another one of
// the same table (in any process) to finish.
const PauseLockTimeout = 30 * time.Second

// moveChunk bounds the ids of one UPDATE that moves messages in or out of
// the due range, far below the 65,535 placeholders of a statement.
const moveChunk = 1000

// The moves find their rows with a locking read, then change them by
// primary key: MySQL cannot update a table that a subquery of the same
// UPDATE reads.
//
// A pause passes over leased rows and rows another transaction holds (SKIP
// LOCKED), as outboxpg's does: a relay publishing one settles it, and if it
// puts it back unpublished, or an application's insert commits it later,
// the relay that claims it sees the pause and postpones it.
//
// A move back waits instead. No application transaction holds a row in the
// paused range (the writer refuses a due time that late), and the store's
// own transactions there are short; but InnoDB may lock, for an instant,
// the first record past the range a claim reads (the first paused one), and
// a move back that passed over it would leave that message paused with
// nothing to move it back. Waiting, at READ COMMITTED, it reads the row as
// the other transaction committed it: a postponement in flight is moved
// back too.

// PauseTopic records the pause and moves the topic's due-range messages
// out of it, in one READ COMMITTED transaction (migration 5). Pauses and
// resumes of a table take turns (pauseLocked).
func (s *Store) PauseTopic(ctx context.Context, topic, by, reason string) (int, error) {
	var moved int
	err := s.pauseLocked(ctx, func(ctx context.Context, tx *sql.Tx) error {
		moved = 0
		if _, err := tx.ExecContext(ctx, `
INSERT INTO `+s.set.side(sidePaused)+` (topic, paused_at, paused_by, reason) VALUES (?, UTC_TIMESTAMP(6), ?, ?)
ON DUPLICATE KEY UPDATE paused_by = VALUES(paused_by), reason = VALUES(reason)`, topic, by, reason); err != nil {
			return err
		}
		ids, err := queryIDs(ctx, tx, `
SELECT id FROM `+s.set.qTable+`
WHERE status = 'pending' AND topic = ? AND available_at < ?
	AND (locked_until IS NULL OR locked_until <= UTC_TIMESTAMP(6))
FOR UPDATE SKIP LOCKED`, topic, datetime(outboxdriver.PausedFrom, false))
		if err != nil {
			return err
		}
		moved, err = s.shift(ctx, tx, ids, "+", "lease_token = NULL, locked_until = NULL, ")
		return err
	})
	if err != nil {
		return 0, s.pausedError("pause topic "+topic, err)
	}
	return moved, nil
}

// shift moves the due times of ids by PauseShift, forward (op "+") or back
// ("-"), setting also what set says, and returns how many rows it changed.
// tx holds their row locks.
func (s *Store) shift(ctx context.Context, tx *sql.Tx, ids []uuid.UUID, op, set string) (int, error) {
	var moved int64
	for chunk := range chunks(ids, moveChunk) {
		res, err := tx.ExecContext(ctx, `UPDATE `+s.set.byStatusAndID()+` SET `+set+`available_at = available_at `+op+` INTERVAL ? MICROSECOND
WHERE status = 'pending' AND id IN (`+placeholders(len(chunk))+`)`, append([]any{micros(outboxdriver.PauseShift)}, idArgs(chunk)...)...)
		if err != nil {
			return 0, err
		}
		n, err := res.RowsAffected()
		if err != nil {
			return 0, err
		}
		moved += n
	}
	return int(moved), nil
}

// chunks yields ids in slices of at most n.
func chunks(ids []uuid.UUID, n int) func(yield func([]uuid.UUID) bool) {
	return func(yield func([]uuid.UUID) bool) {
		for len(ids) > 0 {
			k := min(n, len(ids))
			if !yield(ids[:k]) {
				return
			}
			ids = ids[k:]
		}
	}
}

// pauseLocked runs fn in a READ COMMITTED transaction while its connection
// holds the table's pause lock (GET_LOCK), so that the pauses and resumes
// of a table take turns: a resume's move back must see every other
// resume's delete, or two resumes of topics that share a key would each
// leave a message the other topic held. Relays' reads do not take the lock.
// The lock belongs to the connection's session, so a process that dies
// holding it frees it. A deadlock or lock wait timeout runs fn again, as
// inTx does.
func (s *Store) pauseLocked(ctx context.Context, fn func(ctx context.Context, tx *sql.Tx) error) error {
	c, err := s.db.Conn(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	name := lockName("pause")
	var got sql.NullInt64
	if err := c.QueryRowContext(ctx, `SELECT GET_LOCK(`+name+`, ?)`, s.set.table, int(PauseLockTimeout/time.Second)).Scan(&got); err != nil {
		return fmt.Errorf("take the pause lock: %w", err)
	}
	if got.Int64 != 1 {
		return fmt.Errorf("another pause or resume of %s held the pause lock for %v; try again once it is done", s.Name(), PauseLockTimeout)
	}
	defer func() { _, _ = c.ExecContext(context.WithoutCancel(ctx), `DO RELEASE_LOCK(`+name+`)`, s.set.table) }()
	return retryTx(ctx, func() error {
		tx, err := c.BeginTx(ctx, readCommitted)
		if err != nil {
			return err
		}
		if err := fn(ctx, tx); err != nil {
			_ = tx.Rollback()
			return err
		}
		return tx.Commit()
	})
}

// moveBack moves back, in tx, the paused messages no paused topic holds:
// those from PausedFrom on whose topic is not paused and which no earlier
// pending message of their key, of a paused topic, holds. Its locking read
// is a statement of its own: at READ COMMITTED it sees every postponement
// committed before it began, and waits for those in flight.
func (s *Store) moveBack(ctx context.Context, tx *sql.Tx) (int, error) {
	from := datetime(outboxdriver.PausedFrom, false)
	paused := s.set.side(sidePaused)
	ids, err := queryIDs(ctx, tx, `
SELECT o.id FROM `+s.set.qTable+` AS o
WHERE o.status = 'pending' AND o.available_at >= ?
	AND o.topic NOT IN (SELECT topic FROM `+paused+`)
	AND NOT EXISTS (SELECT 1 FROM `+s.set.qTable+` AS h
		WHERE o.`+"`key`"+` <> '' AND h.`+"`key` = o.`key`"+` AND h.status = 'pending' AND h.seq < o.seq AND h.available_at >= ?
			AND h.topic IN (SELECT topic FROM `+paused+`))
FOR UPDATE`, from, from)
	if err != nil {
		return 0, err
	}
	return s.shift(ctx, tx, ids, "-", "")
}

// ResumeTopic deletes the pause and then, in a statement of its own, moves
// back: that statement sees every postponement that committed before it
// began, and a relay whose postponement commits later waits for the delete
// in PausedAmong and moves it back itself.
func (s *Store) ResumeTopic(ctx context.Context, topic string) (int, error) {
	var moved int
	err := s.pauseLocked(ctx, func(ctx context.Context, tx *sql.Tx) (err error) {
		if _, err := tx.ExecContext(ctx, `DELETE FROM `+s.set.side(sidePaused)+` WHERE topic = ?`, topic); err != nil {
			return err
		}
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
	var moved int
	err := s.inTx(ctx, func(ctx context.Context, tx *sql.Tx) (err error) {
		moved, err = s.moveBack(ctx, tx)
		return err
	})
	if err != nil {
		return 0, s.pausedError("move back unpaused messages", err)
	}
	return moved, nil
}

// PausedAmong returns which of topics are paused. A pause or resume holds
// the table's pause lock (pauseLocked) until it has committed, so a lock
// that is not free is a change under way: it answers ErrPauseChanging at
// once instead of waiting. When the lock is free, whatever change comes
// next begins after this read: its move back sees what committed before.
func (s *Store) PausedAmong(ctx context.Context, topics []string) ([]string, error) {
	if len(topics) == 0 {
		return nil, nil
	}
	var free sql.NullInt64
	if err := s.db.QueryRowContext(ctx, `SELECT IS_FREE_LOCK(`+lockName("pause")+`)`, s.set.table).Scan(&free); err != nil {
		return nil, s.pausedError("read paused topics", err)
	}
	if free.Int64 != 1 {
		return nil, fmt.Errorf("outboxmysql: read paused topics of %s: %w", s.Name(), outboxdriver.ErrPauseChanging)
	}
	args := make([]any, len(topics))
	for i, t := range topics {
		args[i] = t
	}
	rows, err := s.db.QueryContext(ctx, `SELECT topic FROM `+s.set.side(sidePaused)+` WHERE topic IN (`+placeholders(len(topics))+`) ORDER BY topic`, args...)
	if err != nil {
		return nil, s.pausedError("read paused topics", err)
	}
	names, err := scanTopics(rows)
	if err != nil {
		return nil, s.pausedError("read paused topics", err)
	}
	return names, nil
}

// scanTopics reads rows of one topic column and closes rows.
func scanTopics(rows *sql.Rows) ([]string, error) {
	defer rows.Close()
	var names []string
	for rows.Next() {
		var topic []byte
		if err := rows.Scan(&topic); err != nil {
			return nil, err
		}
		names = append(names, string(topic))
	}
	return names, errors.Join(rows.Err(), rows.Close())
}

// PausedTopics lists the paused topics and the topics with messages moved
// out of the due range, with their counts. MySQL has no FULL JOIN: the
// topics of both sides are united first.
func (s *Store) PausedTopics(ctx context.Context) ([]outboxdriver.PausedTopic, error) {
	from := datetime(outboxdriver.PausedFrom, false)
	paused := s.set.side(sidePaused)
	rows, err := s.db.QueryContext(ctx, `
SELECT x.topic, p.topic IS NULL, p.paused_at, COALESCE(p.paused_by, ''), COALESCE(p.reason, ''), COALESCE(m.n, 0)
FROM (
	SELECT topic FROM `+paused+`
	UNION
	SELECT topic FROM `+s.set.qTable+` WHERE status = 'pending' AND available_at >= ?
) AS x
LEFT JOIN `+paused+` AS p ON p.topic = x.topic
LEFT JOIN (
	SELECT topic, COUNT(*) AS n FROM `+s.set.qTable+` WHERE status = 'pending' AND available_at >= ? GROUP BY topic
) AS m ON m.topic = x.topic
ORDER BY x.topic`, from, from)
	if err != nil {
		return nil, s.pausedError("list paused topics", err)
	}
	defer rows.Close()
	var list []outboxdriver.PausedTopic
	for rows.Next() {
		var (
			p     outboxdriver.PausedTopic
			topic []byte
			at    utcTime
		)
		if err := rows.Scan(&topic, &p.Resumed, &at, &p.By, &p.Reason, &p.Messages); err != nil {
			return nil, s.pausedError("list paused topics", err)
		}
		p.Topic, p.At = string(topic), at.Time
		list = append(list, p)
	}
	if err := rows.Err(); err != nil {
		return nil, s.pausedError("list paused topics", err)
	}
	return list, nil
}

// PausedTopicNames lists the paused topics' names.
func (s *Store) PausedTopicNames(ctx context.Context) ([]string, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT topic FROM `+s.set.side(sidePaused)+` ORDER BY topic`)
	if err != nil {
		return nil, s.pausedError("list paused topics", err)
	}
	names, err := scanTopics(rows)
	if err != nil {
		return nil, s.pausedError("list paused topics", err)
	}
	return names, nil
}

// pausedError wraps err of an operation on the paused topics.
func (s *Store) pausedError(op string, err error) error {
	return s.sideTableError(op, "the paused topics table", sidePaused, 5, "to pause topics", err)
}
