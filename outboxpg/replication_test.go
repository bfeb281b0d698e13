package outboxpg_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/pgtest"
	"github.com/go-outbox/outbox/outboxpg"
	"github.com/go-outbox/outbox/relaytest"
)

// walTimeout bounds every wait on the replication machinery: creating a
// logical slot waits for the transactions running at that moment, which
// parallel tests may hold for a while.
const walTimeout = 30 * time.Second

// dropPublicationAtEnd drops the publication WatchWAL creates for store's
// table: publications outlive the test's schema.
func dropPublicationAtEnd(t *testing.T, store *outboxpg.Store) {
	t.Helper()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := pgtest.Pool(t).Exec(ctx, `DROP PUBLICATION IF EXISTS "`+outboxpg.PublicationName(store)+`"`); err != nil {
			t.Errorf("drop publication %s: %v", outboxpg.PublicationName(store), err)
		}
	})
}

// walSlot is a row of pg_replication_slots.
type walSlot struct {
	name      string
	temporary bool
	activePID int32
	streaming bool // its walsender streams: the slot is consistent and caught up
}

// slotsOf lists the replication slots of store's table (by name prefix).
func slotsOf(ctx context.Context, t *testing.T, store *outboxpg.Store) []walSlot {
	t.Helper()
	rows, err := pgtest.Pool(t).Query(ctx, `SELECT slot_name, temporary, COALESCE(active_pid, 0),
		EXISTS (SELECT FROM pg_stat_replication r WHERE r.pid = s.active_pid AND r.state = 'streaming')
		FROM pg_replication_slots s WHERE starts_with(slot_name, $1) ORDER BY slot_name`, outboxpg.SlotPrefix(store))
	if err != nil {
		t.Fatalf("list replication slots: %v", err)
	}
	slots, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (walSlot, error) {
		var s walSlot
		return s, r.Scan(&s.name, &s.temporary, &s.activePID, &s.streaming)
	})
	if err != nil {
		t.Fatalf("list replication slots: %v", err)
	}
	return slots
}

// logWALState logs what a missed wake-up from the WAL leaves to look at:
// the table's pending rows, its slots and their walsenders, and the
// server's WAL position (a CI run once waited 30 s for a commit's
// wake-up).
func logWALState(t *testing.T, store *outboxpg.Store) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	queries := []string{
		`SELECT count(*) FILTER (WHERE status = 'pending') AS pending, count(*) AS total FROM ` + pgx.Identifier(strings.Split(store.Name(), ".")).Sanitize(),
		`SELECT pg_current_wal_lsn()::text AS current, pg_current_wal_flush_lsn()::text AS flushed`,
		`SELECT s.slot_name, s.active_pid, s.restart_lsn::text, s.confirmed_flush_lsn::text, r.state, r.sent_lsn::text, r.write_lsn::text,
			r.reply_time::text FROM pg_replication_slots s LEFT JOIN pg_stat_replication r ON r.pid = s.active_pid
			WHERE starts_with(s.slot_name, '` + outboxpg.SlotPrefix(store) + `')`,
		`SELECT pid, state, wait_event_type, wait_event, left(query, 60) FROM pg_stat_activity WHERE backend_type = 'walsender'`,
	}
	for _, q := range queries {
		rows, err := pgtest.Pool(t).Query(ctx, q)
		if err != nil {
			t.Logf("%s: %v", q, err)
			continue
		}
		for rows.Next() {
			vals, err := rows.Values()
			t.Logf("%.60s...: %v %v", q, vals, err)
		}
		rows.Close()
	}
}

