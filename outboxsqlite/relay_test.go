package outboxsqlite_test

import (
	"context"
	"database/sql"
	"errors"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/outboxsqlite"
	"github.com/go-outbox/outbox/relaytest"
)

// relayHarness opens a migrated table, with a name of its own, in a new file
// whose statements are logged.
func relayHarness(t *testing.T, opts outboxsqlite.Options) (relaytest.Harness, *outboxsqlite.Store, *statementLog) {
	t.Helper()
	log := &statementLog{}
	if opts.Table == "" {
		opts.Table = randomTable()
	}
	store := openMigrated(t, dbPath(t), opts, log)
	w := newWriter(t, store)
	orderedOpts := opts
	orderedOpts.OrderByKey = true
	ordered, err := outboxsqlite.New(store.DB(), orderedOpts)
	if err != nil {
		t.Fatal(err)
	}
	return relaytest.Harness{
		Store:      store,
		KeyOrdered: ordered,
		Write: func(ctx context.Context, commit bool, msgs ...*outbox.Message) error {
			err := store.RunInTx(ctx, func(tx *sql.Tx) error {
				if err := w.Write(ctx, tx, msgs...); err != nil {
					return err
				}
				if !commit {
					return errRollback
				}
				return nil
			})
			if !commit && errors.Is(err, errRollback) {
				return nil
			}
			return err
		},
		Notify: w.Notify,
		// The write watcher's PRAGMA data_version is left out: it reads the
		// file's shared memory on a connection of its own and is not a query
		// the relay sends to look for work.
		Statements: log.sent,
		Scale:      0.25,
		// Any write to the file wakes the relays on it, its own beats too.
		OwnWritesWake: true,
	}, store, log
}

func TestRelay(t *testing.T) {
	t.Parallel()
	relaytest.Run(t, func(t *testing.T) relaytest.Harness {
		h, _, _ := relayHarness(t, outboxsqlite.Options{})
		return h
	})
}

// A relay learns of commits made by other connections (another process, or
// a writer that does not call Notify) through the data_version watcher: it
// polls once an hour, so only the watcher can deliver in time.
func TestRelayWakesOnCommitsOfOtherConnections(t *testing.T) {
	t.Parallel()
	h, store, log := relayHarness(t, outboxsqlite.Options{})
	// The writer is another Store on another *sql.DB of the same file, as in
	// another process; it never calls the in-process Notify.
	other := openMigrated(t, outboxsqlite.Path(store), outboxsqlite.Options{Table: store.Name()[len("main."):]}, nil)
	w := newWriter(t, other)
	ready := func() {
		deadline := time.Now().Add(30 * time.Second)
		for !slices.ContainsFunc(log.all(), isWatch) {
			if time.Now().After(deadline) {
				t.Fatal("the relay did not start watching within 30s")
			}
			time.Sleep(5 * time.Millisecond)
		}
		time.Sleep(50 * time.Millisecond) // the wake-up sent when watching starts
	}
	relaytest.TestWakeLatency(t, h, outbox.Config{}, ready, func(ctx context.Context, m *outbox.Message) error {
		return other.RunInTx(ctx, func(tx *sql.Tx) error { return w.Write(ctx, tx, m) })
	})
}

func TestListenForWritesOffWithOneConnection(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	one := newStore(t, outboxsqlite.Options{})
	one.DB().SetMaxOpenConns(1)
	if err := one.ListenForWrites(ctx, func() {}); err == nil || ctx.Err() != nil {
		t.Fatalf("ListenForWrites on a pool of one connection: %v; want an error at once", err)
	}
}

// The cost of one look for commits, the watcher's only work while idle.
func BenchmarkDataVersionCheck(b *testing.B) {
	path := b.TempDir() + "/outbox.db"
	s, err := outboxsqlite.Open(b.Context(), path, outboxsqlite.Options{CreateIfMissing: true})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	c, err := s.DB().Conn(b.Context())
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	stmt, err := c.PrepareContext(b.Context(), "PRAGMA data_version")
	if err != nil {
		b.Fatal(err)
	}
	defer stmt.Close()
	var v int64
	for b.Loop() {
		if err := stmt.QueryRowContext(context.Background()).Scan(&v); err != nil {
			b.Fatal(err)
		}
	}
}

// Relays on one Store share its watcher: more listeners than the pool has
// connections all hear of a commit, and the watcher holds one connection.
func TestListenersShareOneWatcher(t *testing.T) {
	t.Parallel()
	store := newStore(t, outboxsqlite.Options{})
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	const listeners = 20 // Open's pool has 8 connections
	woken := make([]chan struct{}, listeners)
	done := make(chan error, listeners)
	for i := range woken {
		woken[i] = make(chan struct{}, 1)
		go func() {
			done <- store.ListenForWrites(ctx, func() {
				select {
				case woken[i] <- struct{}{}:
				default:
				}
			})
		}()
	}
	// Every listener is woken once when it starts; wait for that, then drain.
	for i := range woken {
		select {
		case <-woken[i]:
		case <-time.After(10 * time.Second):
			t.Fatalf("listener %d was not woken when it started", i)
		}
	}
	time.Sleep(50 * time.Millisecond) // let the watcher take its baseline
	for i := range woken {
		select {
		case <-woken[i]:
		default:
		}
	}
	if inUse := store.DB().Stats().InUse; inUse > 1 {
		t.Fatalf("%d listeners hold %d connections; want the watcher's one", listeners, inUse)
	}

	other := openMigrated(t, outboxsqlite.Path(store), outboxsqlite.Options{}, nil)
	w := newWriter(t, other)
	if err := other.RunInTx(ctx, func(tx *sql.Tx) error { return w.Write(ctx, tx, &outbox.Message{Topic: "t"}) }); err != nil {
		t.Fatal(err)
	}
	for i := range woken {
		select {
		case <-woken[i]:
		case <-time.After(10 * time.Second):
			t.Fatalf("listener %d was not woken by a commit of another connection", i)
		}
	}
	cancel()
	for range listeners {
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Fatalf("ListenForWrites returned %v after cancel; want context.Canceled", err)
		}
	}
}

// The write watcher starts again by itself after a failure, and says so: a
// watcher that keeps failing leaves every wake-up to the poll.
func TestWriteWatcherFailureIsLogged(t *testing.T) {
	t.Parallel()
	path := dbPath(t)
	openMigrated(t, path, outboxsqlite.Options{}, nil)
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	logs := &relaytest.LogCapture{}
	store, err := outboxsqlite.New(db, outboxsqlite.Options{Logger: slog.New(logs)})
	if err != nil {
		t.Fatal(err)
	}
	// A database that can no longer give the watcher a connection: its
	// first look fails, and so does every restart.
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- store.ListenForWrites(ctx, func() {}) }()
	deadline := time.Now().Add(10 * time.Second)
	for !logs.Has(slog.LevelWarn, "write watcher failed") {
		if time.Now().After(deadline) {
			t.Fatalf("the write watcher's database was closed and nothing was logged; logs:\n%s", logs.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	<-done
}
