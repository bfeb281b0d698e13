package outboxpg_test

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/go-outbox/outbox/internal/pgtest"
	"github.com/go-outbox/outbox/outboxevents/eventstest"
	"github.com/go-outbox/outbox/outboxpg"
)

func TestEventsConformance(t *testing.T) {
	t.Parallel()
	eventstest.Run(t, func(t *testing.T) eventstest.Harness[pgx.Tx] {
		pool := pgtest.Pool(t)
		store := newStore(t, pool, outboxpg.Options{})
		schema, _, _ := strings.Cut(store.Name(), ".")
		inbox, err := outboxpg.NewInboxTable(pool, outboxpg.InboxOptions{Schema: schema})
		if err != nil {
			t.Fatal(err)
		}
		if err := inbox.Migrate(t.Context()); err != nil {
			t.Fatal(err)
		}
		effects := `"` + schema + `".effects`
		if _, err := pool.Exec(t.Context(), `CREATE TABLE `+effects+` (key text NOT NULL)`); err != nil {
			t.Fatal(err)
		}
		return eventstest.Harness[pgx.Tx]{
			Store:  store,
			Writer: newWriter(t, store),
			Inbox:  inbox,
			Effect: func(ctx context.Context, tx pgx.Tx, key string) error {
				_, err := tx.Exec(ctx, `INSERT INTO `+effects+` VALUES ($1)`, key)
				return err
			},
			Effects: func(ctx context.Context, key string) (n int, err error) {
				err = pool.QueryRow(ctx, `SELECT count(*) FROM `+effects+` WHERE key = $1`, key).Scan(&n)
				return n, err
			},
		}
	})
}
