package outboxsqlite

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"strings"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/go-outbox/outbox/internal/backoff"
	"github.com/go-outbox/outbox/internal/txn"
)

// immediateTx runs fn in a write transaction on a connection of its own:
// BEGIN IMMEDIATE takes SQLite's write lock first (see takeWriteLock), so the
// transaction never has to upgrade a read snapshot to a write, which SQLite
// refuses without waiting (SQLITE_BUSY_SNAPSHOT) when another connection
// committed in between. It does not depend on how the caller's *sql.DB
// begins transactions (_txlock), since it sends BEGIN IMMEDIATE itself.
func immediateTx(ctx context.Context, db *sql.DB, busyTimeout time.Duration, fn func(ctx context.Context, c *sql.Conn) error) (err error) {
	c, err := db.Conn(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	err = takeWriteLock(ctx, c, busyTimeout, func() error {
		_, err := c.ExecContext(ctx, "BEGIN IMMEDIATE")
		return err
	})
	if err != nil {
		return err
	}
	commit := func(c *sql.Conn) error {
		// COMMIT is not interrupted when ctx ends: after an interrupted
		// COMMIT it would be unknown whether the transaction committed.
		if _, err := c.ExecContext(context.WithoutCancel(ctx), "COMMIT"); err != nil {
			rollback(ctx, c)
			return err
		}
		return nil
	}
	return txn.Run(c, func(c *sql.Conn) error { return fn(ctx, c) }, commit, func(c *sql.Conn) { rollback(ctx, c) })
}

// Bounds of the pause between two attempts to take the write lock.
const (
	lockRetryMin = 50 * time.Microsecond
	lockRetryMax = 2 * time.Millisecond
)

// takeWriteLock runs begin, which starts a transaction on c that takes the
// write lock at once (BEGIN IMMEDIATE), until it gets the lock or busyTimeout
// has passed, and leaves c's busy_timeout at busyTimeout.
//
// It waits for the lock itself instead of leaving that to SQLite's
// busy_timeout, which sleeps 1, 2, 5, 10, 15, 20, 25, 25, 25, 50, 50 and
// then 100 ms between tries: a writer of one process then misses the moments
// the lock is free while another process commits again and again. Measured
// with a writer committing every millisecond while two relay processes
// shared the file, its commits took 2 ms at the median and 22 ms at the
// 99th percentile instead of 0.9 and 6 ms alone. Here tries come 50 µs
// apart at first, doubling up to 2 ms (with jitter), so a writer waits about
// as long as the lock is held. busy_timeout is off (0) while it tries, and
// set back before begin's transaction does anything else, for the
// statements that follow on c (the application's, in RunInTx).
func takeWriteLock(ctx context.Context, c *sql.Conn, busyTimeout time.Duration, begin func() error) error {
	restore := fmt.Sprintf("PRAGMA busy_timeout = %d", busyTimeout.Milliseconds())
	if _, err := c.ExecContext(ctx, "PRAGMA busy_timeout = 0"); err != nil {
		return err
	}
	deadline := time.Now().Add(busyTimeout)
	pause := backoff.NewJittered(lockRetryMin, lockRetryMax)
	var err error
	for {
		if err = begin(); err == nil || !isBusy(err) || !time.Now().Before(deadline) {
			break
		}
		if !pause.Sleep(ctx, nil) {
			err = ctx.Err()
		}
		if ctx.Err() != nil {
			break
		}
	}
	if _, rerr := c.ExecContext(context.WithoutCancel(ctx), restore); rerr != nil {
		// Never hand a connection without its busy_timeout back to the pool.
		_ = c.Raw(func(any) error { return driver.ErrBadConn })
		if err == nil {
			err = rerr
		}
	}
	return err
}

// isBusy reports whether err is SQLite's "database is locked" (SQLITE_BUSY).
func isBusy(err error) bool {
	var se *sqlite.Error
	if errors.As(err, &se) {
		return se.Code()&0xff == sqlite3.SQLITE_BUSY
	}
	return strings.Contains(err.Error(), "database is locked")
}

// rollback ends c's transaction. If that fails, c may still be inside the
// transaction, so it is closed rather than handed back to the pool.
func rollback(ctx context.Context, c *sql.Conn) {
	if _, err := c.ExecContext(context.WithoutCancel(ctx), "ROLLBACK"); err != nil {
		_ = c.Raw(func(any) error { return driver.ErrBadConn })
	}
}

// writeGate queues the write transactions of one Store. SQLite lets one
// connection write at a time and leaves the others to poll for the lock,
// which is unfair under contention: measured with 8 goroutines committing in
// a loop through SQLite's busy_timeout, the slowest waited 730 ms for the
// lock. Queueing the Store's own writers in Go first hands the lock over in
// order (the slowest waited 10 ms) and leaves polling (takeWriteLock) to
// arbitrate only between processes.
type writeGate chan struct{}

func newWriteGate() writeGate { return make(writeGate, 1) }

// enter waits for the gate, at most timeout, as SQLite would wait for the
// lock.
func (g writeGate) enter(ctx context.Context, timeout time.Duration) error {
	select {
	case g <- struct{}{}:
		return nil
	default:
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case g <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return fmt.Errorf("database is locked: another write transaction of this process held the write lock for over %v (Options.BusyTimeout); "+
			"do not call the Store's methods inside RunInTx, and keep transactions short", timeout)
	}
}

func (g writeGate) leave() { <-g }

// explain adds what to do to the SQLite errors a user can act on. path is
// the database file, or "" if unknown.
func explain(err error, path string) error {
	if err == nil {
		return nil
	}
	file, cmdPath := "the database file", "FILE"
	if path != "" {
		file, cmdPath = "the database file "+path, path
	}
	var se *sqlite.Error
	if errors.As(err, &se) {
		switch se.Code() & 0xff {
		case sqlite3.SQLITE_BUSY:
			return fmt.Errorf("%w (another connection, probably in another process, held the write lock for longer than the busy timeout; raise Options.BusyTimeout or shorten the transactions that write to %s)", err, file)
		case sqlite3.SQLITE_READONLY:
			return fmt.Errorf("%w (%s, its directory, or its -wal and -shm files are not writable by this process; writers and relays need write access: fix the owner or permissions)", err, file)
		case sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB:
			return fmt.Errorf("%w (%s is damaged or not an SQLite database; check the path, run `sqlite3 %s 'PRAGMA integrity_check'` and restore it from a backup)", err, file, cmdPath)
		case sqlite3.SQLITE_FULL:
			return fmt.Errorf("%w (the disk holding %s is full; free space, then retry)", err, file)
		case sqlite3.SQLITE_CANTOPEN:
			return fmt.Errorf("%w (%s or its -wal and -shm files cannot be opened; check that the directory exists and is writable)", err, file)
		}
	}
	if strings.Contains(err.Error(), "no such table") {
		return fmt.Errorf("%w (the outbox table is missing from %s: run `outbox migrate up` or Migrator.Up first)", err, file)
	}
	return err
}
