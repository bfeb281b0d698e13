package outboxpg_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/pgtest"
	"github.com/go-outbox/outbox/outboxdriver"
	"github.com/go-outbox/outbox/outboxpg"
)

// tenantPrefix returns a schema name prefix that no other test draws, so
// that a test's pattern sees its own schemas only.
func tenantPrefix(t *testing.T) string {
	t.Helper()
	var b [5]byte
	_, _ = rand.Read(b[:])
	return "tn" + hex.EncodeToString(b[:])
}

// tenantSchema creates the schema name, with an outbox table named table
// ("" for none) migrated in it, and drops it when the test ends (if the test
// did not).
func tenantSchema(t *testing.T, name, table string) {
	t.Helper()
	pool := pgtest.Pool(t)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := pool.Exec(ctx, `DROP SCHEMA IF EXISTS `+pgx.Identifier{name}.Sanitize()+` CASCADE`); err != nil {
			t.Errorf("drop schema %s: %v", name, err)
		}
	})
	if table == "" {
		if _, err := pool.Exec(t.Context(), `CREATE SCHEMA `+pgx.Identifier{name}.Sanitize()); err != nil {
			t.Fatalf("create schema %s: %v", name, err)
		}
		return
	}
	m, err := outboxpg.NewMigrator(pool, outboxpg.Options{Schema: name, Table: table})
	if err != nil {
		t.Fatalf("new migrator for %s.%s: %v", name, table, err)
	}
	if _, err := m.Up(t.Context()); err != nil {
		t.Fatalf("migrate %s.%s up: %v", name, table, err)
	}
}

func dropSchema(t *testing.T, name string) {
	t.Helper()
	if _, err := pgtest.Pool(t).Exec(t.Context(), `DROP SCHEMA `+pgx.Identifier{name}.Sanitize()+` CASCADE`); err != nil {
		t.Fatalf("drop schema %s: %v", name, err)
	}
}

func newTables(t *testing.T, pool *pgxpool.Pool, schemas string, opts outboxpg.Options) *outboxpg.Tables {
	t.Helper()
	src, err := outboxpg.NewTables(pool, schemas, opts)
	if err != nil {
		t.Fatalf("NewTables(%q): %v", schemas, err)
	}
	return src
}

// listTables calls Tables and returns its stores and their names.
func listTables(t *testing.T, src *outboxpg.Tables) ([]outboxdriver.Store, []string) {
	t.Helper()
	stores, err := src.Tables(t.Context())
	if err != nil {
		t.Fatalf("Tables: %v", err)
	}
	names := make([]string, len(stores))
	for i, s := range stores {
		names[i] = s.Name()
	}
	return stores, names
}

func TestTablesListsTheMigratedSchemasMatchingThePatternInNameOrder(t *testing.T) {
	t.Parallel()
	p := tenantPrefix(t)
	tenantSchema(t, p+"_b", "outbox")
	tenantSchema(t, p+"_a", "outbox")
	tenantSchema(t, p+"_c", "")           // no table
	tenantSchema(t, p+"_d", "other")      // another table's name
	tenantSchema(t, p+"x_e", "outbox")    // matches only if "_" were a wildcard
	tenantSchema(t, "x"+p+"_f", "outbox") // the pattern is anchored
	// A name no Store takes (upper-case) is skipped, with a warning.
	upper := pgx.Identifier{p + "_Z"}.Sanitize()
	tenantSchema(t, p+"_Z", "")
	if _, err := pgtest.Pool(t).Exec(t.Context(), `CREATE TABLE `+upper+`.outbox (id int)`); err != nil {
		t.Fatalf("create %s.outbox: %v", upper, err)
	}
	var log bytes.Buffer
	src := newTables(t, pgtest.Pool(t), p+"_*", outboxpg.Options{Logger: slog.New(slog.NewTextHandler(&log, nil))})

	want := []string{p + "_a.outbox", p + "_b.outbox"}
	for range 2 {
		if _, got := listTables(t, src); !slices.Equal(got, want) {
			t.Fatalf("Tables(%s_*) = %v; want %v", p, got, want)
		}
	}
	if n := strings.Count(log.String(), "schema="+p+"_Z"); n != 1 {
		t.Fatalf("two Tables calls logged %d warnings naming %s_Z; want 1. Log:\n%s", n, p, log.String())
	}

	other := newTables(t, pgtest.Pool(t), p+"_*", outboxpg.Options{Table: "other"})
	if _, got := listTables(t, other); !slices.Equal(got, []string{p + "_d.other"}) {
		t.Fatalf("Tables(%s_*) of table other = %v; want [%s_d.other]", p, got, p)
	}
}

