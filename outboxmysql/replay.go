package outboxmysql

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/outboxdriver"
)

var _ outboxdriver.Replayer = (*Store)(nil)

// replayExpired is true for a message whose expiry passed. The writer
// stores the expiry as RFC 3339 in UTC ("...Z"); only a header of that form
// is read, so that a header written by hand, or headers that are not JSON,
// cannot fail the statement (such a message is replayed, and the relay
// dead-letters it if it has expired). The regular expression avoids
// backslashes, which sql_mode NO_BACKSLASH_ESCAPES reads differently.
const replayExpired = `COALESCE(
	CASE WHEN JSON_VALID(headers) AND JSON_UNQUOTE(JSON_EXTRACT(headers, '$."` + outbox.HeaderExpiresAt + `"'))
		REGEXP '^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}([.][0-9]+)?Z$'
	THEN CAST(REPLACE(LEFT(TRIM(TRAILING 'Z' FROM JSON_UNQUOTE(JSON_EXTRACT(headers, '$."` + outbox.HeaderExpiresAt + `"'))), 26), 'T', ' ') AS DATETIME(6)) <= UTC_TIMESTAMP(6)
	END, FALSE)`

// replayWhere is the condition and arguments that choose the kept published
// messages of f, leaving out those whose expiry passed: replayed, they
// would only be dead-lettered as expired (and, in key order, hold their
// key's newer messages).
func replayWhere(f outboxdriver.ReplayFilter) (string, []any) {
	where := []string{"status = 'published'", "NOT " + replayExpired}
	var args []any
	if f.Topic != "" {
		where, args = append(where, "topic = ?"), append(args, f.Topic)
	}
	if f.Key != "" {
		where, args = append(where, "`key` = ?"), append(args, f.Key)
	}
	if !f.WrittenFrom.IsZero() {
		where, args = append(where, "created_at >= ?"), append(args, datetime(f.WrittenFrom, true))
	}
	if !f.WrittenBefore.IsZero() {
		where, args = append(where, "created_at < ?"), append(args, datetime(f.WrittenBefore, true))
	}
	if len(f.IDs) > 0 {
		where, args = append(where, "id IN ("+placeholders(len(f.IDs))+")"), append(args, idArgs(f.IDs)...)
	}
	return strings.Join(where, " AND "), args
}

// Replay makes kept published messages pending again, in one READ
// COMMITTED transaction: it locks the oldest matching rows, passing over
// those a concurrent replay or the retention purge holds (SKIP LOCKED), so
// a replay never waits on the purge, then changes them by primary key.
// Their seq stays, so in key order they go before their key's newer
// messages.
func (s *Store) Replay(ctx context.Context, f outboxdriver.ReplayFilter, limit int, dryRun bool) (int, error) {
	if limit <= 0 {
		return 0, fmt.Errorf("outboxmysql: replay in %s: limit %d must be positive", s.Name(), limit)
	}
	where, args := replayWhere(f)
	if dryRun {
		var n int
		if err := s.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM `+s.set.qTable+` WHERE `+where, args...).Scan(&n); err != nil {
			return 0, fmt.Errorf("outboxmysql: count messages to replay in %s: %w", s.Name(), err)
		}
		return n, nil
	}
	var n int
	err := s.inTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		n = 0
		ids, err := queryIDs(ctx, tx, `SELECT id FROM `+s.set.qTable+` WHERE `+where+` ORDER BY seq LIMIT ? FOR UPDATE SKIP LOCKED`,
			append(args, limit)...)
		if err != nil {
			return err
		}
		for chunk := range chunks(ids, moveChunk) {
			res, err := tx.ExecContext(ctx, `
UPDATE `+s.set.byStatusAndID()+` SET status = 'pending', attempts = 0, available_at = UTC_TIMESTAMP(6), published_at = NULL,
	last_error = NULL, lease_token = NULL, locked_until = NULL
WHERE status = 'published' AND id IN (`+placeholders(len(chunk))+`)`, idArgs(chunk)...)
			if err != nil {
				return err
			}
			k, err := res.RowsAffected()
			if err != nil {
				return err
			}
			n += int(k)
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("outboxmysql: replay messages in %s: %w", s.Name(), err)
	}
	return n, nil
}
