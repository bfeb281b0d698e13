package outboxsqlite_test

import (
	"context"
	"database/sql"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/outboxdriver"
	"github.com/go-outbox/outbox/outboxsqlite"
	"github.com/go-outbox/outbox/relaytest"
)

// runTables runs a TablesRelay of src with cfg until the test ends, logging
// to logs, rescanning and polling every 50 ms unless cfg says otherwise.
func runTables(t *testing.T, src outbox.TableSource, pub outbox.Publisher, cfg outbox.TablesConfig, logs *relaytest.LogCapture) *outbox.TablesRelay {
	t.Helper()
	cfg.Relay.Logger = slog.New(logs)
	if cfg.RescanInterval == 0 {
		cfg.RescanInterval = 50 * time.Millisecond
	}
	cfg.Relay.PollInterval = 50 * time.Millisecond
	tr := relaytest.StartTablesRelay(t, src, pub, cfg)
	return tr
}

// write commits one message to store.
func write(t *testing.T, store *outboxsqlite.Store) *outbox.Message {
	t.Helper()
	m := &outbox.Message{Topic: "tables", Payload: []byte("{}")}
	w := newWriter(t, store)
	if err := store.RunInTx(t.Context(), func(tx *sql.Tx) error { return w.Write(t.Context(), tx, m) }); err != nil {
		t.Fatal(err)
	}
	return m
}

// Two SQLite files with the default table name are two stores named
// main.outbox: the second is not served, and an ERROR names the clash and
// the fix, once.
func TestTablesRelayServesOneOfTwoTablesOfTheSameNameAndSaysWhy(t *testing.T) {
	t.Parallel()
	a, b := newStore(t, outboxsqlite.Options{}), newStore(t, outboxsqlite.Options{})
	logs := &relaytest.LogCapture{}
	rec := relaytest.NewRecorder()
	src := &countingTables{TableSource: outbox.StaticTables{a, b}}
	tr := runTables(t, src, rec, outbox.TablesConfig{}, logs)
	m := write(t, a)
	rec.WaitFor(t, 10*time.Second, "the first table's message", func() bool { return rec.Count(m.ID) == 1 })
	for deadline := time.Now().Add(10 * time.Second); !logs.Has(slog.LevelError, "same name", "table=main.outbox", "a name of its own"); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no ERROR about two tables named main.outbox; logs:\n%s", logs)
		}
	}
	if got := tr.Tables(); !slices.Equal(got, []string{"main.outbox"}) {
		t.Fatalf("Tables() = %v, want [main.outbox]", got)
	}
	asked := src.calls.Load()
	for deadline := time.Now().Add(10 * time.Second); src.calls.Load() < asked+3; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the source was not asked again within 10s")
		}
	}
	if n := logs.Count(slog.LevelError, "same name"); n != 1 {
		t.Fatalf("the clash was logged %d times over several rescans; want once", n)
	}
}

// countingTables counts the calls of its source's Tables: the rescans.
type countingTables struct {
	outbox.TableSource
	calls atomic.Int64
}

func (c *countingTables) Tables(ctx context.Context) ([]outboxdriver.Store, error) {
	c.calls.Add(1)
	return c.TableSource.Tables(ctx)
}

// A source that fails at start (the database is down) is asked again
// within seconds, not at the next rescan an hour later, and its tables are
// served once it answers.
func TestTablesRelayAsksAFailingSourceAgainSoonerThanARescan(t *testing.T) {
	t.Parallel()
	store := newStore(t, outboxsqlite.Options{Table: randomTable()})
	src := &failingTables{TableSource: outbox.StaticTables{store}, failures: 2}
	logs := &relaytest.LogCapture{}
	rec := relaytest.NewRecorder()
	tr := runTables(t, src, rec, outbox.TablesConfig{RescanInterval: time.Hour}, logs)
	if err := tr.Ready(); err == nil {
		t.Error("Ready() = nil before the source answered; want why not")
	}
	m := write(t, store)
	rec.WaitFor(t, 20*time.Second, "the message of the table the source listed after two failures", func() bool { return rec.Count(m.ID) == 1 })
	if err := tr.Ready(); err != nil {
		t.Errorf("Ready() = %v once the source answered; want nil", err)
	}
	if n := logs.Count(slog.LevelWarn, "cannot list the tables", "database down (injected)"); n != 2 {
		t.Fatalf("the source's failures were logged %d times, want 2; logs:\n%s", n, logs)
	}
}

