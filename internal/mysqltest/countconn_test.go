package mysqltest

import (
	"database/sql"
	"slices"
	"testing"

	"github.com/go-sql-driver/mysql"
)

// exercise sends one plain statement, one query with an argument and a
// READ COMMITTED transaction with a statement in it, then a rolled back
// read-only one.
func exercise(t *testing.T, db *sql.DB) {
	t.Helper()
	ctx := t.Context()
	if _, err := db.ExecContext(ctx, "CREATE TABLE t (n INT)"); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM t WHERE n > ?", 1).Scan(&n); err != nil {
		t.Fatal(err)
	}
	tx, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.ExecContext(ctx, "INSERT INTO t VALUES (?)", 2); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	tx, err = db.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
}

var exercised = []string{
	"CREATE TABLE t (n INT)",
	"SELECT COUNT(*) FROM t WHERE n > ?",
	"BEGIN ISOLATION LEVEL READ COMMITTED",
	"INSERT INTO t VALUES (?)",
	"COMMIT",
	"BEGIN READ ONLY",
	"ROLLBACK",
}

func TestCountedPoolRecordsEachStatementOnceWithTransactionControlAsBeginCommitRollback(t *testing.T) {
	t.Parallel()
	name, _ := Database(t)
	db, log := Counted(t, name)
	if err := db.PingContext(t.Context()); err != nil {
		t.Fatal(err)
	}
	pings := log.RoundTrips()
	exercise(t, db)
	if got := log.All(); !slices.Equal(got, exercised) {
		t.Fatalf("log = %q; want %q", got, exercised)
	}
	// Interpolated arguments: no prepare; the isolation level is one more.
	if got, want := log.RoundTrips()-pings, int64(len(exercised)+1); got != want {
		t.Fatalf("%d round trips; want %d (one per statement, and the driver's SET TRANSACTION)", got, want)
	}
}

// Without interpolateParams the driver declines statements with arguments,
// database/sql prepares them instead, and each is still recorded once.
func TestCountedPoolRecordsAPreparedFallbackOnce(t *testing.T) {
	t.Parallel()
	name, _ := Database(t)
	cfg := Config(t)
	cfg.DBName, cfg.InterpolateParams = name, false
	inner, err := mysql.NewConnector(cfg)
	if err != nil {
		t.Fatal(err)
	}
	log := &StatementLog{}
	db := sql.OpenDB(NewCountingConnector(inner, log))
	t.Cleanup(func() { _ = db.Close() })
	exercise(t, db)
	if got := log.All(); !slices.Equal(got, exercised) {
		t.Fatalf("log = %q; want %q", got, exercised)
	}
	// Two statements with arguments, each also prepared.
	if got, want := log.RoundTrips(), int64(len(exercised)+1+2); got != want {
		t.Fatalf("%d round trips; want %d", got, want)
	}
}
