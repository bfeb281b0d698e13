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

// StuckKeys lists the keys whose head was written more than olderThan ago.
// One statement: each key's head (the lowest seq of its pending messages),
// those old enough, the oldest first, counted before the limit.
func (s *Store) StuckKeys(ctx context.Context, olderThan time.Duration, limit int) ([]outboxdriver.StuckKey, int, error) {
	if limit <= 0 {
		return nil, 0, fmt.Errorf("outboxpg: stuck keys in %s: limit %d must be positive", s.Name(), limit)
	}
	rows, err := s.pool.Query(ctx, `
WITH heads AS (
	SELECT DISTINCT ON (key) key, id, topic, created_at, attempts, last_error, seq
	FROM `+s.names.qTable+` WHERE status = 'pending' AND key <> ''
	ORDER BY key, seq
)
SELECT h.key, h.id, h.topic, floor(EXTRACT(EPOCH FROM now() - h.created_at) * 1000000)::bigint,
	h.attempts, COALESCE(h.last_error, ''),
	EXISTS (SELECT 1 FROM `+s.names.qTable+` AS d WHERE d.status = 'dead' AND d.key = h.key AND d.seq < h.seq),
	count(*) OVER ()
FROM heads AS h
WHERE h.created_at < now() - $1::bigint * interval '1 microsecond'
ORDER BY h.created_at, h.seq
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
