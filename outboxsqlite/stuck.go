package outboxsqlite

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/go-outbox/outbox/outboxdriver"
)

var _ outboxdriver.StuckKeyFinder = (*Store)(nil)

// StuckKeys lists the keys whose head was written more than olderThan ago.
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
SELECT t.key, t.id, t.topic, t.created_at, t.attempts, COALESCE(t.last_error, ''),
	EXISTS (SELECT 1 FROM `+s.set.qTable+` AS d WHERE d.status = 'dead' AND d.key = t.key AND d.rowid < t.rowid),
	count(*) OVER ()
FROM heads AS h JOIN `+s.set.qTable+` AS t ON t.rowid = h.head
WHERE t.created_at < ?
ORDER BY t.created_at, t.rowid
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
			k         outboxdriver.StuckKey
			id        string
			createdAt int64
		)
		if err := rows.Scan(&k.Key, &id, &k.Topic, &createdAt, &k.Attempts, &k.LastError, &k.BehindDead, &total); err != nil {
			return nil, 0, fmt.Errorf("outboxsqlite: stuck keys in %s: %w", s.Name(), err)
		}
		if k.Head, err = uuid.Parse(id); err != nil {
			return nil, 0, fmt.Errorf("outboxsqlite: stuck keys in %s: head id %q: %w", s.Name(), id, err)
		}
		k.Waiting = time.Duration(max(now-createdAt, 0)) * time.Microsecond
		keys = append(keys, k)
	}
	if err := rows.Err(); err != nil {
		return nil, 0, fmt.Errorf("outboxsqlite: stuck keys in %s: %w", s.Name(), err)
	}
	return keys, total, nil
}
