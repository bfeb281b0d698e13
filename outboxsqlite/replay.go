package outboxsqlite

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/outboxdriver"
)

var _ outboxdriver.Replayer = (*Store)(nil)

// replayWhere is the condition and arguments that choose the kept published
// messages of f, leaving out those whose expiry passed by now: replayed,
// they would only be dead-lettered as expired (and, in key order, hold
// their key's newer messages).
func replayWhere(f outboxdriver.ReplayFilter, now int64) (string, []any) {
	where := []string{"status = 'published'",
		`NOT COALESCE(unixepoch(CASE WHEN json_valid(headers) THEN json_extract(headers, '$."` + outbox.HeaderExpiresAt + `"') END, 'subsec') * 1000000 <= ?, 0)`}
	args := []any{now}
	if f.Topic != "" {
		where, args = append(where, "topic = ?"), append(args, f.Topic)
	}
	if f.Key != "" {
		where, args = append(where, "key = ?"), append(args, f.Key)
	}
	if !f.WrittenFrom.IsZero() {
		where, args = append(where, "created_at >= ?"), append(args, f.WrittenFrom.UnixMicro())
	}
	if !f.WrittenBefore.IsZero() {
		where, args = append(where, "created_at < ?"), append(args, f.WrittenBefore.UnixMicro())
	}
	if len(f.IDs) > 0 {
		where, args = append(where, "id IN ("+placeholders(len(f.IDs))+")"), append(args, idArgs(f.IDs)...)
	}
	return strings.Join(where, " AND "), args
}

// Replay makes kept published messages pending again, in one write
// transaction.
func (s *Store) Replay(ctx context.Context, f outboxdriver.ReplayFilter, limit int, dryRun bool) (int, error) {
	if limit <= 0 {
		return 0, fmt.Errorf("outboxsqlite: replay in %s: limit %d must be positive", s.Name(), limit)
	}
	where, args := replayWhere(f, time.Now().UnixMicro())
	if dryRun {
		var n int
		if err := s.db.QueryRowContext(ctx, `SELECT count(*) FROM `+s.set.qTable+` WHERE `+where, args...).Scan(&n); err != nil {
			return 0, fmt.Errorf("outboxsqlite: count messages to replay in %s: %w", s.Name(), explain(err, s.path))
		}
		return n, nil
	}
	var n int64
	err := s.writeTx(ctx, func(ctx context.Context, c *sql.Conn, now int64) error {
		res, err := c.ExecContext(ctx, `
UPDATE `+s.set.qTable+` SET status = 'pending', attempts = 0, available_at = ?, published_at = NULL,
	last_error = NULL, lease_token = NULL, locked_until = NULL
WHERE rowid IN (SELECT rowid FROM `+s.set.qTable+` WHERE `+where+` ORDER BY rowid LIMIT ?)`,
			append(append([]any{now}, args...), limit)...)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("outboxsqlite: replay messages in %s: %w", s.Name(), explain(err, s.path))
	}
	return int(n), nil
}