func TestTablesFollowsSchemasCreatedAndDroppedAndKeepsEachTablesStore(t *testing.T) {
	t.Parallel()
	p := tenantPrefix(t)
	tenantSchema(t, p+"_a", "outbox")
	tenantSchema(t, p+"_b", "outbox")
	src := newTables(t, pgtest.Pool(t), p+"_*", outboxpg.Options{})

	first, got := listTables(t, src)
	if want := []string{p + "_a.outbox", p + "_b.outbox"}; !slices.Equal(got, want) {
		t.Fatalf("first Tables = %v; want %v", got, want)
	}

	tenantSchema(t, p+"_c", "outbox")
	dropSchema(t, p+"_a")
	second, got := listTables(t, src)
	if want := []string{p + "_b.outbox", p + "_c.outbox"}; !slices.Equal(got, want) {
		t.Fatalf("Tables after creating %s_c and dropping %s_a = %v; want %v", p, p, got, want)
	}
	if second[0] != first[1] {
		t.Fatalf("Tables returned a new store for %s across calls (%p, then %p); want the same", got[0], first[1], second[0])
	}

	// A table that comes back after being dropped gets a store of its own:
	// the old one's state is not the new table's.
	dropSchema(t, p+"_b")
	listTables(t, src)
	tenantSchema(t, p+"_b", "outbox")
	third, got := listTables(t, src)
	if want := []string{p + "_b.outbox", p + "_c.outbox"}; !slices.Equal(got, want) {
		t.Fatalf("Tables after recreating %s_b = %v; want %v", p, got, want)
	}
	if third[0] == first[1] {
		t.Fatalf("Tables kept the store of %s after its schema was dropped and made again; want a new one", got[0])
	}
}

// wakeLog receives the names ListenForWrites wakes with.
type wakeLog struct {
	done  chan error
	names chan string
}

func listenTables(ctx context.Context, src *outboxpg.Tables) *wakeLog {
	l := &wakeLog{done: make(chan error, 1), names: make(chan string, 256)}
	go func() {
		l.done <- src.ListenForWrites(ctx, func(name string) { l.names <- name })
	}()
	return l
}

// await waits for a wake with each of names, in any order, and returns what
// else it received meanwhile.
func (l *wakeLog) await(t *testing.T, what string, names ...string) []string {
	t.Helper()
	left := slices.Clone(names)
	var others []string
	deadline := time.After(notifyTimeout)
	for len(left) > 0 {
		select {
		case name := <-l.names:
			if i := slices.Index(left, name); i >= 0 {
				left = slices.Delete(left, i, i+1)
			} else {
				others = append(others, name)
			}
		case err := <-l.done:
			t.Fatalf("%s: ListenForWrites returned %v", what, err)
		case <-deadline:
			t.Fatalf("%s: no wake for %v within %v (woken for %v meanwhile)", what, left, notifyTimeout, others)
		}
	}
	return others
}

