package outboxsqlite

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/go-outbox/outbox/outboxdriver"
)

var _ outboxdriver.StuckKeyFinder = (*Store)(nil)

// StuckKeys lists the keys whose head has waited more than olderThan (see
// outboxdriver.StuckKeyFinder for how long a head has waited).
// A key's head is its pending message of the lowest rowid (insert order, as
// the key-order claim takes them).
func (s *Store) StuckKeys(ctx context.Context, olderThan time.Duration, limit int) ([]outboxdriver.StuckKey, int, error) {
	if limit <= 0 {
		return nil, 0, fmt.Errorf("outboxsqlite: stuck keys in %s: limit %d must be positive", s.Name(), limit)
	}
	now := time.Now().UnixMicro()
	rows, err := s.db.QueryContext(ctx, `
WITH heads AS (
	SELECT key, min(rowid) AS head FROM `+s.set.qTable+` WHERE status = 'pending' AND key <> '' GROUP BY key
)
SELECT key, id, topic, since, attempts, last_error, behind_dead, count(*) OVER ()
FROM (
	SELECT t.key, t.id, t.topic, t.attempts, COALESCE(t.last_error, '') AS last_error, t.rowid AS r,
		CASE WHEN t.attempts = 0 AND t.last_error IS NULL THEN max(t.created_at, t.available_at) ELSE t.created_at END AS since,
		EXISTS (SELECT 1 FROM `+s.set.qTable+` AS d WHERE d.status = 'dead' AND d.key = t.key AND d.rowid < t.rowid) AS behind_dead
	FROM heads AS h JOIN `+s.set.qTable+` AS t ON t.rowid = h.head
)
WHERE since < ?
ORDER BY since, r
LIMIT ?`, now-olderThan.Microseconds(), limit)
	if err != nil {
		return nil, 0, fmt.Errorf("outboxsqlite: stuck keys in %s: %w", s.Name(), explain(err, s.path))
	}
	defer rows.Close()
	var (
		keys  []outboxdriver.StuckKey
		total int
	)
	for rows.Next() {
		var (
			k     outboxdriver.StuckKey
			id    string
			since int64
		)
		if err := rows.Scan(&k.Key, &id, &k.Topic, &since, &k.Attempts, &k.LastError, &k.BehindDead, &total); err != nil {
			return nil, 0, fmt.Errorf("outboxsqlite: stuck keys in %s: %w", s.Name(), err)
		}
		if k.Head, err = uuid.Parse(id); err != nil {
			return nil, 0, fmt.Errorf("outboxsqlite: stuck keys in %s: head id %q: %w", s.Name(), id, err)
		}
		k.Waiting = time.Duration(max(now-since, 0)) * time.Microsecond
		keys = append(keys, k)
	}
	if err := rows.Err(); err != nil {
		return nil, 0, fmt.Errorf("outboxsqlite: stuck keys in %s: %w", s.Name(), err)
	}
	return keys, total, nil
}
