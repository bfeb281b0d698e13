package outboxpg

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/go-outbox/outbox/outboxdriver"
)

var _ outboxdriver.StuckKeyFinder = (*Store)(nil)

// StuckKeys lists the keys whose head has waited more than olderThan. One
// statement: each key's head (the lowest seq of its pending messages), how
// long it waited (see waitingSince), those waiting long enough, the longest
// first, counted before the limit.
func (s *Store) StuckKeys(ctx context.Context, olderThan time.Duration, limit int) ([]outboxdriver.StuckKey, int, error) {
	if limit <= 0 {
		return nil, 0, fmt.Errorf("outboxpg: stuck keys in %s: limit %d must be positive", s.Name(), limit)
	}
	rows, err := s.pool.Query(ctx, `
WITH heads AS (
	SELECT DISTINCT ON (key) key, id, topic, attempts, last_error, seq,
		CASE WHEN attempts = 0 AND last_error IS NULL THEN greatest(created_at, available_at) ELSE created_at END AS since
	FROM `+s.names.qTable+` WHERE status = 'pending' AND key <> ''
	ORDER BY key, seq
)
SELECT h.key, h.id, h.topic, floor(EXTRACT(EPOCH FROM now() - h.since) * 1000000)::bigint,
	h.attempts, COALESCE(h.last_error, ''),
	EXISTS (SELECT 1 FROM `+s.names.qTable+` AS d WHERE d.status = 'dead' AND d.key = h.key AND d.seq < h.seq),
	count(*) OVER ()
FROM heads AS h
WHERE h.since < now() - $1::bigint * interval '1 microsecond'
ORDER BY h.since, h.seq
LIMIT $2`, olderThan.Microseconds(), limit)
	if err != nil {
		return nil, 0, fmt.Errorf("outboxpg: stuck keys in %s: %w", s.Name(), err)
	}
	defer rows.Close()
	var (
		keys  []outboxdriver.StuckKey
		total int64
	)
	for rows.Next() {
		var (
			k       outboxdriver.StuckKey
			id      pgtype.UUID
			waiting int64
		)
		if err := rows.Scan(&k.Key, &id, &k.Topic, &waiting, &k.Attempts, &k.LastError, &k.BehindDead, &total); err != nil {
			return nil, 0, fmt.Errorf("outboxpg: stuck keys in %s: %w", s.Name(), err)
		}
		k.Head, k.Waiting = uuid.UUID(id.Bytes), time.Duration(waiting)*time.Microsecond
		keys = append(keys, k)
	}
	if err := rows.Err(); err != nil {
		return nil, 0, fmt.Errorf("outboxpg: stuck keys in %s: %w", s.Name(), err)
	}
	return keys, int(total), nil
}