// failingTables fails its first failures calls.
type failingTables struct {
	outbox.TableSource
	failures int64
	calls    atomic.Int64
}

func (f *failingTables) Tables(ctx context.Context) ([]outboxdriver.Store, error) {
	if f.calls.Add(1) <= f.failures {
		return nil, errors.New("database down (injected)")
	}
	return f.TableSource.Tables(ctx)
}

// A table whose relay cannot start (not migrated) is tried again at each
// rescan, and served once it is migrated; the other tables are served
// meanwhile. Each table's relay runs one worker unless Relay.Workers says.
func TestTablesRelayServesATableOnceItIsMigrated(t *testing.T) {
	t.Parallel()
	served := newStore(t, outboxsqlite.Options{Table: randomTable()})
	path := dbPath(t)
	opts := outboxsqlite.Options{Table: randomTable(), CreateIfMissing: true}
	later, err := outboxsqlite.Open(t.Context(), path, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = later.Close() })
	logs := &relaytest.LogCapture{}
	rec := relaytest.NewRecorder()
	runTables(t, outbox.StaticTables{served, later}, rec, outbox.TablesConfig{}, logs)
	m := write(t, served)
	rec.WaitFor(t, 10*time.Second, "the migrated table's message", func() bool { return rec.Count(m.ID) == 1 })
	for deadline := time.Now().Add(10 * time.Second); !logs.Has(slog.LevelError, "trying again at the next rescan", "table="+later.Name()); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the relay of the table not migrated did not report it; logs:\n%s", logs)
		}
	}
	if !logs.Has(slog.LevelInfo, "outbox relay started", "table="+served.Name(), "workers=1") {
		t.Fatalf("the relay of %s did not start with one worker; logs:\n%s", served.Name(), logs)
	}
	mig, err := outboxsqlite.NewMigrator(later.DB(), opts)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := mig.Up(t.Context()); err != nil {
		t.Fatal(err)
	}
	n := write(t, later)
	rec.WaitFor(t, 10*time.Second, "the message of the table migrated later", func() bool { return rec.Count(n.ID) == 1 })
}

// listeningTables is a TablesListener over fixed stores that records
// whether it was asked to listen.
type listeningTables struct {
	countingTables
	listening atomic.Bool
}

func (l *listeningTables) ListenForWrites(ctx context.Context, _ func(name string)) error {
	l.listening.Store(true)
	<-ctx.Done()
	return ctx.Err()
}

// With a TablesListener source the source's listener wakes the relays and
// the tables' relays do not listen themselves (no change watcher per
// table); with Relay.DisableListen (--poll-only) nothing listens at all.
func TestTablesRelayListensThroughItsSourceOnlyUnlessToldNotToListen(t *testing.T) {
	t.Parallel()
	for _, disable := range []bool{false, true} {
		log := &statementLog{}
		store := openMigrated(t, dbPath(t), outboxsqlite.Options{Table: randomTable()}, log)
		src := &listeningTables{countingTables: countingTables{TableSource: outbox.StaticTables{store}}}
		logs := &relaytest.LogCapture{}
		rec := relaytest.NewRecorder()
		runTables(t, src, rec, outbox.TablesConfig{Relay: outbox.Config{DisableListen: disable}}, logs)
		m := write(t, store)
		rec.WaitFor(t, 10*time.Second, "the table's message", func() bool { return rec.Count(m.ID) == 1 })
		asked := src.calls.Load()
		for deadline := time.Now().Add(10 * time.Second); src.calls.Load() < asked+3; time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal("the source was not asked again within 10s")
			}
		}
		if got := src.listening.Load(); got == disable {
			t.Errorf("DisableListen %v: the source was asked to listen: %v; want %v", disable, got, !disable)
		}
		if slices.ContainsFunc(log.all(), isWatch) {
			t.Errorf("DisableListen %v: the table's relay watches the file for writes itself; want the source's listener only", disable)
		}
	}
}

