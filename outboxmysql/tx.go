package outboxmysql

import (
	"context"
	"database/sql"
	"errors"
	"math/rand/v2"
	"time"
)

// Bounds of the store's retries of a transaction that hit a deadlock or a
// lock wait timeout: about 20 s of pauses in all, plus the tries, each of
// which may wait innodb_lock_wait_timeout (50 s by default) before it
// fails; so a store that can never get through still returns, and a
// caller that needs an answer sooner gives a deadline (the relay's store
// calls have one).
const (
	txAttempts   = 100
	txRetryFirst = time.Millisecond
	txRetryMax   = 200 * time.Millisecond
)

// readCommitted is the isolation of the store's own transactions. Its
// locking reads and writes lock only the index records they touch, never
// the gaps between them (as REPEATABLE READ, MySQL's default, does), so a
// claim, a settlement or a purge never holds a gap that an application's
// INSERT must wait for; see migration 1. Every statement of the store
// re-checks what it changes (status, lease token, due time), so the store
// needs no snapshot across its statements.
var readCommitted = &sql.TxOptions{Isolation: sql.LevelReadCommitted}

// inTx runs fn in a READ COMMITTED transaction on s.db and commits it. A
// deadlock or a lock wait timeout rolls the whole transaction back and runs
// fn again, after a short random pause that grows with each try: the
// outcome fn records does not depend on the rows it lost the race for, and
// the relay must not see such an error as a failed publish. fn must leave
// everything it reports in variables it resets on each call.
func (s *Store) inTx(ctx context.Context, fn func(ctx context.Context, tx *sql.Tx) error) error {
	return retryTx(ctx, func() error {
		tx, err := s.db.BeginTx(ctx, readCommitted)
		if err != nil {
			return err
		}
		if err := fn(ctx, tx); err != nil {
			_ = tx.Rollback()
			return err
		}
		return tx.Commit()
	})
}

// retryTx calls try until it returns nil or an error other than a deadlock
// or lock wait timeout, at most txAttempts times, or until ctx ends.
func retryTx(ctx context.Context, try func() error) error {
	pause := txRetryFirst
	for attempt := 1; ; attempt++ {
		err := try()
		if err == nil || !retryable(err) || attempt == txAttempts {
			return err
		}
		t := time.NewTimer(pause/2 + rand.N(pause/2+1))
		select {
		case <-ctx.Done():
			t.Stop()
			return errors.Join(ctx.Err(), err)
		case <-t.C:
		}
		pause = min(2*pause, txRetryMax)
	}
}
