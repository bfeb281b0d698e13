package outboxpg

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/outboxdriver"
)

var _ outboxdriver.Replayer = (*Store)(nil)

// replayMatch selects the kept published messages a ReplayFilter chooses:
// $1 topic, $2 key, $3 and $4 the CreatedAt bounds, $5 ids (an empty
// string, NULL and an empty array match all), leaving out those whose
// expiry passed: replayed, they would only be dead-lettered as expired
// (and, in key order, hold their key's newer messages). Only a value that
// looks like a time is cast, so that a header written by hand cannot fail
// the statement.
const replayMatch = `status = 'published'
	AND ($1 = '' OR topic = $1) AND ($2 = '' OR key = $2)
	AND ($3::timestamptz IS NULL OR created_at >= $3) AND ($4::timestamptz IS NULL OR created_at < $4)
	AND (cardinality($5::uuid[]) = 0 OR id = ANY($5::uuid[]))
	AND NOT COALESCE(CASE WHEN headers->>'` + outbox.HeaderExpiresAt + `' ~ '^[1-9][0-9]{3}-[0-9]{2}-[0-9]{2}T'
		THEN (headers->>'` + outbox.HeaderExpiresAt + `')::timestamptz END <= now(), false)`

// Replay makes kept published messages pending again. Rows a concurrent
// replay or cleanup holds are passed over (SKIP LOCKED), so a replay never
// waits on the retention cleanup.
func (s *Store) Replay(ctx context.Context, f outboxdriver.ReplayFilter, limit int, dryRun bool) (int, error) {
	if limit <= 0 {
		return 0, fmt.Errorf("outboxpg: replay in %s: limit %d must be positive", s.Name(), limit)
	}
	ids := make([]pgtype.UUID, len(f.IDs))
	for i, id := range f.IDs {
		ids[i] = pgUUID(id)
	}
	args := []any{f.Topic, f.Key, pgtype.Timestamptz{Time: f.WrittenFrom, Valid: !f.WrittenFrom.IsZero()},
		pgtype.Timestamptz{Time: f.WrittenBefore, Valid: !f.WrittenBefore.IsZero()}, ids}
	if dryRun {
		var n int
		if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM `+s.names.qTable+` WHERE `+replayMatch, args...).Scan(&n); err != nil {
			return 0, fmt.Errorf("outboxpg: count messages to replay in %s: %w", s.Name(), err)
		}
		return n, nil
	}
	tag, err := s.pool.Exec(ctx, `
UPDATE `+s.names.qTable+` SET status = 'pending', attempts = 0, available_at = now(), published_at = NULL,
	last_error = NULL, lease_token = NULL, locked_until = NULL
WHERE ctid = ANY (ARRAY(
	SELECT ctid FROM `+s.names.qTable+` WHERE `+replayMatch+`
	ORDER BY seq LIMIT $6 FOR UPDATE SKIP LOCKED))`, append(args, limit)...)
	if err != nil {
		return 0, fmt.Errorf("outboxpg: replay messages in %s: %w", s.Name(), err)
	}
	n := int(tag.RowsAffected())
	if n > 0 {
		// Wake the relays that listen; the others find the messages at
		// their next poll, so a failed notify loses nothing.
		_, _ = s.pool.Exec(ctx, `SELECT pg_notify($1, '')`, s.names.channel)
	}
	return n, nil
}
