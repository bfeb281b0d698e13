package outboxmysql

import (
	"context"
	"database/sql"
	"time"

	"github.com/google/uuid"

	"github.com/go-outbox/outbox/outboxdriver"
)

var _ outboxdriver.RelayRegistry = (*Store)(nil)

// BeatRelay inserts or refreshes the relay's row in the registry table
// (migration 3) and deletes rows unseen for longer than beat.Forget, in one
// READ COMMITTED transaction.
//
// ON DUPLICATE KEY UPDATE reads the new row's values with VALUES(), which
// MySQL 8.0.20 and later deprecate (with a warning) in favour of a row
// alias that MariaDB does not accept: both servers run VALUES().
func (s *Store) BeatRelay(ctx context.Context, beat outboxdriver.RelayBeat) error {
	relays := s.set.side(sideRelays)
	err := s.inTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `DELETE FROM `+relays+` WHERE seen_at < UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND AND id <> ?`,
			micros(beat.Forget), beat.ID[:]); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, `
INSERT INTO `+relays+`
	(id, host, pid, version, config, interval_ms, started_at, seen_at, last_claim_at, last_publish_at)
VALUES (?, ?, ?, ?, ?, ?, UTC_TIMESTAMP(6), UTC_TIMESTAMP(6),
	IF(? >= 0, UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND, NULL),
	IF(? >= 0, UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND, NULL))
ON DUPLICATE KEY UPDATE
	config = VALUES(config), interval_ms = VALUES(interval_ms), seen_at = VALUES(seen_at),
	last_claim_at = VALUES(last_claim_at), last_publish_at = VALUES(last_publish_at)`,
			beat.ID[:], beat.Host, beat.PID, beat.Version, beat.Config, beat.Interval.Milliseconds(),
			agoMicros(beat.SinceClaim), agoMicros(beat.SinceClaim), agoMicros(beat.SincePublish), agoMicros(beat.SincePublish))
		return err
	})
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
	if _, err := s.execCount(ctx, `DELETE FROM `+s.set.side(sideRelays)+` WHERE id = ?`, id[:]); err != nil {
		return s.registryError("remove relay", err)
	}
	return nil
}

// Relays lists the registered relays, the most recently seen first, and the
// database's clock, read by the same statement.
func (s *Store) Relays(ctx context.Context) ([]outboxdriver.RelayRow, time.Time, error) {
	rows, err := s.db.QueryContext(ctx, `
SELECT id, host, pid, version, config, interval_ms, started_at, seen_at, last_claim_at, last_publish_at, UTC_TIMESTAMP(6)
FROM `+s.set.side(sideRelays)+` ORDER BY seen_at DESC, id`)
	if err != nil {
		return nil, time.Time{}, s.registryError("list relays", err)
	}
	defer rows.Close()
	var (
		list []outboxdriver.RelayRow
		now  utcTime
	)
	for rows.Next() {
		var (
			r                                   outboxdriver.RelayRow
			id                                  []byte
			intervalMS                          int64
			started, seen, lastClaim, lastPubAt utcTime
		)
		if err := rows.Scan(&id, &r.Host, &r.PID, &r.Version, &r.Config, &intervalMS, &started, &seen, &lastClaim, &lastPubAt, &now); err != nil {
			return nil, time.Time{}, s.registryError("list relays", err)
		}
		if r.ID, err = uuid.FromBytes(id); err != nil {
			return nil, time.Time{}, s.registryError("list relays", err)
		}
		r.Interval = time.Duration(intervalMS) * time.Millisecond
		r.StartedAt, r.SeenAt, r.LastClaimAt, r.LastPublishAt = started.Time, seen.Time, lastClaim.Time, lastPubAt.Time
		list = append(list, r)
	}
	if err := rows.Err(); err != nil {
		return nil, time.Time{}, s.registryError("list relays", err)
	}
	if !now.Valid {
		t, err := s.now(ctx)
		if err != nil {
			return nil, time.Time{}, s.registryError("list relays", err)
		}
		return list, t, nil
	}
	return list, now.Time, nil
}

// registryError wraps err of an operation on the registry table.
func (s *Store) registryError(op string, err error) error {
	return s.sideTableError(op, "the relay registry", sideRelays, 3, "to list live relays", err)
}
