package outboxmysql_test

import (
	"context"
	"database/sql"
	"testing"

	"github.com/go-outbox/outbox/internal/mysqltest"
	"github.com/go-outbox/outbox/outboxmysql"
	"github.com/go-outbox/outbox/relaytest"
	"github.com/go-outbox/outbox/storetest"
)

// TestConformanceWithTransactionLeases runs the suite with claims held in
// a transaction (Options.TransactionLeases).
func TestConformanceWithTransactionLeases(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T) storetest.Harness {
		return heldHarness(t, newStore(t, outboxmysql.Options{TransactionLeases: true}))
	})
}

// TestModelOfTheStoreContractWithTransactionLeases runs storetest.RunModel
// with claims held in transactions.
func TestModelOfTheStoreContractWithTransactionLeases(t *testing.T) {
	t.Parallel()
	storetest.RunModel(t, func(t *testing.T) storetest.ModelHarness {
		db := mysqltest.DB(t)
		return modelHarness(t, db, migrated(t, db, outboxmysql.Options{Table: randomTable(), TransactionLeases: true}))
	})
}

// TestRelayWithTransactionLeases runs the relay suite on stores whose
// claims hold their rows in a transaction.
func TestRelayWithTransactionLeases(t *testing.T) {
	t.Parallel()
	relaytest.Run(t, func(t *testing.T) relaytest.Harness {
		return relayHarnessWith(t, outboxmysql.Options{TransactionLeases: true})
	})
}

// heldHarness is harness for a store with TransactionLeases: it counts the
// messages held claims hold.
func heldHarness(t *testing.T, store *outboxmysql.Store) storetest.Harness {
	h := harness(t, store)
	h.CountHeld = countHeld(store.DB(), store.Name())
	return h
}

// countHeld is storetest.Harness.CountHeld for the table: the pending rows
// that another transaction holds locked, which a locking read that skips
// locked rows does not return.
func countHeld(db *sql.DB, table string) func(ctx context.Context) (int64, error) {
	q := "`" + table + "`"
	return func(ctx context.Context) (int64, error) {
		tx, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
		if err != nil {
			return 0, err
		}
		defer tx.Rollback()
		var all, free int64
		if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM `+q+` WHERE status = 'pending'`).Scan(&all); err != nil {
			return 0, err
		}
		rows, err := tx.QueryContext(ctx, `SELECT id FROM `+q+` WHERE status = 'pending' FOR UPDATE SKIP LOCKED`)
		if err != nil {
			return 0, err
		}
		defer rows.Close()
		for rows.Next() {
			free++
		}
		return all - free, rows.Err()
	}
}
