package main

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"

	"github.com/google/uuid"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/outboxdriver"
	"github.com/go-outbox/outbox/outboxsqlite"
)

// demoDB is the demo's database, the one part of the demo that differs
// between SQLite and MySQL: its opening and migrations, its inbox table, and
// the statements on the application's tables. The flow (demo.go) sees only
// this, so every store runs the same steps and the same checks.
type demoDB struct {
	// about says where the tables are, once they are ready.
	about string
	// close leaves behind what the demo promises to leave, and closes the
	// database.
	close func()
	inbox outbox.InboxStore[*sql.Tx]
	sql   demoStatements
	store demoStore
}

// demoStore is what the demo asks of an outbox store: a relay's, a writer's
// and the few reads its checks make.
type demoStore interface {
	outboxdriver.Store
	outbox.Inserter[*sql.Tx]
	outbox.TxRunner[*sql.Tx]
	DB() *sql.DB
	Get(ctx context.Context, id uuid.UUID) (outbox.Message, error)
	Stats(ctx context.Context) (outboxdriver.Stats, error)
}

// demoStatements are the demo's statements in its database's dialect, with
// its table names.
type demoStatements struct {
	// applyRevenue counts one more order of a customer (customer, cents).
	applyRevenue string
	// insertOrder inserts an order (id, customer, cents).
	insertOrder string
	// orderTotals returns the number of orders and the sum of their cents.
	orderTotals string
	// pendingAttempts returns the attempts the pending messages have used.
	pendingAttempts string
	// revenueTotals returns the orders and cents the consumer has counted.
	revenueTotals string
}

// openDemoSQLite makes the demo's SQLite database in dir: a new file, so
// the tables can have the application's plain names.
func openDemoSQLite(ctx context.Context, dir string) (_ *demoDB, err error) {
	dbPath := filepath.Join(dir, "demo.db")
	store, err := outboxsqlite.Open(ctx, dbPath, outboxsqlite.Options{CreateIfMissing: true})
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			_ = store.Close()
		}
	}()
	m, err := outboxsqlite.NewMigrator(store.DB(), outboxsqlite.Options{})
	if err != nil {
		return nil, err
	}
	if _, err := m.Up(ctx); err != nil {
		return nil, err
	}
	// The application's own tables: orders, and what the consumer computes
	// from their events, with its inbox.
	for _, ddl := range []string{
		`CREATE TABLE IF NOT EXISTS orders (id INTEGER PRIMARY KEY, customer TEXT NOT NULL, total_cents INTEGER NOT NULL)`,
		`CREATE TABLE IF NOT EXISTS revenue (customer TEXT PRIMARY KEY, orders INTEGER NOT NULL, total_cents INTEGER NOT NULL)`,
	} {
		if _, err := store.DB().ExecContext(ctx, ddl); err != nil {
			return nil, err
		}
	}
	inboxTable, err := outboxsqlite.NewInboxTable(store, "inbox")
	if err != nil {
		return nil, err
	}
	if err := inboxTable.Migrate(ctx); err != nil {
		return nil, err
	}
	return &demoDB{
		about: fmt.Sprintf("SQLite database %s: outbox table migrated, orders/revenue/inbox tables created", dbPath),
		close: func() { _ = store.Close() },
		inbox: inboxTable,
		sql: demoStatements{
			applyRevenue: `INSERT INTO revenue (customer, orders, total_cents) VALUES (?, 1, ?)
			ON CONFLICT (customer) DO UPDATE SET orders = orders + 1, total_cents = total_cents + excluded.total_cents`,
			insertOrder:     `INSERT INTO orders (id, customer, total_cents) VALUES (?, ?, ?)`,
			orderTotals:     `SELECT count(*), COALESCE(sum(total_cents), 0) FROM orders`,
			pendingAttempts: `SELECT COALESCE(sum(attempts), 0) FROM outbox WHERE status = 'pending'`,
			revenueTotals:   `SELECT COALESCE(sum(orders), 0), COALESCE(sum(total_cents), 0) FROM revenue`,
		},
		store: store,
	}, nil
}