// listeningBackend returns the process id of the one session of the
// application app whose last statement was a LISTEN or an UNLISTEN, and
// fails the test if there is not one such session within notifyTimeout (a
// session just terminated may linger a moment after its client saw it go).
func listeningBackend(t *testing.T, app, what string) int32 {
	t.Helper()
	deadline := time.Now().Add(notifyTimeout)
	for {
		rows, err := pgtest.Pool(t).Query(t.Context(), `SELECT pid FROM pg_stat_activity
			WHERE application_name = $1 AND (query LIKE 'LISTEN %' OR query LIKE 'UNLISTEN %')`, app)
		if err != nil {
			t.Fatalf("%s: find the listening sessions: %v", what, err)
		}
		pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
		if err != nil {
			t.Fatalf("%s: find the listening sessions: %v", what, err)
		}
		if len(pids) == 1 {
			return pids[0]
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d sessions listen for the tables (pids %v); want 1", what, len(pids), pids)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// writeTo writes a message to store's table in a transaction of the test's
// own, so that only its NOTIFY can wake a listener.
func writeTo(t *testing.T, store outboxdriver.Store) {
	t.Helper()
	s := store.(*outboxpg.Store)
	w := newWriter(t, s)
	err := s.RunInTx(t.Context(), func(tx pgx.Tx) error {
		return w.Write(t.Context(), tx, &outbox.Message{Topic: "orders.created"})
	})
	if err != nil {
		t.Fatalf("write to %s: %v", s.Name(), err)
	}
}

func TestTablesListenForWritesWakesEachTableByNameOnOneConnection(t *testing.T) {
	t.Parallel()
	p := tenantPrefix(t)
	tenantSchema(t, p+"_a", "outbox")
	tenantSchema(t, p+"_b", "outbox")
	pool, app := namedPool(t, "tables")
	src := newTables(t, pool, p+"_*", outboxpg.Options{Notify: true})
	stores, _ := listTables(t, src)
	a, b := stores[0], stores[1]

	ctx, cancel := context.WithCancel(t.Context())
	l := listenTables(ctx, src)
	defer func() {
		cancel()
		select {
		case err := <-l.done:
			if !errors.Is(err, context.Canceled) {
				t.Errorf("ListenForWrites after cancel: %v; want context.Canceled", err)
			}
		case <-time.After(notifyTimeout):
			t.Errorf("ListenForWrites did not return within %v of cancel", notifyTimeout)
		}
	}()

	l.await(t, "start of listening", a.Name(), b.Name())
	pid := listeningBackend(t, app, "start of listening")
	writeTo(t, a)
	if others := l.await(t, "write to "+a.Name(), a.Name()); len(others) > 0 {
		t.Fatalf("a write to %s woke %v before it", a.Name(), others)
	}
	writeTo(t, b)
	if others := l.await(t, "write to "+b.Name(), b.Name()); len(others) > 0 {
		t.Fatalf("a write to %s woke %v before it", b.Name(), others)
	}

	// A table that a later Tables call lists is woken once listened to,
	// then on its writes, on the same connection.
	tenantSchema(t, p+"_c", "outbox")
	stores, _ = listTables(t, src)
	c := stores[2]
	l.await(t, "table added", c.Name())
	writeTo(t, c)
	l.await(t, "write to the added "+c.Name(), c.Name())
	if got := listeningBackend(t, app, "table added"); got != pid {
		t.Fatalf("after a table was added, session %d listens for the tables; want the same session as before, %d", got, pid)
	}

	// A table no longer listed wakes nothing: a notification on its channel
	// sent before one on b's is not heard.
	dropSchema(t, p+"_a")
	listTables(t, src)
	if _, err := pool.Exec(ctx, `SELECT pg_notify($1, '')`, outboxpg.Channel(a.(*outboxpg.Store))); err != nil {
		t.Fatalf("notify on the channel of %s: %v", a.Name(), err)
	}
	if _, err := pool.Exec(ctx, `SELECT pg_notify($1, '')`, outboxpg.Channel(b.(*outboxpg.Store))); err != nil {
		t.Fatalf("notify on the channel of %s: %v", b.Name(), err)
	}
	if others := l.await(t, "notification to "+b.Name(), b.Name()); len(others) > 0 {
		t.Fatalf("after %s was dropped from the list, ListenForWrites woke %v; want only %s", a.Name(), others, b.Name())
	}

	// Listening starts again on a new connection, for every table.
	tag, err := pgtest.Pool(t).Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
		WHERE application_name = $1 AND (query LIKE 'LISTEN %' OR query LIKE 'UNLISTEN %')`, app)
	if err != nil || tag.RowsAffected() != 1 {
		t.Fatalf("terminate the listening session: %v, %d rows; want 1", err, tag.RowsAffected())
	}
	l.await(t, "reconnect", b.Name(), c.Name())
	writeTo(t, b)
	l.await(t, "write to "+b.Name()+" after reconnecting", b.Name())
	listeningBackend(t, app, "reconnect")
}

func TestTablesListenForWritesStartedBeforeAnyTableHearsTheFirstOneListed(t *testing.T) {
	t.Parallel()
	p := tenantPrefix(t)
	pool, app := namedPool(t, "tables")
	src := newTables(t, pool, p+"_*", outboxpg.Options{Notify: true})
	if _, got := listTables(t, src); len(got) != 0 {
		t.Fatalf("Tables(%s_*) = %v before any schema exists; want none", p, got)
	}
	ctx, cancel := context.WithCancel(t.Context())
	l := listenTables(ctx, src)

	tenantSchema(t, p+"_a", "outbox")
	stores, _ := listTables(t, src)
	l.await(t, "first table listed", stores[0].Name())
	writeTo(t, stores[0])
	l.await(t, "write to "+stores[0].Name(), stores[0].Name())
	listeningBackend(t, app, "first table listed")

	cancel()
	select {
	case err := <-l.done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("ListenForWrites after cancel: %v; want context.Canceled", err)
		}
	case <-time.After(notifyTimeout):
		t.Fatalf("ListenForWrites did not return within %v of cancel", notifyTimeout)
	}
}

func TestNewTablesRefusesWhatItCannotServe(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	tests := []struct {
		name    string
		pool    *pgxpool.Pool
		schemas string
		opts    outboxpg.Options
		field   string
	}{
		{"no pool", nil, "tenant_*", outboxpg.Options{}, "outboxpg.NewTables pool"},
		{"empty pattern", pool, "", outboxpg.Options{}, "outboxpg.NewTables schemas"},
		{"upper-case pattern", pool, "Tenant_*", outboxpg.Options{}, "outboxpg.NewTables schemas"},
		{"LIKE wildcard in the pattern", pool, "tenant%", outboxpg.Options{}, "outboxpg.NewTables schemas"},
		{"schema set", pool, "tenant_*", outboxpg.Options{Schema: "tenant_a"}, "outboxpg.Options.Schema"},
		{"WAL watcher", pool, "tenant_*", outboxpg.Options{WatchWAL: true}, "outboxpg.Options.WatchWAL"},
		{"invalid table", pool, "tenant_*", outboxpg.Options{Table: "Outbox"}, "outboxpg.Options.Table"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			src, err := outboxpg.NewTables(tt.pool, tt.schemas, tt.opts)
			var ce *outbox.ConfigError
			if !errors.As(err, &ce) || !errors.Is(err, outbox.ErrInvalidConfig) {
				t.Fatalf("NewTables(%q, %+v) = %v, %v; want a *outbox.ConfigError", tt.schemas, tt.opts, src, err)
			}
			if ce.Field != tt.field || ce.Fix == "" {
				t.Fatalf("NewTables(%q, %+v) error names field %q with fix %q; want field %s and a fix", tt.schemas, tt.opts, ce.Field, ce.Fix, tt.field)
			}
		})
	}
}
