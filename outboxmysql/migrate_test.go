package outboxmysql_test

import (
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/mysqltest"
	"github.com/go-outbox/outbox/outboxmysql"
)

func TestMigratorGoesUpListsAndGoesDownAgain(t *testing.T) {
	t.Parallel()
	db := mysqltest.DB(t)
	opts := outboxmysql.Options{Table: "events"}
	m, err := outboxmysql.NewMigrator(db, opts)
	if err != nil {
		t.Fatal(err)
	}
	store, err := outboxmysql.New(db, opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := store.CheckSchema(t.Context()); !errors.Is(err, outbox.ErrNotMigrated) || !strings.Contains(err.Error(), "outbox migrate up") {
		t.Fatalf("CheckSchema before Up: %v; want outbox.ErrNotMigrated naming `outbox migrate up`", err)
	}
	all := versions(m.Latest())
	if got, err := m.Up(t.Context()); err != nil || !slices.Equal(got, all) {
		t.Fatalf("Up = %v, %v; want %v", got, err, all)
	}
	if got, err := m.Up(t.Context()); err != nil || len(got) != 0 {
		t.Fatalf("second Up = %v, %v; want nothing to do", got, err)
	}
	if err := store.CheckSchema(t.Context()); err != nil {
		t.Fatalf("CheckSchema after Up: %v", err)
	}
	list, err := m.List(t.Context())
	if err != nil || len(list) != m.Latest() || !list[0].Applied || list[0].AppliedAt.IsZero() || list[0].Name != "create_outbox" {
		t.Fatalf("List = %+v, %v; want migration 1 applied", list, err)
	}
	down := slices.Clone(all)
	slices.Reverse(down)
	if got, err := m.Down(t.Context(), len(all)); err != nil || !slices.Equal(got, down) {
		t.Fatalf("Down(%d) = %v, %v; want %v", len(all), got, err, down)
	}
	if err := store.CheckSchema(t.Context()); !errors.Is(err, outbox.ErrNotMigrated) {
		t.Fatalf("CheckSchema after Down: %v; want outbox.ErrNotMigrated", err)
	}
	if _, err := m.Down(t.Context(), 1); err == nil {
		t.Fatalf("Down below version 0: no error")
	}
}

func TestConcurrentMigratorsApplyEachMigrationOnce(t *testing.T) {
	t.Parallel()
	db := mysqltest.DB(t)
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		applied []int
	)
	for range 4 {
		wg.Go(func() {
			m, err := outboxmysql.NewMigrator(db, outboxmysql.Options{})
			if err != nil {
				t.Error(err)
				return
			}
			got, err := m.Up(t.Context())
			if err != nil {
				t.Errorf("Up: %v", err)
			}
			mu.Lock()
			applied = append(applied, got...)
			mu.Unlock()
		})
	}
	wg.Wait()
	if all := versions(latest(t)); !slices.Equal(applied, all) {
		t.Fatalf("the migrators applied %v between them; want %v, each once", applied, all)
	}
}

// A table made from Migrator.SQL by another migration tool, without the
// bookkeeping table, passes the schema check and drops with the down SQL.
func TestTheSQLForOtherToolsMakesAWorkingTable(t *testing.T) {
	t.Parallel()
	db := mysqltest.DB(t)
	m, err := outboxmysql.NewMigrator(nil, outboxmysql.Options{Table: "order"})
	if err != nil {
		t.Fatal(err)
	}
	up := m.SQL(outboxmysql.DirectionUp)
	if !strings.Contains(up, "CREATE TABLE `order`") || strings.Contains(up, "{{") {
		t.Fatalf("SQL(up) does not create the quoted table with every placeholder filled:\n%s", up)
	}
	for _, stmt := range outboxmysql.StatementsOf(up) {
		if _, err := db.ExecContext(t.Context(), stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	store, err := outboxmysql.New(db, outboxmysql.Options{Table: "order"})
	if err != nil {
		t.Fatal(err)
	}
	if err := store.CheckSchema(t.Context()); err != nil {
		t.Fatalf("CheckSchema: %v", err)
	}
	for _, stmt := range outboxmysql.StatementsOf(m.SQL(outboxmysql.DirectionDown)) {
		if _, err := db.ExecContext(t.Context(), stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	if err := store.CheckSchema(t.Context()); !errors.Is(err, outbox.ErrNotMigrated) {
		t.Fatalf("CheckSchema after the down SQL: %v; want outbox.ErrNotMigrated", err)
	}
}

func TestStatementsOfSplitsAtSemicolonsThatEndALineAndDropsCommentLines(t *testing.T) {
	t.Parallel()
	got := outboxmysql.StatementsOf("-- a comment; with a semicolon;\nCREATE TABLE a (\n\tx INT -- inline\n);\n\n-- another\nDROP TABLE b;\nSELECT 1")
	want := []string{"CREATE TABLE a (\n\tx INT -- inline\n)", "DROP TABLE b", "SELECT 1"}
	if !slices.Equal(got, want) {
		t.Fatalf("StatementsOf = %q; want %q", got, want)
	}
}

// versions returns 1 to n, the migrations of this release in order.
func versions(n int) []int {
	v := make([]int, n)
	for i := range v {
		v[i] = i + 1
	}
	return v
}

func latest(t *testing.T) int {
	t.Helper()
	m, err := outboxmysql.NewMigrator(nil, outboxmysql.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return m.Latest()
}

// A table renamed after its migration keeps its index names, which the
// store's statements name: CheckSchema says so at start, with the fix,
// rather than every claim failing.
func TestCheckSchemaNamesAnIndexATableRenamedAfterItsMigrationLacks(t *testing.T) {
	t.Parallel()
	db := mysqltest.DB(t)
	migrated(t, db, outboxmysql.Options{Table: "events"})
	if _, err := db.ExecContext(t.Context(), "RENAME TABLE events TO orders_outbox"); err != nil {
		t.Fatal(err)
	}
	store, err := outboxmysql.New(db, outboxmysql.Options{Table: "orders_outbox"})
	if err != nil {
		t.Fatal(err)
	}
	err = store.CheckSchema(t.Context())
	if !errors.Is(err, outbox.ErrNotMigrated) || !strings.Contains(err.Error(), "orders_outbox_pending_idx") || !strings.Contains(err.Error(), "RENAME INDEX") {
		t.Fatalf("CheckSchema of a renamed table: %v; want outbox.ErrNotMigrated naming orders_outbox_pending_idx and RENAME INDEX", err)
	}
	for _, idx := range []string{"pending_idx", "status_idx"} {
		if _, err := db.ExecContext(t.Context(), "ALTER TABLE orders_outbox RENAME INDEX events_"+idx+" TO orders_outbox_"+idx); err != nil {
			t.Fatal(err)
		}
	}
	if err := store.CheckSchema(t.Context()); err != nil {
		t.Fatalf("CheckSchema after the indexes were renamed: %v", err)
	}
}
