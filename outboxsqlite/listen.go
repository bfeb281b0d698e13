package outboxsqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/go-outbox/outbox/internal/backoff"
)

// Bounds of the pause between attempts to restart the watcher in
// ListenForWrites.
const (
	listenBackoffMin = 100 * time.Millisecond
	listenBackoffMax = 5 * time.Second
)

// ListenForWrites calls wake whenever a transaction that changed the
// database file commits, from any connection of any process, until ctx is
// done. Writers need not do anything: no notification is sent at commit,
// and a commit costs nothing more.
//
// One watcher per Store does the work for all its listeners (several relays
// on one Store share it): it takes one connection of the *sql.DB for as long
// as anybody listens, and runs PRAGMA data_version on it every
// Options.WatchInterval (10 ms by default). SQLite changes that number for a
// connection whenever another connection has committed a change to the file.
// This is not a query to a server: it reads the WAL index in the file's
// shared memory (the -shm file every connection maps) under a shared file
// lock, and reads nothing from disk; an idle relay writes nothing but its
// heartbeat in the relay registry (one row, every Config.HeartbeatInterval).
// Measured on a 2-core machine: one check costs about 10 µs in a tight loop
// and up to 80 µs when it runs alone every few milliseconds (cold caches); a
// relay that watches at 10 ms uses about 1.7 % of one core (3.3 % at 5 ms,
// 1.4 % at 20 ms), half of it Go's timer wake-up itself, against 0.15 % for
// a relay that only polls. Checks that find a change wake the relays, which
// then ask, without a transaction, whether anything is due (a write
// transaction that changed nothing, such as another relay's empty claim,
// leaves the number alone).
//
// wake is also called when listening starts and each time the watcher
// starts again after a failure (with a backoff from 100 ms doubling to
// 5 s), since commits made meanwhile went unseen. On a *sql.DB limited to
// one connection (which the watcher would take from everybody else), it
// returns an error at once and the relay only polls. A relay with
// Config.DisableListen never calls it.
func (s *Store) ListenForWrites(ctx context.Context, wake func()) error {
	if s.db.Stats().MaxOpenConnections == 1 {
		return errors.New("outboxsqlite: the *sql.DB of " + s.Name() + " is limited to one connection, which watching for writes would hold for good; the relay polls (allow two connections or more to watch)")
	}
	defer s.watchers.add(s, wake)()
	wake() // commits made before this listener joined went unseen by it
	<-ctx.Done()
	return ctx.Err()
}

// watchers is the Store's one write watcher and its listeners' wake-ups.
type watchers struct {
	mu    sync.Mutex
	wakes map[*func()]struct{}
	stop  context.CancelFunc // ends the running watcher; nil if none runs
}

// add registers wake, starting the watcher for the first listener, and
// returns the function that removes it (stopping the watcher after the
// last).
func (w *watchers) add(s *Store, wake func()) (remove func()) {
	key := &wake
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.wakes == nil {
		w.wakes = map[*func()]struct{}{}
	}
	w.wakes[key] = struct{}{}
	if w.stop == nil {
		ctx, cancel := context.WithCancel(context.Background())
		w.stop = cancel
		go s.watchUntil(ctx, w.wakeAll)
	}
	return func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		delete(w.wakes, key)
		if len(w.wakes) == 0 && w.stop != nil {
			w.stop()
			w.stop = nil
		}
	}
}

func (w *watchers) wakeAll() {
	w.mu.Lock()
	wakes := make([]func(), 0, len(w.wakes))
	for f := range w.wakes {
		wakes = append(wakes, *f)
	}
	w.mu.Unlock()
	for _, wake := range wakes {
		wake()
	}
}

// watchUntil runs the watcher until ctx is done, starting it again after
// failures with a backoff. Relays poll meanwhile, so a failure delays
// wake-ups but loses nothing; it is logged, since a watcher that keeps failing
// means every wake-up waits for a poll.
func (s *Store) watchUntil(ctx context.Context, wake func()) {
	retry := backoff.New(listenBackoffMin, listenBackoffMax)
	for {
		err := s.watch(ctx, wake, retry.Reset)
		if ctx.Err() != nil {
			return
		}
		s.set.logger.Warn("outboxsqlite: the write watcher failed; relays poll until it starts again (check that the database file is readable and not on a network file system)",
			slog.String("table", s.Name()), slog.Duration("retry_in", retry.Next()), slog.Any("error", err))
		if !retry.Sleep(ctx, nil) {
			return
		}
	}
}

// watch runs the data_version loop on a connection of its own until ctx is
// done or a check fails. started is called once watching works.
func (s *Store) watch(ctx context.Context, wake, started func()) error {
	c, err := s.db.Conn(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	stmt, err := c.PrepareContext(ctx, "PRAGMA data_version")
	if err != nil {
		return fmt.Errorf("outboxsqlite: watch %s: %w", s.Name(), explain(err, s.path))
	}
	defer stmt.Close()
	last, err := dataVersion(ctx, stmt)
	if err != nil {
		return err
	}
	started()
	wake() // commits made before watching started went unseen
	// The checks run without a cancellable context: a context that can end
	// makes the driver arm an interrupt around every statement, which more
	// than doubles the cost of a check (measured: 10 µs against 24 µs). A
	// check never waits for a lock, and the loop stops at the next tick.
	check := context.WithoutCancel(ctx)
	t := time.NewTicker(s.set.watchInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
		v, err := dataVersion(check, stmt)
		if err != nil {
			return err
		}
		if v != last {
			last = v
			wake()
		}
	}
}

func dataVersion(ctx context.Context, stmt *sql.Stmt) (int64, error) {
	var v int64
	if err := stmt.QueryRowContext(ctx).Scan(&v); err != nil {
		return 0, fmt.Errorf("outboxsqlite: PRAGMA data_version: %w", err)
	}
	return v, nil
}
