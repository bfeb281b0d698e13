package outboxmysql

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/go-outbox/outbox/outboxdriver"
)

var _ outboxdriver.StuckKeyFinder = (*Store)(nil)

// StuckKeys lists the keys whose head has waited more than olderThan. One
// statement, as outboxpg's: each key's head (the lowest seq of its pending
// messages, by ROW_NUMBER, which MySQL 8 and MariaDB 10.2 have), how long it
// waited, those waiting long enough, the longest first, counted before the
// limit. A head never tried has waited since it became due; one that
// failed, since it was written.
func (s *Store) StuckKeys(ctx context.Context, olderThan time.Duration, limit int) ([]outboxdriver.StuckKey, int, error) {
	if limit <= 0 {
		return nil, 0, fmt.Errorf("outboxmysql: stuck keys in %s: limit %d must be positive", s.Name(), limit)
	}
	rows, err := s.db.QueryContext(ctx, `
WITH pending AS (
	SELECT `+"`key`"+`, id, topic, attempts, last_error, seq,
		CASE WHEN attempts = 0 AND last_error IS NULL THEN GREATEST(created_at, available_at) ELSE created_at END AS since,
		ROW_NUMBER() OVER (PARTITION BY `+"`key`"+` ORDER BY seq) AS n
	FROM `+s.set.qTable+` WHERE status = 'pending' AND `+"`key`"+` <> ''
)
SELECT h.`+"`key`"+`, h.id, h.topic, TIMESTAMPDIFF(MICROSECOND, h.since, UTC_TIMESTAMP(6)),
	h.attempts, COALESCE(h.last_error, ''),
	EXISTS (SELECT 1 FROM `+s.set.qTable+` AS d WHERE d.status = 'dead' AND d.`+"`key`"+` = h.`+"`key`"+` AND d.seq < h.seq),
	COUNT(*) OVER ()
FROM pending AS h
WHERE h.n = 1 AND h.since < UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND
ORDER BY h.since, h.seq
LIMIT ?`, micros(olderThan), limit)
	if err != nil {
		return nil, 0, fmt.Errorf("outboxmysql: stuck keys in %s: %w", s.Name(), err)
	}
	defer rows.Close()
	var (
		keys  []outboxdriver.StuckKey
		total int64
	)
	for rows.Next() {
		var (
			k          outboxdriver.StuckKey
			key, topic []byte
			id         []byte
			waiting    int64
			behind     sql.NullBool
		)
		if err := rows.Scan(&key, &id, &topic, &waiting, &k.Attempts, &k.LastError, &behind, &total); err != nil {
			return nil, 0, fmt.Errorf("outboxmysql: stuck keys in %s: %w", s.Name(), err)
		}
		if k.Head, err = uuid.FromBytes(id); err != nil {
			return nil, 0, fmt.Errorf("outboxmysql: stuck keys in %s: %w", s.Name(), err)
		}
		k.Key, k.Topic, k.BehindDead = string(key), string(topic), behind.Bool
		k.Waiting = time.Duration(waiting) * time.Microsecond
		keys = append(keys, k)
	}
	if err := rows.Err(); err != nil {
		return nil, 0, fmt.Errorf("outboxmysql: stuck keys in %s: %w", s.Name(), err)
	}
	return keys, int(total), nil
}
