package outboxsqlite_test

import (
	"context"
	"database/sql"
	"testing"

	"github.com/go-outbox/outbox/outboxevents/eventstest"
	"github.com/go-outbox/outbox/outboxsqlite"
)

func TestEventsConformance(t *testing.T) {
	t.Parallel()
	eventstest.Run(t, func(t *testing.T) eventstest.Harness[*sql.Tx] {
		store := newStore(t, outboxsqlite.Options{})
		inbox := migratedInbox(t, store)
		if _, err := store.DB().ExecContext(t.Context(), `CREATE TABLE effects (key TEXT NOT NULL)`); err != nil {
			t.Fatal(err)
		}
		return eventstest.Harness[*sql.Tx]{
			Store:  store,
			Writer: newWriter(t, store),
			Inbox:  inbox,
			Effect: func(ctx context.Context, tx *sql.Tx, key string) error {
				_, err := tx.ExecContext(ctx, `INSERT INTO effects VALUES (?)`, key)
				return err
			},
			Effects: func(ctx context.Context, key string) (n int, err error) {
				err = store.DB().QueryRowContext(ctx, `SELECT count(*) FROM effects WHERE key = ?`, key).Scan(&n)
				return n, err
			},
		}
	})
}
