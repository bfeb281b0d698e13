package outboxsqlite_test

import (
	"context"
	"database/sql"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/outboxdriver"
	"github.com/go-outbox/outbox/outboxsqlite"
)

// openFile opens a new database file without migrating it.
func openFile(t *testing.T, opts outboxsqlite.Options) *outboxsqlite.Store {
	t.Helper()
	opts.CreateIfMissing = true
	s, err := outboxsqlite.Open(t.Context(), dbPath(t), opts)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func tableExists(t *testing.T, db *sql.DB, name string) bool {
	t.Helper()
	var n int
	if err := db.QueryRowContext(t.Context(), `SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name = ?`, name).Scan(&n); err != nil {
		t.Fatalf("look for table %s: %v", name, err)
	}
	return n == 1
}

func TestMigrateUpDownAndUpAgain(t *testing.T) {
	t.Parallel()
	opts := outboxsqlite.Options{Table: "events"}
	store := openFile(t, opts)
	db := store.DB()
	ctx := t.Context()
	m, err := outboxsqlite.NewMigrator(db, opts)
	if err != nil {
		t.Fatalf("new migrator: %v", err)
	}
	list := func(wantApplied bool) {
		t.Helper()
		ls, err := m.List(ctx)
		if err != nil {
			t.Fatalf("list: %v", err)
		}
		if len(ls) != m.Latest() || ls[0].Version != 1 || ls[0].Name != "create_outbox" || !ls[0].Known || ls[0].Applied != wantApplied || ls[0].AppliedAt.IsZero() == wantApplied {
			t.Fatalf("list: %+v; want version 1 create_outbox, applied %v", ls, wantApplied)
		}
	}

	list(false)
	if tableExists(t, db, "events_migrations") {
		t.Fatalf("list created the migrations table; want it to only read")
	}
	before := time.Now()
	if done, err := m.Up(ctx); err != nil || len(done) != m.Latest() || done[0] != 1 {
		t.Fatalf("up: %v, %v; want every version applied", done, err)
	}
	if !tableExists(t, db, "events") {
		t.Fatalf("table events missing after up")
	}
	list(true)
	if ls, _ := m.List(ctx); ls[0].AppliedAt.Before(before.Truncate(time.Microsecond)) || ls[0].AppliedAt.After(time.Now()) {
		t.Fatalf("applied at %v; want the time of the up, after %v", ls[0].AppliedAt, before)
	}
	if done, err := m.Up(ctx); err != nil || len(done) != 0 {
		t.Fatalf("up again: %v, %v; want nothing to do", done, err)
	}

	if done, err := m.Down(ctx, m.Latest()); err != nil || done[len(done)-1] != 1 {
		t.Fatalf("down: %v, %v; want every version reverted", done, err)
	}
	if tableExists(t, db, "events") {
		t.Fatalf("table events still exists after down")
	}
	list(false)
	if _, err := m.Down(ctx, 1); err == nil || !strings.Contains(err.Error(), "below version 0") {
		t.Fatalf("down below zero: %v; want an error saying so", err)
	}
	if _, err := m.Down(ctx, 0); err == nil {
		t.Fatalf("down 0 steps: no error; want one")
	}
	if _, err := m.To(ctx, m.Latest()+1); err == nil || !strings.Contains(err.Error(), "unknown version") {
		t.Fatalf("to an unknown version: %v; want an error saying so", err)
	}

	if done, err := m.Up(ctx); err != nil || len(done) != m.Latest() {
		t.Fatalf("up after down: %v, %v; want every version applied", done, err)
	}
	s, err := outboxsqlite.New(db, opts)
	if err != nil {
		t.Fatal(err)
	}
	w := newWriter(t, s)
	msg := &outbox.Message{Topic: "t"}
	if err := w.Transact(ctx, func(ctx context.Context, tx *sql.Tx) error { return w.Write(ctx, tx, msg) }); err != nil {
		t.Fatalf("write to the re-created table: %v", err)
	}
	if st, err := s.Stats(ctx); err != nil || st.Pending != 1 {
		t.Fatalf("stats on the re-created table: %+v, %v; want 1 pending", st, err)
	}
}

func TestMigrateRefusesVersionsItDoesNotKnow(t *testing.T) {
	t.Parallel()
	store := openFile(t, outboxsqlite.Options{})
	ctx := t.Context()
	m, _ := outboxsqlite.NewMigrator(store.DB(), outboxsqlite.Options{})
	if _, err := m.Up(ctx); err != nil {
		t.Fatalf("up: %v", err)
	}
	if _, err := store.DB().ExecContext(ctx, `INSERT INTO outbox_migrations (version, name, applied_at) VALUES (99, 'from_the_future', 0)`); err != nil {
		t.Fatalf("record version 99: %v", err)
	}
	if _, err := m.Up(ctx); err == nil || !strings.Contains(err.Error(), "99") || !strings.Contains(err.Error(), "upgrade") {
		t.Fatalf("up with version 99 recorded: %v; want an error naming 99 and the fix", err)
	}
	if _, err := m.Down(ctx, 1); err == nil || !strings.Contains(err.Error(), "99") {
		t.Fatalf("down with version 99 recorded: %v; want an error naming 99", err)
	}
	ls, err := m.List(ctx)
	if err != nil {
		t.Fatalf("list: %v", err)
	}
	last := ls[len(ls)-1]
	if last.Version != 99 || last.Known || !last.Applied || last.Name != "from_the_future" {
		t.Fatalf("list: %+v; want version 99 listed as applied and unknown", ls)
	}
}

// Several instances starting at once, each with its own *sql.DB as separate
// processes would have: each version is applied exactly once.
func TestConcurrentMigratorsTakeTurns(t *testing.T) {
	t.Parallel()
	path := dbPath(t)
	ctx := t.Context()
	const migrators = 6
	var wg sync.WaitGroup
	applied := make(chan []int, migrators)
	for range migrators {
		wg.Go(func() {
			s, err := outboxsqlite.Open(ctx, path, outboxsqlite.Options{CreateIfMissing: true})
			if err != nil {
				t.Errorf("open: %v", err)
				return
			}
			defer s.Close()
			m, _ := outboxsqlite.NewMigrator(s.DB(), outboxsqlite.Options{})
			done, err := m.Up(ctx)
			if err != nil {
				t.Errorf("concurrent up: %v", err)
			}
			applied <- done
		})
	}
	wg.Wait()
	close(applied)
	var all []int
	for done := range applied {
		all = append(all, done...)
	}
	if m, _ := outboxsqlite.NewMigrator(nil, outboxsqlite.Options{}); len(all) != m.Latest() {
		t.Fatalf("%d concurrent migrators applied versions %v in total; want each version once", migrators, all)
	}
}

func TestMigratorSQLFillsInQuotedNames(t *testing.T) {
	t.Parallel()
	m, err := outboxsqlite.NewMigrator(nil, outboxsqlite.Options{Table: "order"})
	if err != nil {
		t.Fatalf("new migrator: %v", err)
	}
	up, down := m.SQL(outboxsqlite.DirectionUp), m.SQL(outboxsqlite.DirectionDown)
	for _, want := range []string{
		"-- 001_create_outbox.up.sql",
		`CREATE TABLE "order" (`,
		`CONSTRAINT "order_pkey" PRIMARY KEY (id)`,
		`) STRICT;`,
		`CREATE INDEX "order_pending_idx" ON "order" (available_at, id) WHERE status = 'pending'`,
		`CREATE INDEX "order_dead_idx"`,
		`CREATE INDEX "order_published_idx"`,
	} {
		if !strings.Contains(up, want) {
			t.Fatalf("SQL(up) lacks %q:\n%s", want, up)
		}
	}
	if !strings.Contains(down, `DROP TABLE "order";`) || !strings.Contains(down, "-- 001_create_outbox.down.sql") {
		t.Fatalf("SQL(down) lacks the DROP TABLE:\n%s", down)
	}
	for _, s := range []string{up, down} {
		if strings.Contains(s, "{{") {
			t.Fatalf("SQL has a placeholder left:\n%s", s)
		}
	}
	if m.SQL("sideways") != "" {
		t.Fatalf("SQL of an unknown direction is not empty")
	}
	if _, err := m.Up(t.Context()); err == nil {
		t.Fatalf("up on a migrator without a *sql.DB: no error; want one")
	}
}

// Teams that use their own migration tool apply SQL(up); the store must work
// on the result.
func TestMigratedTableWorksWithTheSQLItPrints(t *testing.T) {
	t.Parallel()
	store := openFile(t, outboxsqlite.Options{})
	ctx := t.Context()
	m, _ := outboxsqlite.NewMigrator(nil, outboxsqlite.Options{})
	if _, err := store.DB().ExecContext(ctx, m.SQL(outboxsqlite.DirectionUp)); err != nil {
		t.Fatalf("apply SQL(up): %v", err)
	}
	w := newWriter(t, store)
	msg := &outbox.Message{Topic: "t"}
	if err := w.Transact(ctx, func(ctx context.Context, tx *sql.Tx) error { return w.Write(ctx, tx, msg) }); err != nil {
		t.Fatalf("write: %v", err)
	}
	got, err := store.SettleAndClaim(ctx, outboxdriver.Settlement{}, outboxdriver.Claim{Limit: 1, Lease: time.Second, Token: uuid.New()})
	if err != nil || len(got) != 1 {
		t.Fatalf("claim: %v, %v; want message %s", got, err, msg.ID)
	}
	// A row inserted by hand, without available_at, is due at once.
	if _, err := store.DB().ExecContext(ctx, `INSERT INTO outbox (id, topic, payload, created_at) VALUES (?, 'by.hand', x'', 0)`, uuid.NewString()); err != nil {
		t.Fatalf("insert by hand: %v", err)
	}
	if wait, ok, err := store.NextDue(ctx); err != nil || !ok || wait > 0 {
		t.Fatalf("next due after an insert by hand: %v, %v, %v; want due now", wait, ok, err)
	}
	if _, err := store.DB().ExecContext(ctx, m.SQL(outboxsqlite.DirectionDown)); err != nil {
		t.Fatalf("apply SQL(down): %v", err)
	}
	if tableExists(t, store.DB(), "outbox") {
		t.Fatalf("the table survived SQL(down)")
	}
}

// Migration 3 moves the lease from available_at, where versions 1 and 2 keep
// it, to locked_until. Leases in force are carried over both ways; expired
// ones and unleased rows stay as they are.
func TestMigrationThreeCarriesLeasesOverBothWays(t *testing.T) {
	t.Parallel()
	store := openFile(t, outboxsqlite.Options{})
	db := store.DB()
	ctx := t.Context()
	m, _ := outboxsqlite.NewMigrator(db, outboxsqlite.Options{})
	if _, err := m.To(ctx, 2); err != nil {
		t.Fatalf("migrate to version 2: %v", err)
	}

	// Rows as versions 1 and 2 store them: a lease is a token and
	// available_at, the end of the lease, in the future.
	hour := time.Hour.Microseconds()
	now := time.Now().UnixMicro()
	type row struct {
		id           uuid.UUID
		availableAt  int64
		token        any
		lockedUntil  sql.NullInt64
		wantAvailSet bool // available_at is the time of the migration
	}
	leased := row{id: uuid.New(), availableAt: now + hour, token: uuid.NewString(),
		lockedUntil: sql.NullInt64{Int64: now + hour, Valid: true}, wantAvailSet: true}
	expired := row{id: uuid.New(), availableAt: now - hour, token: uuid.NewString()}
	scheduled := row{id: uuid.New(), availableAt: now + 2*hour, token: nil}
	due := row{id: uuid.New(), availableAt: now - 2*hour, token: nil}
	rows := []row{leased, expired, scheduled, due}
	for _, r := range rows {
		if _, err := db.ExecContext(ctx, `INSERT INTO outbox (id, topic, payload, created_at, available_at, lease_token) VALUES (?, 't', x'', 0, ?, ?)`,
			r.id.String(), r.availableAt, r.token); err != nil {
			t.Fatalf("insert %s: %v", r.id, err)
		}
	}
	read := func(id uuid.UUID) (availableAt int64, lockedUntil sql.NullInt64) {
		t.Helper()
		if err := db.QueryRowContext(ctx, `SELECT available_at, locked_until FROM outbox WHERE id = ?`, id.String()).Scan(&availableAt, &lockedUntil); err != nil {
			t.Fatalf("read message %s: %v", id, err)
		}
		return availableAt, lockedUntil
	}
	up := func() {
		t.Helper()
		before := time.Now().UnixMicro()
		if done, err := m.To(ctx, 3); err != nil || len(done) != 1 || done[0] != 3 {
			t.Fatalf("up from version 2: %v, %v; want version 3 applied", done, err)
		}
		after := time.Now().UnixMicro()
		for _, r := range rows {
			availableAt, lockedUntil := read(r.id)
			if lockedUntil != r.lockedUntil {
				t.Fatalf("message %s after up: locked_until %v; want %v", r.id, lockedUntil, r.lockedUntil)
			}
			// SQLite's clock (unixepoch('subsec')) reads milliseconds.
			if r.wantAvailSet && (availableAt < before-1000 || availableAt > after+1000) {
				t.Fatalf("leased message %s after up: available at %d; want the time of the migration, %d to %d", r.id, availableAt, before, after)
			}
			if !r.wantAvailSet && availableAt != r.availableAt {
				t.Fatalf("message %s after up: available at %d; want %d, unchanged", r.id, availableAt, r.availableAt)
			}
		}
	}
	up()

	// The store sees the lease carried over: the leased message is in
	// flight and not claimed, the one whose lease expired is due in its
	// place.
	if st, err := store.Stats(ctx); err != nil || st.InFlight != 1 || st.Pending != 4 {
		t.Fatalf("stats after up: %+v, %v; want 1 in flight of 4 pending", st, err)
	}
	got, err := store.SettleAndClaim(ctx, outboxdriver.Settlement{}, outboxdriver.Claim{Limit: 10, Lease: 90 * time.Minute, Token: uuid.New()})
	if err != nil || len(got) != 2 || got[0].ID != due.id || got[1].ID != expired.id {
		t.Fatalf("claim after up: %v, %v; want %s then %s", got, err, due.id, expired.id)
	}

	// Down: every lease in force, the carried-over one and the two just
	// taken, goes back into available_at.
	before := time.Now().UnixMicro()
	if done, err := m.To(ctx, 2); err != nil || len(done) != 1 || done[0] != 3 {
		t.Fatalf("down to version 2: %v, %v; want version 3 reverted", done, err)
	}
	var n int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM pragma_table_info('outbox') WHERE name = 'locked_until'`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("column locked_until after down: %d, %v; want it dropped", n, err)
	}
	want := map[uuid.UUID][2]int64{ // available_at between
		leased.id:    {now + hour, now + hour},
		due.id:       {before + 85*time.Minute.Microseconds(), time.Now().UnixMicro() + 90*time.Minute.Microseconds()},
		expired.id:   {before + 85*time.Minute.Microseconds(), time.Now().UnixMicro() + 90*time.Minute.Microseconds()},
		scheduled.id: {scheduled.availableAt, scheduled.availableAt},
	}
	for id, w := range want {
		var availableAt int64
		var token sql.NullString
		if err := db.QueryRowContext(ctx, `SELECT available_at, lease_token FROM outbox WHERE id = ?`, id.String()).Scan(&availableAt, &token); err != nil {
			t.Fatalf("read message %s after down: %v", id, err)
		}
		if availableAt < w[0] || availableAt > w[1] || token.Valid == (id == scheduled.id) {
			t.Fatalf("message %s after down: available at %d, token %v; want %d to %d (the lease's end)", id, availableAt, token, w[0], w[1])
		}
	}

	// And up again: the leases are carried over once more.
	before = time.Now().UnixMicro()
	if _, err := m.Up(ctx); err != nil {
		t.Fatalf("up again: %v", err)
	}
	for _, id := range []uuid.UUID{leased.id, due.id, expired.id} {
		availableAt, lockedUntil := read(id)
		if !lockedUntil.Valid || lockedUntil.Int64 < before || availableAt > time.Now().UnixMicro()+1000 {
			t.Fatalf("message %s after up again: available at %d, locked until %v; want the lease carried over and due now", id, availableAt, lockedUntil)
		}
	}
	if st, err := store.Stats(ctx); err != nil || st.InFlight != 3 {
		t.Fatalf("stats after up again: %+v, %v; want 3 in flight", st, err)
	}
}
