package outboxpg

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/go-outbox/outbox/internal/backoff"
	"github.com/go-outbox/outbox/internal/sqlident"
)

// Bounds of the pause between reconnection attempts in ListenForWrites.
const (
	listenBackoffMin = 100 * time.Millisecond
	listenBackoffMax = 5 * time.Second
)

// ListenForWrites takes a connection out of the pool for good, runs LISTEN on
// the table's channel, and calls wake for every notification until ctx is
// done. The writers send them when Options.Notify is set. While idle it sends
// nothing: it blocks reading the connection.
//
// wake is also called each time listening starts, the first time included,
// since notifications sent while not listening are lost. After a connection
// failure it reconnects with a backoff from 100 ms doubling to 5 s. A relay
// with Config.DisableListen never calls it (no listening connection).
//
// With Options.WatchWAL it does not LISTEN: it watches the table's inserts
// in the WAL instead (see Options.WatchWAL), and returns an error wrapping
// ErrWALWatchUnavailable, which names the fix, when the server or the role
// cannot do that.
func (s *Store) ListenForWrites(ctx context.Context, wake func()) error {
	if s.opts.WatchWAL {
		return s.watchWAL(ctx, wake)
	}
	retry := backoff.New(listenBackoffMin, listenBackoffMax)
	for {
		conn, err := s.listen(ctx)
		if err == nil {
			retry.Reset()
			wake()
			for {
				if _, err = conn.WaitForNotification(ctx); err != nil {
					break
				}
				wake()
			}
			closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
			_ = conn.Close(closeCtx)
			cancel()
		}
		if ctx.Err() != nil || !retry.Sleep(ctx, nil) {
			return ctx.Err()
		}
	}
}

// listen returns a connection of its own (hijacked from the pool, so the pool's
// connect hooks ran) that listens on the table's channel.
func (s *Store) listen(ctx context.Context) (*pgx.Conn, error) {
	pc, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("outboxpg: acquire listening connection: %w", err)
	}
	conn := pc.Hijack()
	if _, err := conn.Exec(ctx, "LISTEN "+sqlident.Quote(s.names.channel)); err != nil {
		closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		_ = conn.Close(closeCtx)
		cancel()
		return nil, fmt.Errorf("outboxpg: listen on %s: %w", s.names.channel, err)
	}
	return conn, nil
}
