package main

import (
	"database/sql"
	"testing"

	"github.com/google/uuid"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/outboxmysql"
)

// The parked commands, `inbox status` and the console's inbox on a
// mysql:// URL, by the cases PostgreSQL and SQLite run.

func TestInboxParkedCommandsOnMySQL(t *testing.T) {
	t.Parallel()
	onMySQL(t, testParkedCommands)
}

func TestInboxParkedRetryKeepsKeyOrderOnMySQL(t *testing.T) {
	t.Parallel()
	onMySQL(t, testParkedRetryKeepsKeyOrder)
}

func TestInboxParkedConsumerFoundOnMySQL(t *testing.T) {
	t.Parallel()
	onMySQL(t, testParkedConsumerFound)
}

func TestInboxParkedTakenAndStalledOnMySQL(t *testing.T) {
	t.Parallel()
	onMySQL(t, testParkedTakenAndStalled)
}

func TestInboxParkedTakenLongAgoOnMySQL(t *testing.T) {
	t.Parallel()
	onMySQL(t, testParkedTakenLongAgo)
}

// onMySQL runs a test of the parked commands on a new database.
func onMySQL(t *testing.T, run func(t *testing.T, db []string, table func(t *testing.T) inboxTable)) {
	raw, sqlDB := mysqlURL(t)
	db := []string{"--database-url", raw}
	mustCLI(t, append([]string{"migrate", "up"}, db...)...)
	run(t, db, func(t *testing.T) inboxTable {
		store, err := outboxmysql.New(sqlDB, outboxmysql.Options{})
		if err != nil {
			t.Fatal(err)
		}
		table, err := outboxmysql.NewInboxTable(store, "")
		if err != nil {
			t.Fatal(err)
		}
		return table
	})
}

func TestMySQLConsoleShowsAParkedMessageWhereItStandsInItsKeyAndDiscardsIt(t *testing.T) {
	t.Parallel()
	_, db := mysqlURL(t)
	testConsoleParkedDetail(t, mysqlInbox(t, db))
}

func TestMySQLConsoleStartsAgainstAnInboxOnlyDatabaseAndSaysItHasNoOutboxTable(t *testing.T) {
	t.Parallel()
	raw, db := mysqlURL(t)
	table := mysqlInbox(t, db)
	poison := outbox.Message{ID: uuid.Must(uuid.NewV7()), Topic: "invoices.due", Payload: []byte("{}")}
	if err := table.Park(t.Context(), "billing", poison, 5, "tax service says 500"); err != nil {
		t.Fatal(err)
	}
	testInboxOnlyConsole(t, poison.ID, "--database-url", raw)
}

// mysqlInbox returns the migrated inbox table processed_messages of db,
// whose outbox table is never migrated.
func mysqlInbox(t *testing.T, db *sql.DB) *outboxmysql.InboxTable {
	t.Helper()
	store, err := outboxmysql.New(db, outboxmysql.Options{})
	if err != nil {
		t.Fatal(err)
	}
	table, err := outboxmysql.NewInboxTable(store, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := table.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	return table
}
