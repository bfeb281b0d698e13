package main

import (
	"testing"

	"github.com/go-outbox/outbox/outboxmysql"
)

// The parked commands and `inbox status` on a mysql:// URL, by the cases
// PostgreSQL and SQLite run.

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
