package outboxpg

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/go-outbox/outbox/outboxdriver"
)

var _ outboxdriver.RelayRegistry = (*Store)(nil)

// BeatRelay inserts or refreshes the relay's row in the registry table
// (migration 7) and deletes rows unseen for longer than beat.Forget, in one
// statement.
func (s *Store) BeatRelay(ctx context.Context, beat outboxdriver.RelayBeat) error {
	_, err := s.pool.Exec(ctx, `
WITH forgotten AS (
	DELETE FROM `+s.names.qRelays+` WHERE seen_at < now() - $9::bigint * interval '1 microsecond' AND id <> $1
)
INSERT INTO `+s.names.qRelays+` AS r
	(id, host, pid, version, config, interval_ms, started_at, seen_at, last_claim_at, last_publish_at)
VALUES ($1, $2, $3, $4, $5, $6, now(), now(),
	CASE WHEN $7::bigint >= 0 THEN now() - $7::bigint * interval '1 microsecond' END,
	CASE WHEN $8::bigint >= 0 THEN now() - $8::bigint * interval '1 microsecond' END)
ON CONFLICT (id) DO UPDATE SET
	config = EXCLUDED.config, interval_ms = EXCLUDED.interval_ms, seen_at = EXCLUDED.seen_at,
	last_claim_at = EXCLUDED.last_claim_at, last_publish_at = EXCLUDED.last_publish_at`,
		pgUUID(beat.ID), beat.Host, beat.PID, beat.Version, beat.Config, beat.Interval.Milliseconds(),
		agoMicros(beat.SinceClaim), agoMicros(beat.SincePublish), beat.Forget.Microseconds())
	if err != nil {
		return s.registryError("register relay", err)
	}
	return nil
}

// agoMicros is since in microseconds, or -1 (never) when it is negative:
// a -1ns "never" would round to 0 µs, which is "just now".
func agoMicros(since time.Duration) int64 {
	if since < 0 {
		return -1
	}
	return since.Microseconds()
}

// RemoveRelay deletes the relay's row.
func (s *Store) RemoveRelay(ctx context.Context, id uuid.UUID) error {
	if _, err := s.pool.Exec(ctx, `DELETE FROM `+s.names.qRelays+` WHERE id = $1`, pgUUID(id)); err != nil {
		return s.registryError("remove relay", err)
	}
	return nil
}

// Relays lists the registered relays, the most recently seen first.
func (s *Store) Relays(ctx context.Context) ([]outboxdriver.RelayRow, time.Time, error) {
	rows, err := s.pool.Query(ctx, `
SELECT id, host, pid, version, config, interval_ms, started_at, seen_at, last_claim_at, last_publish_at, now()
FROM `+s.names.qRelays+` ORDER BY seen_at DESC, id`)
	if err != nil {
		return nil, time.Time{}, s.registryError("list relays", err)
	}
	var (
		list []outboxdriver.RelayRow
		now  time.Time
	)
	for rows.Next() {
		var (
			r                  outboxdriver.RelayRow
			id                 pgtype.UUID
			intervalMS         int64
			lastClaim, lastPub pgtype.Timestamptz
		)
		if err := rows.Scan(&id, &r.Host, &r.PID, &r.Version, &r.Config, &intervalMS, &r.StartedAt, &r.SeenAt, &lastClaim, &lastPub, &now); err != nil {
			rows.Close()
			return nil, time.Time{}, s.registryError("list relays", err)
		}
		r.ID = uuid.UUID(id.Bytes)
		r.Interval = time.Duration(intervalMS) * time.Millisecond
		r.LastClaimAt, r.LastPublishAt = lastClaim.Time, lastPub.Time
		list = append(list, r)
	}
	if err := rows.Err(); err != nil {
		return nil, time.Time{}, s.registryError("list relays", err)
	}
	if now.IsZero() {
		if err := s.pool.QueryRow(ctx, `SELECT now()`).Scan(&now); err != nil {
			return nil, time.Time{}, s.registryError("list relays", err)
		}
	}
	return list, now, nil
}

// registryError wraps err of an operation on the registry table.
func (s *Store) registryError(op string, err error) error {
	return sideTableError(op, "the relay registry", s.names.qRelays, 7, "to list live relays", err)
}

// sideTableError wraps err of an operation on a table beside the outbox
// table (what, named qName, made by migration); a missing table wraps
// ErrNotMigrated with the fix, which gains what forWhat says.
func sideTableError(op, what, qName string, migration int, forWhat string, err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42P01" { // undefined_table
		return fmt.Errorf("%w: outboxpg: %s: %s %s does not exist (migration %d); run `outbox migrate up` %s", outboxdriver.ErrNotMigrated, op, what, qName, migration, forWhat)
	}
	return fmt.Errorf("outboxpg: %s in %s: %w", op, qName, err)
}
