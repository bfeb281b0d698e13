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
)

// immediateTx runs fn in a write transaction on a connection of its own:
// BEGIN IMMEDIATE takes SQLite's write lock first (waiting up to the
// connection's busy_timeout), so the transaction never has to upgrade a read
// snapshot to a write, which SQLite refuses without waiting
// (SQLITE_BUSY_SNAPSHOT) when another connection committed in between. It
// does not depend on how the caller's *sql.DB begins transactions
// (_txlock), since it sends BEGIN IMMEDIATE itself.
func immediateTx(ctx context.Context, db *sql.DB, fn func(ctx context.Context, c *sql.Conn) error) (err error) {
	c, err := db.Conn(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	if _, err := c.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		return err
	}
	defer func() {
		if r := recover(); r != nil {
			rollback(ctx, c)
			panic(r)
		}
	}()
	if err := fn(ctx, c); err != nil {
		rollback(ctx, c)
		return err
	}
	// COMMIT is not interrupted when ctx ends: after an interrupted COMMIT it
	// would be unknown whether the transaction committed.
	if _, err := c.ExecContext(context.WithoutCancel(ctx), "COMMIT"); err != nil {
		rollback(ctx, c)
		return err
	}
	return nil
}

// rollback ends c's transaction. If that fails, c may still be inside the
// transaction, so it is closed rather than handed back to the pool.
func rollback(ctx context.Context, c *sql.Conn) {
	if _, err := c.ExecContext(context.WithoutCancel(ctx), "ROLLBACK"); err != nil {
		_ = c.Raw(func(any) error { return driver.ErrBadConn })
	}
}

// writeGate queues the write transactions of one Store. SQLite lets one
// connection write at a time and makes the others poll for the lock
// (busy_timeout sleeps and retries, from 1 ms up to 100 ms between tries),
// which is unfair under contention: measured with 8 goroutines committing
// in a loop, the slowest waited 730 ms for the lock. Queueing the Store's own
// writers in Go first hands the lock over in order (the slowest waited
// 10 ms) and leaves busy_timeout to arbitrate only between processes.
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
