package outboxmysql_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/mysqltest"
	"github.com/go-outbox/outbox/outboxmysql"
	"github.com/go-outbox/outbox/relaytest"
)

// relayHarness migrates a table, with a name of its own, in a fresh
// database on a pool that logs its statements, and claims in key order
// through a second Store of it.
func relayHarness(t *testing.T) relaytest.Harness {
	t.Helper()
	return relayHarnessWith(t, outboxmysql.Options{})
}

// relayHarnessWith is relayHarness for a Store with opts.
func relayHarnessWith(t *testing.T, opts outboxmysql.Options) relaytest.Harness {
	t.Helper()
	name, _ := mysqltest.Database(t)
	db, statements := mysqltest.Counted(t, name)
	// With TransactionLeases the pool stays bounded (mysqltest's size),
	// smaller than the suite's relays' workers need to hold every claim:
	// some claims are leased by their columns, a mixed fleet, as in a
	// deployment that sized its pool short.
	opts.Table = randomTable()
	store := migrated(t, db, opts)
	w := newWriter(t, store)
	return relaytest.Harness{
		Store:      store,
		KeyOrdered: keyOrdered(t, store, outboxmysql.Options{}),
		Write: func(ctx context.Context, commit bool, msgs ...*outbox.Message) error {
			err := store.RunInTx(ctx, func(tx *sql.Tx) error {
				if err := w.Write(ctx, tx, msgs...); err != nil {
					return err
				}
				if !commit {
					return errRollback
				}
				return nil
			})
			if !commit && errors.Is(err, errRollback) {
				return nil
			}
			return err
		},
		Notify:     w.Notify,
		Statements: statements.All,
		Scale:      0.25,
	}
}

func TestRelay(t *testing.T) {
	t.Parallel()
	relaytest.Run(t, relayHarness)
}
