package main

import (
	"database/sql"
	"slices"
	"strings"
	"testing"
)

// demoTablesOf returns the tables of db's database named like the demo's.
func demoTablesOf(t *testing.T, db *sql.DB) []string {
	t.Helper()
	all, err := demoTables(t.Context(), db)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tb := range all {
		names = append(names, tb.name)
	}
	return names
}

func TestDemoOnMySQLRunsTheWholeFlowAgainAfterAKeptRunAndLeavesNoTableBehind(t *testing.T) {
	t.Parallel()
	raw, db := mysqlURL(t)

	code, out, errOut := cli(t, "demo", "--database", raw, "--keep", "--dir", t.TempDir())
	requireDemoPassed(t, code, out, errOut)
	if !strings.Contains(out, "MySQL database") {
		t.Errorf("demo output does not say it ran on MySQL:\n%s", out)
	}
	kept := demoTablesOf(t, db)
	for _, want := range []string{"outbox_demo", "outbox_demo_orders", "outbox_demo_revenue", "outbox_demo_inbox"} {
		if !slices.Contains(kept, want) {
			t.Errorf("after demo --keep the tables are %v; want %s among them", kept, want)
		}
	}
	var orders int
	if err := db.QueryRowContext(t.Context(), "SELECT COUNT(*) FROM outbox_demo_orders").Scan(&orders); err != nil || orders != 31 {
		t.Errorf("demo --keep kept %d orders (%v); want 31", orders, err)
	}

	// --database-url, which the other commands take, names the database too.
	code, out, errOut = cli(t, "demo", "--database-url", raw, "--dir", t.TempDir())
	requireDemoPassed(t, code, out, errOut)
	if !strings.Contains(out, "left by an earlier demo") {
		t.Errorf("the second demo does not say it dropped the kept tables:\n%s", out)
	}
	if left := demoTablesOf(t, db); len(left) != 0 {
		t.Errorf("after the demo its tables %v are left; want none", left)
	}
}

func TestDemoOnMySQLStopsAtATableNamedLikeItsOwnThatItDidNotCreateAndChangesNothing(t *testing.T) {
	t.Parallel()
	raw, db := mysqlURL(t)
	for _, stmt := range []string{"CREATE TABLE outbox_demo_orders (id INT PRIMARY KEY)", "INSERT INTO outbox_demo_orders VALUES (7)"} {
		if _, err := db.ExecContext(t.Context(), stmt); err != nil {
			t.Fatal(err)
		}
	}
	code, out, errOut := cli(t, "demo", "--database", raw, "--dir", t.TempDir())
	if code != 1 || !strings.Contains(errOut, "outbox_demo_orders") || !strings.Contains(errOut, "not marked as the demo's") {
		t.Fatalf("demo beside a table of the user's: exit %d, stderr %q; want exit 1 naming the table\nstdout:\n%s", code, errOut, out)
	}
	if got := demoTablesOf(t, db); !slices.Equal(got, []string{"outbox_demo_orders"}) {
		t.Errorf("after the refusal the tables are %v; want the user's outbox_demo_orders only", got)
	}
	var id int
	if err := db.QueryRowContext(t.Context(), "SELECT id FROM outbox_demo_orders").Scan(&id); err != nil || id != 7 {
		t.Errorf("the user's row: %d, %v; want 7", id, err)
	}
}

func TestDemoOnMySQLRefusesToRunWhileAnotherDemoRunsOnTheSameDatabase(t *testing.T) {
	t.Parallel()
	raw, db := mysqlURL(t)
	var database string
	if err := db.QueryRowContext(t.Context(), "SELECT DATABASE()").Scan(&database); err != nil {
		t.Fatal(err)
	}
	unlock, err := lockDemoDatabase(t.Context(), db, database)
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	code, _, errOut := cli(t, "demo", "--database", raw, "--dir", t.TempDir())
	if code != 1 || !strings.Contains(errOut, "another outbox demo is running") {
		t.Fatalf("demo while another holds the database: exit %d, stderr %q; want exit 1 saying so", code, errOut)
	}
	if left := demoTablesOf(t, db); len(left) != 0 {
		t.Errorf("the refused demo created %v; want nothing", left)
	}
}

// TestDemoOnMySQLTouchesOnlyItsOwnTables: a kept run leaves exactly the
// demo's list of tables (a release that adds a side table must add it to
// demoMySQLTables, or the demo would leave it behind), and a user's copy of
// one, which carries the demo's mark (CREATE TABLE ... LIKE copies the
// comment), outlives the next run.
func TestDemoOnMySQLTouchesOnlyItsOwnTables(t *testing.T) {
	t.Parallel()
	raw, db := mysqlURL(t)
	code, out, errOut := cli(t, "demo", "--database", raw, "--keep", "--dir", t.TempDir())
	requireDemoPassed(t, code, out, errOut)
	var made []string
	rows, err := db.QueryContext(t.Context(), `SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() ORDER BY TABLE_NAME`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			t.Fatal(err)
		}
		made = append(made, name)
	}
	rows.Close()
	want := slices.Sorted(slices.Values(append([]string{demoRunTable}, demoMySQLTables...)))
	if !slices.Equal(made, want) {
		t.Fatalf("a kept demo left the tables %v; want exactly %v (add a new table to demoMySQLTables)", made, want)
	}

	for _, stmt := range []string{"CREATE TABLE outbox_demo_orders_backup LIKE outbox_demo_orders", "INSERT INTO outbox_demo_orders_backup SELECT * FROM outbox_demo_orders"} {
		if _, err := db.ExecContext(t.Context(), stmt); err != nil {
			t.Fatal(err)
		}
	}
	code, out, errOut = cli(t, "demo", "--database", raw, "--dir", t.TempDir())
	requireDemoPassed(t, code, out, errOut)
	var n int
	if err := db.QueryRowContext(t.Context(), "SELECT COUNT(*) FROM outbox_demo_orders_backup").Scan(&n); err != nil || n != 31 {
		t.Fatalf("the user's outbox_demo_orders_backup after a demo: %d rows, %v; want its 31 rows kept", n, err)
	}
}

// TestDemoOnMySQLDropsWhatARunKilledBeforeItMarkedItsTablesLeft: a run
// killed during its migrations leaves its record and tables not yet
// marked; the next run drops them instead of taking them for a user's.
func TestDemoOnMySQLDropsWhatARunKilledBeforeItMarkedItsTablesLeft(t *testing.T) {
	t.Parallel()
	raw, db := mysqlURL(t)
	for _, stmt := range []string{
		"CREATE TABLE `" + demoRunTable + "` (started_at DATETIME NOT NULL) COMMENT = '" + demoTableMark + "'",
		"CREATE TABLE outbox_demo_relays (id INT PRIMARY KEY)",
	} {
		if _, err := db.ExecContext(t.Context(), stmt); err != nil {
			t.Fatal(err)
		}
	}
	code, out, errOut := cli(t, "demo", "--database", raw, "--dir", t.TempDir())
	requireDemoPassed(t, code, out, errOut)
	if !strings.Contains(out, "after dropping the 2 left by an earlier demo") {
		t.Errorf("the demo does not say it dropped the killed run's 2 tables:\n%s", out)
	}
	if left := demoTablesOf(t, db); len(left) > 0 {
		t.Errorf("after the demo its tables %v are left; want none", left)
	}
}
