// Package outboxsqlitetest gives an application's tests an SQLite database
// file each, in the test's temporary directory, with the outbox table (and,
// if asked, the inbox table) migrated. With outboxtest, its Database reads
// what a transaction wrote and drains the table with a relay.
package outboxsqlitetest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/outboxsqlite"
	"github.com/go-outbox/outbox/outboxtest"
)

// setupTimeout bounds opening and migrating a database.
const setupTimeout = time.Minute

// Config says what to make. The zero value migrates the table outbox.
type Config struct {
	// Inbox, if true, makes the inbox table too (Database.Inbox), under
	// InboxTable's name.
	Inbox bool
	// InboxTable names the inbox table; empty means the store's default.
	InboxTable string
	// Options names the outbox table and sets the Store's options;
	// CreateIfMissing is set for you.
	Options outboxsqlite.Options
	// Setup, if set, runs on the new database after the outbox's tables
	// are there: the application's own migrations, typically.
	Setup func(ctx context.Context, db *sql.DB) error
}

// Database is a test's own SQLite database.
type Database struct {
	// Inbox is the inbox table, if Config.Inbox asked for one.
	Inbox *outboxsqlite.InboxTable
	// Path is the database file, in the test's temporary directory.
	Path string
	// Store is the outbox table's store; Store.DB() is the *sql.DB for
	// the application's writes. It is closed when the test ends.
	Store *outboxsqlite.Store
}

// NewDatabase makes an SQLite database file for t with the outbox migrated
// and returns it. The file goes with the test's temporary directory.
func NewDatabase(t testing.TB, cfg Config) *Database {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	path := filepath.Join(t.TempDir(), "outbox.db")
	opts := cfg.Options
	opts.CreateIfMissing = true
	store, err := outboxsqlite.Open(ctx, path, opts)
	if err != nil {
		t.Fatalf("outboxsqlitetest: %v", err)
	}
	t.Cleanup(func() {
		if err := store.Close(); err != nil {
			t.Errorf("outboxsqlitetest: close %s: %v", path, err)
		}
	})
	m, err := outboxsqlite.NewMigrator(store.DB(), opts)
	if err != nil {
		t.Fatalf("outboxsqlitetest: %v", err)
	}
	if _, err := m.Up(ctx); err != nil {
		t.Fatalf("outboxsqlitetest: migrate the outbox table: %v", err)
	}
	db := &Database{Path: path, Store: store}
	if cfg.Inbox {
		if db.Inbox, err = outboxsqlite.NewInboxTable(store, cfg.InboxTable); err != nil {
			t.Fatalf("outboxsqlitetest: %v", err)
		}
		if err := db.Inbox.Migrate(ctx); err != nil {
			t.Fatalf("outboxsqlitetest: migrate the inbox table: %v", err)
		}
	}
	if cfg.Setup != nil {
		if err := cfg.Setup(ctx, store.DB()); err != nil {
			t.Fatalf("outboxsqlitetest: Config.Setup: %v", err)
		}
	}
	return db
}

// Pending returns the outbox table's pending messages, oldest first: it
// makes a Database an outboxtest.Table.
func (d *Database) Pending(ctx context.Context) ([]outbox.Message, error) {
	return Table(d.Store).Pending(ctx)
}

// Table returns an outboxtest.Table for store's table, for a database the
// test did not get from NewDatabase, or a second table.
func Table(store *outboxsqlite.Store) outboxtest.Table { return table{store} }

type table struct{ store *outboxsqlite.Store }

// Pending reads the ids of the pending messages and then each message
// through the store, which knows how its rows decode.
func (tb table) Pending(ctx context.Context) ([]outbox.Message, error) {
	// Store.Name is main.<table>, a validated identifier.
	name := tb.store.Name()
	rows, err := tb.store.DB().QueryContext(ctx, `SELECT id FROM `+name+` WHERE status = 'pending' ORDER BY id`)
	if err != nil {
		return nil, fmt.Errorf("list the pending messages of %s: %w", name, err)
	}
	var ids []uuid.UUID
	for rows.Next() {
		var id uuid.UUID
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return nil, fmt.Errorf("list the pending messages of %s: %w", name, err)
		}
		ids = append(ids, id)
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return nil, fmt.Errorf("list the pending messages of %s: %w", name, err)
	}
	msgs := make([]outbox.Message, 0, len(ids))
	for _, id := range ids {
		m, err := tb.store.Get(ctx, id)
		if errors.Is(err, outbox.ErrNotFound) {
			continue // published since the list was read
		}
		if err != nil {
			return nil, err
		}
		msgs = append(msgs, m)
	}
	return msgs, nil
}
