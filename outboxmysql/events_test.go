package outboxmysql_test

import (
	"context"
	"database/sql"
	"testing"

	"github.com/go-outbox/outbox/outboxevents/eventstest"
	"github.com/go-outbox/outbox/outboxmysql"
)

// TestEventsConformance runs the typed events' suite (the in-process
// consumer, an outboxevents.Dispatcher behind a relay) with a MySQL inbox:
// a handler's share is parked in its parked table, the rest of its key
// waits behind it, and each event is applied once.
func TestEventsConformance(t *testing.T) {
	t.Parallel()
	eventstest.Run(t, func(t *testing.T) eventstest.Harness[*sql.Tx] {
		store := newStore(t, outboxmysql.Options{})
		inbox, err := outboxmysql.NewInboxTable(store, "")
		if err != nil {
			t.Fatal(err)
		}
		if err := inbox.Migrate(t.Context()); err != nil {
			t.Fatal(err)
		}
		if _, err := store.DB().ExecContext(t.Context(), "CREATE TABLE effects (`key` VARBINARY(512) NOT NULL)"); err != nil {
			t.Fatal(err)
		}
		return eventstest.Harness[*sql.Tx]{
			Store:  store,
			Writer: newWriter(t, store),
			Inbox:  inbox,
			Effect: func(ctx context.Context, tx *sql.Tx, key string) error {
				_, err := tx.ExecContext(ctx, "INSERT INTO effects VALUES (?)", key)
				return err
			},
			Effects: func(ctx context.Context, key string) (n int, err error) {
				err = store.DB().QueryRowContext(ctx, "SELECT count(*) FROM effects WHERE `key` = ?", key).Scan(&n)
				return n, err
			},
		}
	})
}
