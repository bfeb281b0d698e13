package main

import (
	"context"
	"time"

	"github.com/go-outbox/outbox/outboxdriver"
	"github.com/go-outbox/outbox/outboxsqlite"
)

// sqliteDB passes the per-minute rollup through too: `outbox relay` adds to
// it, the console charts it.
var _ outboxdriver.MinuteRollup = (*sqliteDB)(nil)

func (d *sqliteDB) AddMinute(ctx context.Context, published, failed int64) error {
	return withStore0(ctx, d, func(s *outboxsqlite.Store) error { return s.AddMinute(ctx, published, failed) })
}

func (d *sqliteDB) Minutes(ctx context.Context, span time.Duration) ([]outboxdriver.Minute, time.Time, error) {
	s, err := d.get(ctx)
	if err != nil {
		return nil, time.Time{}, err
	}
	return s.Minutes(ctx, span)
}
