package e2e_test

import (
	"context"
	"database/sql"
	"testing"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/mysqltest"
	"github.com/go-outbox/outbox/outboxevents/eventstest"
	"github.com/go-outbox/outbox/outboxmysql"
)

// The typed events' conformance suite, which outboxpg and outboxsqlite run,
// on MySQL: the in-process consumer (an outboxevents.Dispatcher behind a
// relay) parks a handler's share in the MySQL inbox's parked table, holds
// the rest of its key behind it and applies each event once. Its place is
// beside outboxmysql's other suites, as outboxpg and outboxsqlite run it in
// their own modules; until it moves there it runs here, with the other
// consumers' tests on MySQL.
func TestEventsConformanceOnMySQL(t *testing.T) {
	t.Parallel()
	eventstest.Run(t, func(t *testing.T) eventstest.Harness[*sql.Tx] {
		db := mysqltest.DB(t)
		m, err := outboxmysql.NewMigrator(db, outboxmysql.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := m.Up(t.Context()); err != nil {
			t.Fatal(err)
		}
		store, err := outboxmysql.New(db, outboxmysql.Options{})
		if err != nil {
			t.Fatal(err)
		}
		inbox, err := outboxmysql.NewInboxTable(store, "")
		if err != nil {
			t.Fatal(err)
		}
		if err := inbox.Migrate(t.Context()); err != nil {
			t.Fatal(err)
		}
		if _, err := db.ExecContext(t.Context(), "CREATE TABLE effects (`key` VARBINARY(512) NOT NULL)"); err != nil {
			t.Fatal(err)
		}
		w, err := outbox.NewWriter[*sql.Tx](store, outbox.WriterConfig{})
		if err != nil {
			t.Fatal(err)
		}
		return eventstest.Harness[*sql.Tx]{
			Store:  store,
			Writer: w,
			Inbox:  inbox,
			Effect: func(ctx context.Context, tx *sql.Tx, key string) error {
				_, err := tx.ExecContext(ctx, "INSERT INTO effects VALUES (?)", key)
				return err
			},
			Effects: func(ctx context.Context, key string) (n int, err error) {
				err = db.QueryRowContext(ctx, "SELECT count(*) FROM effects WHERE `key` = ?", key).Scan(&n)
				return n, err
			},
		}
	})
}
