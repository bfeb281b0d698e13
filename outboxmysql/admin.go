package outboxmysql

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/outboxdriver"
)

// Stats counts messages by state with one query.
func (s *Store) Stats(ctx context.Context) (outboxdriver.Stats, error) {
	var (
		st           outboxdriver.Stats
		oldestMicros int64
	)
	err := s.db.QueryRowContext(ctx, s.stmts.stats).Scan(&st.Pending, &st.InFlight, &st.Dead, &st.Published, &oldestMicros, &st.PublishedLastMinute, &st.BehindDead)
	if err != nil {
		return outboxdriver.Stats{}, fmt.Errorf("outboxmysql: count messages in %s: %w", s.Name(), err)
	}
	st.OldestPending = time.Duration(oldestMicros) * time.Microsecond
	return st, nil
}

// Get returns the message with the given id, in any state, or an error
// wrapping outbox.ErrNotFound.
func (s *Store) Get(ctx context.Context, id uuid.UUID) (outbox.Message, error) {
	msgs, err := s.query(ctx, s.stmts.get, id[:])
	if err != nil {
		return outbox.Message{}, fmt.Errorf("outboxmysql: get message %s from %s: %w", id, s.Name(), err)
	}
	if len(msgs) == 0 {
		return outbox.Message{}, fmt.Errorf("outboxmysql: get message %s from %s: %w", id, s.Name(), outbox.ErrNotFound)
	}
	return msgs[0], nil
}

// ListDead returns up to limit dead messages with ids above after, in id
// order; pass the last id of a page to get the next one.
func (s *Store) ListDead(ctx context.Context, after uuid.UUID, limit int) ([]outbox.Message, error) {
	if limit <= 0 {
		return nil, fmt.Errorf("outboxmysql: list dead messages in %s: limit %d must be positive", s.Name(), limit)
	}
	msgs, err := s.query(ctx, s.stmts.listDead, after[:], limit)
	if err != nil {
		return nil, fmt.Errorf("outboxmysql: list dead messages in %s after %s: %w", s.Name(), after, err)
	}
	return msgs, nil
}

// query reads messages of messageColumns and overtaken for an operator:
// those whose headers do not decode come back without them, to be
// inspected, not failed on.
func (s *Store) query(ctx context.Context, query string, args ...any) ([]outbox.Message, error) {
	rows, err := s.db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	return collectListed(rows)
}

// RetryDead makes the given dead messages pending and due at once, with their
// attempt count reset and their last error kept for reference. It returns how
// many it changed. With no ids it changes nothing; see RetryAllDead.
func (s *Store) RetryDead(ctx context.Context, ids ...uuid.UUID) (int, error) {
	if len(ids) == 0 {
		return 0, nil
	}
	n, err := s.execCount(ctx, idList(s.stmts.retryDead, len(ids)), idArgs(ids)...)
	if err != nil {
		return 0, fmt.Errorf("outboxmysql: retry dead messages in %s: %w", s.Name(), err)
	}
	return n, nil
}

// RetryAllDead makes every dead message pending and due at once, as
// RetryDead does for chosen ones.
func (s *Store) RetryAllDead(ctx context.Context) (int, error) {
	n, err := s.execCount(ctx, s.stmts.retryAll)
	if err != nil {
		return 0, fmt.Errorf("outboxmysql: retry dead messages in %s: %w", s.Name(), err)
	}
	return n, nil
}

// DiscardDead deletes the given dead messages and returns how many it deleted.
// With no ids it deletes nothing: discarding every dead message must be asked
// for by listing them.
func (s *Store) DiscardDead(ctx context.Context, ids ...uuid.UUID) (int, error) {
	if len(ids) == 0 {
		return 0, nil
	}
	n, err := s.execCount(ctx, idList(s.stmts.discardDead, len(ids)), idArgs(ids)...)
	if err != nil {
		return 0, fmt.Errorf("outboxmysql: discard dead messages in %s: %w", s.Name(), err)
	}
	return n, nil
}

// now reads the database's clock, the one the store computes due times
// with, in UTC.
func (s *Store) now(ctx context.Context) (time.Time, error) {
	var now utcTime
	if err := s.db.QueryRowContext(ctx, s.stmts.now).Scan(&now); err != nil {
		return time.Time{}, fmt.Errorf("outboxmysql: read the database's clock: %w", err)
	}
	return now.Time, nil
}
