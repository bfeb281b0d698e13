package bench

// What typed events cost: a relay draining a backlog of events through an
// outboxevents.Dispatcher with no-op handlers (each handler a transaction
// with its inbox record), against plain outbox.Handlers with one no-op
// handler (no transaction), on PostgreSQL and SQLite.

import (
	"context"
	"database/sql"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/outboxevents"
	"github.com/go-outbox/outbox/outboxpg"
	"github.com/go-outbox/outbox/outboxsqlite"
)

// eventBacklog is smaller than backlog: every handler commits a transaction
// per event.
const eventBacklog = 5000

// Placed is the benchmark's event.
type Placed struct {
	OrderID string `json:"order_id"`
}

func eventRegistry() *outboxevents.Registry {
	r := outboxevents.NewRegistry(outboxevents.Options{})
	outboxevents.MustRegister[Placed](r, "orders.placed")
	return r
}

// eventPublishers returns the publishers compared: plain Handlers with one
// no-op handler, and dispatchers with 1 and 3 no-op event handlers.
func eventPublishers[TTx any](b *testing.B, inbox outbox.InboxStore[TTx]) map[string]outbox.Publisher {
	b.Helper()
	plain := &outbox.Handlers{}
	plain.Handle("orders.placed", func(context.Context, outbox.Message) error { return nil })
	pubs := map[string]outbox.Publisher{"handlers-1": plain}
	for _, n := range []int{1, 3} {
		d, err := outboxevents.NewDispatcher(eventRegistry(), inbox)
		if err != nil {
			b.Fatal(err)
		}
		for i := range n {
			if err := outboxevents.Handle(d, fmt.Sprintf("h%d", i), func(context.Context, TTx, Placed) error { return nil }); err != nil {
				b.Fatal(err)
			}
		}
		pubs[fmt.Sprintf("events-%d", n)] = d
	}
	return pubs
}

func BenchmarkEventsDispatch(b *testing.B) {
	for _, name := range []string{"handlers-1", "events-1", "events-3"} {
		b.Run("postgres/"+name, func(b *testing.B) {
			pool, store, opts := setup(b, outboxpg.Options{})
			inbox, err := outboxpg.NewInboxTable(pool, outboxpg.InboxOptions{Schema: opts.Schema})
			if err != nil {
				b.Fatal(err)
			}
			if err := inbox.Migrate(context.Background()); err != nil {
				b.Fatal(err)
			}
			pub := eventPublishers[pgx.Tx](b, inbox)[name]
			drainTo(b, store, pub, 100, 1, eventBacklog, func() {
				_, err := pool.Exec(context.Background(), fmt.Sprintf(`
					INSERT INTO %q.outbox (id, topic, payload, headers, created_at)
					SELECT gen_random_uuid(), 'orders.placed', convert_to('{"order_id":"o-' || g || '"}', 'UTF8'), '{"ce-type":"orders.placed"}', now()
					FROM generate_series(1, $1) g`, opts.Schema), eventBacklog)
				if err != nil {
					b.Fatal(err)
				}
			})
		})
		b.Run("sqlite/"+name, func(b *testing.B) {
			store := sqliteSetup(b)
			inbox, err := outboxsqlite.NewInboxTable(store, "")
			if err != nil {
				b.Fatal(err)
			}
			if err := inbox.Migrate(context.Background()); err != nil {
				b.Fatal(err)
			}
			pub := eventPublishers[*sql.Tx](b, inbox)[name]
			drainTo(b, store, pub, 100, 1, eventBacklog, func() {
				_, err := store.DB().Exec(`
WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < ?1)
INSERT INTO outbox (id, topic, key, payload, headers, created_at, available_at)
SELECT lower(hex(randomblob(4)) || '-' || hex(randomblob(2)) || '-4' || substr(hex(randomblob(2)), 2) || '-a' ||
		substr(hex(randomblob(2)), 2) || '-' || hex(randomblob(6))),
	'orders.placed', '', CAST('{"order_id":"o-' || n || '"}' AS BLOB), '{"ce-type":"orders.placed"}',
	CAST(unixepoch('subsec') * 1000000 AS INTEGER), CAST(unixepoch('subsec') * 1000000 AS INTEGER)
FROM g`, eventBacklog)
				if err != nil {
					b.Fatal(err)
				}
			})
		})
	}
}
