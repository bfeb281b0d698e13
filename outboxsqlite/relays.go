package outboxsqlite

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/go-outbox/outbox/outboxdriver"
)

var _ outboxdriver.RelayRegistry = (*Store)(nil)

// BeatRelay inserts or refreshes the relay's row in the registry table
// (migration 6) and deletes rows unseen for longer than beat.Forget, in one
// write transaction.
func (s *Store) BeatRelay(ctx context.Context, beat outboxdriver.RelayBeat) error {
	err := s.writeTx(ctx, func(ctx context.Context, c *sql.Conn, now int64) error {
		if _, err := c.ExecContext(ctx, `DELETE FROM `+s.set.qRelays+` WHERE seen_at < ? AND id <> ?`,
			now-beat.Forget.Microseconds(), beat.ID.String()); err != nil {
			return err
		}
		_, err := c.ExecContext(ctx, `
INSERT INTO `+s.set.qRelays+`
	(id, host, pid, version, config, interval_ms, started_at, seen_at, last_claim_at, last_publish_at)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?7, ?8, ?9)
ON CONFLICT (id) DO UPDATE SET
	config = excluded.config, interval_ms = excluded.interval_ms, seen_at = excluded.seen_at,
	last_claim_at = excluded.last_claim_at, last_publish_at = excluded.last_publish_at`,
			beat.ID.String(), beat.Host, beat.PID, beat.Version, beat.Config, beat.Interval.Milliseconds(), now,
			agoMicros(now, beat.SinceClaim), agoMicros(now, beat.SincePublish))
		return err
	})
	if err != nil {
		return s.registryError("register relay", err)
	}
	return nil
}

// agoMicros is the time since before now, or NULL when since is negative
// (never).
func agoMicros(now int64, since time.Duration) sql.NullInt64 {
	if since < 0 {
		return sql.NullInt64{}
	}
	return sql.NullInt64{Int64: now - since.Microseconds(), Valid: true}
}

// RemoveRelay deletes the relay's row.
func (s *Store) RemoveRelay(ctx context.Context, id uuid.UUID) error {
	err := s.writeTx(ctx, func(ctx context.Context, c *sql.Conn, _ int64) error {
		_, err := c.ExecContext(ctx, `DELETE FROM `+s.set.qRelays+` WHERE id = ?`, id.String())
		return err
	})
	if err != nil {
		return s.registryError("remove relay", err)
	}
	return nil
}

// Relays lists the registered relays, the most recently seen first.
func (s *Store) Relays(ctx context.Context) ([]outboxdriver.RelayRow, time.Time, error) {
	now := time.Now()
	rows, err := s.db.QueryContext(ctx, `
SELECT id, host, pid, version, config, interval_ms, started_at, seen_at, last_claim_at, last_publish_at
FROM `+s.set.qRelays+` ORDER BY seen_at DESC, id`)
	if err != nil {
		return nil, time.Time{}, s.registryError("list relays", err)
	}
	defer rows.Close()
	var list []outboxdriver.RelayRow
	for rows.Next() {
		var (
			r                  outboxdriver.RelayRow
			id                 string
			intervalMS         int64
			started, seen      int64
			lastClaim, lastPub sql.NullInt64
		)
		if err := rows.Scan(&id, &r.Host, &r.PID, &r.Version, &r.Config, &intervalMS, &started, &seen, &lastClaim, &lastPub); err != nil {
			return nil, time.Time{}, s.registryError("list relays", err)
		}
		if r.ID, err = uuid.Parse(id); err != nil {
			return nil, time.Time{}, s.registryError("list relays", fmt.Errorf("relay id %q: %w", id, err))
		}
		r.Interval = time.Duration(intervalMS) * time.Millisecond
		r.StartedAt, r.SeenAt = time.UnixMicro(started), time.UnixMicro(seen)
		if lastClaim.Valid {
			r.LastClaimAt = time.UnixMicro(lastClaim.Int64)
		}
		if lastPub.Valid {
			r.LastPublishAt = time.UnixMicro(lastPub.Int64)
		}
		list = append(list, r)
	}
	if err := rows.Err(); err != nil {
		return nil, time.Time{}, s.registryError("list relays", err)
	}
	return list, now, nil
}

// registryError wraps err of an operation on the registry table.
func (s *Store) registryError(op string, err error) error {
	return s.sideTableError(op, "the relay registry", s.set.qRelays, 6, "to list live relays", err)
}

// sideTableError wraps err of an operation on a table beside the outbox
// table (what, named qName, made by migration); a missing table wraps
// ErrNotMigrated with the fix, which gains what forWhat says.
func (s *Store) sideTableError(op, what, qName string, migration int, forWhat string, err error) error {
	if strings.Contains(err.Error(), "no such table") {
		return fmt.Errorf("%w: outboxsqlite: %s: %s %s does not exist in %s (migration %d); run `outbox migrate up` %s", outboxdriver.ErrNotMigrated, op, what, qName, s.path, migration, forWhat)
	}
	return fmt.Errorf("outboxsqlite: %s in %s: %w", op, qName, explain(err, s.path))
}