// A table listed again while the relay of its earlier listing is still
// stopping (its batch in flight) is not served by a second relay at the
// same time: its new relay starts once the old one has stopped, and
// OnServe's stopped comes between the two.
func TestTablesRelayServesATableListedAgainOnceItsOldRelayStopped(t *testing.T) {
	t.Parallel()
	store := newStore(t, outboxsqlite.Options{Table: randomTable()})
	src := &switchedTables{}
	src.set(store)
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	rec := relaytest.NewRecorder()
	pub := outbox.PublisherFunc(func(ctx context.Context, batch []outbox.Message) []error {
		once.Do(func() {
			close(entered)
			select {
			case <-release:
			case <-ctx.Done(): // the test failed before it released
			}
		})
		return rec.Publish(ctx, batch)
	})
	var mu sync.Mutex
	var events []string
	record := func(e string) {
		mu.Lock()
		defer mu.Unlock()
		events = append(events, e)
	}
	seen := func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(events)
	}
	onServe := func(outboxdriver.Store, *outbox.Relay) func() {
		record("serve")
		return func() { record("stopped") }
	}
	tr := runTables(t, src, pub, outbox.TablesConfig{OnServe: onServe}, &relaytest.LogCapture{})
	m := write(t, store)
	select { // the first relay publishes m, and waits
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the message not published within 10s")
	}

	src.set() // gone: its relay stops once its batch is done
	for deadline := time.Now().Add(10 * time.Second); slices.Contains(tr.Tables(), store.Name()); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the table no longer listed is still served after 10s")
		}
	}
	src.set(store) // back while its old relay waits for its batch
	asked := src.calls.Load()
	for deadline := time.Now().Add(10 * time.Second); src.calls.Load() < asked+3; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the source was not asked again within 10s")
		}
	}
	if got := seen(); !slices.Equal(got, []string{"serve"}) {
		t.Fatalf("while the old relay stops, OnServe and stopped: %v; want [serve] (no second relay of the table)", got)
	}
	close(release)
	rec.WaitFor(t, 10*time.Second, "the message of the batch in flight", func() bool { return rec.Count(m.ID) == 1 })
	for deadline := time.Now().Add(10 * time.Second); !slices.Equal(seen(), []string{"serve", "stopped", "serve"}); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("after the old relay stopped, OnServe and stopped: %v; want [serve stopped serve]", seen())
		}
	}
	n := write(t, store)
	rec.WaitFor(t, 10*time.Second, "a message written once the table is served again", func() bool { return rec.Count(n.ID) == 1 })
}

// Ready is nil while the latest listing of the tables succeeded: not after
// a listing that failed, again once one succeeds, and not once Run returned.
func TestTablesRelayIsReadyWhileItsLatestListingSucceeded(t *testing.T) {
	t.Parallel()
	src := &switchedTables{}
	src.set(newStore(t, outboxsqlite.Options{Table: randomTable()}))
	tr, err := outbox.NewTablesRelay(src, relaytest.NewRecorder(), outbox.TablesConfig{RescanInterval: 50 * time.Millisecond,
		Relay: outbox.Config{Logger: slog.New(&relaytest.LogCapture{})}})
	if err != nil {
		t.Fatal(err)
	}
	if tr.Ready() == nil {
		t.Fatal("Ready() = nil before Run")
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- tr.Run(ctx) }()
	waitReady := func(what string, ready bool) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); (tr.Ready() == nil) != ready; time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: Ready() = %v after 10s", what, tr.Ready())
			}
		}
	}
	waitReady("once the tables are listed", true)
	src.fail(errors.New("database down (injected)"))
	waitReady("after a listing failed", false)
	if err := tr.Ready(); !strings.Contains(err.Error(), "database down (injected)") {
		t.Errorf("Ready() = %v; want the listing's error", err)
	}
	src.fail(nil)
	waitReady("once a listing succeeded again", true)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if tr.Ready() == nil {
		t.Error("Ready() = nil after Run returned")
	}
}

// switchedTables lists the stores of its latest set, counting the calls,
// or fails with its error while one is set.
type switchedTables struct {
	mu     sync.Mutex
	stores []outboxdriver.Store
	err    error
	calls  atomic.Int64
}

func (s *switchedTables) fail(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.err = err
}

func (s *switchedTables) set(stores ...outboxdriver.Store) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stores = stores
}

func (s *switchedTables) Tables(context.Context) ([]outboxdriver.Store, error) {
	s.calls.Add(1)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return nil, s.err
	}
	return slices.Clone(s.stores), nil
}