// waitSlots polls pg_replication_slots until cond holds for the table's
// slots, and returns them.
func waitSlots(t *testing.T, store *outboxpg.Store, what string, cond func([]walSlot) bool) []walSlot {
	t.Helper()
	deadline := time.Now().Add(walTimeout)
	for {
		slots := slotsOf(t.Context(), t, store)
		if cond(slots) {
			return slots
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v, still not %s; slots of %s: %+v", walTimeout, what, store.Name(), slots)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func oneActiveSlot(slots []walSlot) bool { return len(slots) == 1 && slots[0].activePID != 0 }

// anotherProcess returns a writer on the table of store through the shared
// pool, as a writer in another process would write: no Notify, and it never
// wakes relays in-process.
func anotherProcess(t *testing.T, store *outboxpg.Store) func(ctx context.Context, m *outbox.Message) error {
	t.Helper()
	schema, table, _ := strings.Cut(store.Name(), ".")
	writer, err := outboxpg.New(pgtest.Pool(t), outboxpg.Options{Schema: schema, Table: table})
	if err != nil {
		t.Fatal(err)
	}
	w := newWriter(t, writer)
	return func(ctx context.Context, m *outbox.Message) error {
		return writer.RunInTx(ctx, func(tx pgx.Tx) error { return w.Write(ctx, tx, m) })
	}
}

// A relay that polls once an hour publishes what another process commits
// within seconds when it watches the WAL, and the writer sends no NOTIFY.
//
// Not in parallel with the package's other tests: the server decodes the
// whole cluster's WAL in commit order, so a wake-up waits for the decoding
// of every transaction committed before it, and TestRelay's bulk writes
// delayed one by more than the 5 s bound (1 run in 6 with them).
func TestRelayWakesFromTheWALOnAnotherProcessesCommit(t *testing.T) {
	h, _, _ := relayHarness(t, outboxpg.Options{WatchWAL: true})
	store := h.Store.(*outboxpg.Store)
	dropPublicationAtEnd(t, store)
	ready := func() {
		// A commit once the slot streams is streamed. Before, while the
		// slot is being created, it waits for every transaction then
		// running (other tests') to end: a commit in that spell is
		// found by the claim that follows the stream's start, which may
		// come later than the latency bound.
		slots := waitSlots(t, store, "one streaming slot", func(s []walSlot) bool { return oneActiveSlot(s) && s[0].streaming })
		if !slots[0].temporary {
			t.Fatalf("slot %s is not temporary; want the server to drop it with the session", slots[0].name)
		}
		// Registered after the relay's cleanup, so it runs before the
		// relay stops and its slot goes.
		t.Cleanup(func() {
			if t.Failed() {
				logWALState(t, store)
			}
		})
	}
	relaytest.TestWakeLatency(t, h, outbox.Config{}, ready, anotherProcess(t, store))
}

// The slot is temporary: it goes when the relay stops, and when its
// connection is killed; the relay then streams again from a new slot.
func TestWALWatchLeavesNoSlotBehind(t *testing.T) {
	t.Parallel()
	h, _, _ := relayHarness(t, outboxpg.Options{WatchWAL: true})
	store := h.Store.(*outboxpg.Store)
	dropPublicationAtEnd(t, store)
	write := anotherProcess(t, store)
	rec := relaytest.NewRecorder()
	relay, err := outbox.NewRelay(store, rec, outbox.Config{PollInterval: time.Hour, ActivePollInterval: time.Hour, Logger: relaytest.TestLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- relay.Run(ctx) }()

	first := waitSlots(t, store, "one active slot", oneActiveSlot)[0]
	var killed bool
	if err := pgtest.Pool(t).QueryRow(ctx, `SELECT pg_terminate_backend($1)`, first.activePID).Scan(&killed); err != nil || !killed {
		t.Fatalf("terminate the walsender %d of slot %s: %v (terminated: %v)", first.activePID, first.name, err, killed)
	}
	waitSlots(t, store, "the killed session's slot replaced by a new one, streaming", func(s []walSlot) bool {
		return oneActiveSlot(s) && s[0].name != first.name && s[0].streaming
	})
	m := &outbox.Message{Topic: "after.reconnect"}
	if err := write(ctx, m); err != nil {
		t.Fatal(err)
	}
	// The walsender decodes all of the cluster's WAL to find the write:
	// with the other tests of the package writing tens of thousands of
	// rows, rewriting tables and creating databases at the same time, it
	// fell 10 s behind once (CI). The relay polls once an hour, so the
	// message still comes only through the new slot.
	rec.WaitFor(t, walTimeout, "message "+m.ID.String()+" to be published through the new slot", func() bool { return rec.Count(m.ID) == 1 })

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Relay.Run after cancel: %v; want nil", err)
		}
	case <-time.After(walTimeout):
		t.Fatalf("Relay.Run did not return within %v of cancel", walTimeout)
	}
	// The server drops a temporary slot as its walsender exits, which
	// follows the client's goodbye by a moment.
	waitSlots(t, store, "without slots after the relay stopped", func(s []walSlot) bool { return len(s) == 0 })
}

// logBuffer is a slog handler's destination safe for concurrent use.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// withoutReplication returns a pool whose role may use the table of schema
// but lacks the REPLICATION attribute: a server or role that cannot stream
// the WAL, which a test cannot arrange by changing wal_level.
func withoutReplication(t *testing.T, schema string) *pgxpool.Pool {
	t.Helper()
	ctx := t.Context()
	admin := pgtest.Pool(t)
	var b [6]byte
	_, _ = rand.Read(b[:])
	role, password := "outbox_norepl_"+hex.EncodeToString(b[:]), hex.EncodeToString(b[:])+"-pw"
	if _, err := admin.Exec(ctx, `CREATE ROLE "`+role+`" LOGIN NOREPLICATION PASSWORD '`+password+`'`); err != nil {
		// The servers scripts/test starts allow it: CI must run this test.
		if os.Getenv("CI") == "true" {
			t.Fatalf("cannot create a test role; CI must give the test database's role CREATEROLE for this test: %v", err)
		}
		t.Skipf("cannot create a test role (the test database's role needs CREATEROLE): %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		// DROP OWNED revokes its privileges first.
		if _, err := admin.Exec(ctx, `DROP OWNED BY "`+role+`"; DROP ROLE "`+role+`"`); err != nil {
			t.Errorf("drop role %s: %v", role, err)
		}
	})
	q := `"` + schema + `"`
	if _, err := admin.Exec(ctx, `GRANT USAGE ON SCHEMA `+q+` TO "`+role+`"; GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA `+q+` TO "`+role+`"`); err != nil {
		t.Fatal(err)
	}
	cfg := pgtest.Config(t)
	cfg.ConnConfig.User, cfg.ConnConfig.Password = role, password
	cfg.MaxConns = 4
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// A role without REPLICATION cannot watch the WAL: ListenForWrites says so
// at once, naming the fix, instead of retrying; the relay logs it once and
// delivers by polling.
func TestWALWatchWithoutReplicationWarnsOnceAndPolls(t *testing.T) {
	t.Parallel()
	owner := newStore(t, pgtest.Pool(t), outboxpg.Options{})
	schema, _, _ := strings.Cut(owner.Name(), ".")
	store, err := outboxpg.New(withoutReplication(t, schema), outboxpg.Options{Schema: schema, WatchWAL: true})
	if err != nil {
		t.Fatal(err)
	}
	dropPublicationAtEnd(t, store)

	ctx, cancel := context.WithTimeout(t.Context(), walTimeout)
	defer cancel()
	err = store.ListenForWrites(ctx, func() {})
	if !errors.Is(err, outboxpg.ErrWALWatchUnavailable) || !strings.Contains(err.Error(), "REPLICATION") {
		t.Fatalf("ListenForWrites as a role without REPLICATION: %v; want ErrWALWatchUnavailable naming ALTER ROLE ... REPLICATION", err)
	}

	logs := &logBuffer{}
	rec := relaytest.NewRecorder()
	relay, err := outbox.NewRelay(store, rec, outbox.Config{PollInterval: 200 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(context.Background())
	defer stop()
	done := make(chan error, 1)
	go func() { done <- relay.Run(runCtx) }()
	deadline := time.Now().Add(walTimeout)
	for !strings.Contains(logs.String(), "cross-process wake-up unavailable") {
		if time.Now().After(deadline) {
			t.Fatalf("the relay did not warn within %v that it cannot watch the WAL. Log:\n%s", walTimeout, logs)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Written after the warning, so found by a poll, not the first look.
	m := &outbox.Message{Topic: "polled"}
	if err := anotherProcess(t, owner)(ctx, m); err != nil {
		t.Fatal(err)
	}
	rec.WaitFor(t, 10*time.Second, "the poll to deliver "+m.ID.String(), func() bool { return rec.Count(m.ID) == 1 })
	stop()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Relay.Run after cancel: %v; want nil", err)
		}
	case <-time.After(walTimeout):
		t.Fatalf("Relay.Run did not return within %v of cancel", walTimeout)
	}
	// Run has returned, so its listener has too: nothing more can be logged.
	if n := strings.Count(logs.String(), "cross-process wake-up unavailable"); n != 1 {
		t.Fatalf("the relay logged the fallback %d times; want once. Log:\n%s", n, logs)
	}
	if !strings.Contains(logs.String(), "ALTER ROLE") {
		t.Fatalf("the relay's warning does not name the fix (ALTER ROLE ... REPLICATION). Log:\n%s", logs)
	}
}

// An existing publication of the table that does not publish its inserts
// (an operator's, say) is reported, not silently ignored.
func TestWALWatchRejectsAPublicationWithoutInserts(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	store := newStore(t, pool, outboxpg.Options{WatchWAL: true})
	dropPublicationAtEnd(t, store)
	if _, err := pool.Exec(t.Context(), `CREATE PUBLICATION "`+outboxpg.PublicationName(store)+`" FOR TABLE `+
		pgx.Identifier(strings.Split(store.Name(), ".")).Sanitize()+` WITH (publish = 'update')`); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), walTimeout)
	defer cancel()
	err := store.ListenForWrites(ctx, func() {})
	if !errors.Is(err, outboxpg.ErrWALWatchUnavailable) || !strings.Contains(err.Error(), "publish = 'insert'") {
		t.Fatalf("ListenForWrites with a publication of updates only: %v; want ErrWALWatchUnavailable naming the CREATE PUBLICATION to run", err)
	}
}
