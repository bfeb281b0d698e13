package outboxsqlite_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"

	"github.com/google/uuid"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/outboxsqlite"
	"github.com/go-outbox/outbox/storetest"
)

func TestInboxConformance(t *testing.T) {
	t.Parallel()
	storetest.RunInbox(t, func(t *testing.T) storetest.InboxHarness[*sql.Tx] {
		store := newStore(t, outboxsqlite.Options{})
		table, err := outboxsqlite.NewInboxTable(store, "")
		if err != nil {
			t.Fatalf("new inbox table: %v", err)
		}
		for range 2 { // idempotent
			if err := table.Migrate(t.Context()); err != nil {
				t.Fatalf("migrate: %v", err)
			}
		}
		if _, err := store.DB().ExecContext(t.Context(), `CREATE TABLE effects (message_id TEXT NOT NULL)`); err != nil {
			t.Fatalf("create effects table: %v", err)
		}
		return storetest.InboxHarness[*sql.Tx]{
			Table:  table,
			Parked: table,
			Purge:  table.PurgeProcessed,
			Outbox: store,
			Writer: newWriter(t, store),
			Effect: func(ctx context.Context, tx *sql.Tx, id uuid.UUID) error {
				_, err := tx.ExecContext(ctx, `INSERT INTO effects VALUES (?)`, id.String())
				return err
			},
			Effects: func(ctx context.Context, id uuid.UUID) (n int, err error) {
				err = store.DB().QueryRowContext(ctx, `SELECT count(*) FROM effects WHERE message_id = ?`, id.String()).Scan(&n)
				return n, err
			},
		}
	})
}

func TestNewInboxTableRejectsInvalidNames(t *testing.T) {
	t.Parallel()
	store := newStore(t, outboxsqlite.Options{})
	for _, table := range []string{"Processed", "sqlite_inbox", "t;drop"} {
		_, err := outboxsqlite.NewInboxTable(store, table)
		var cerr *outbox.ConfigError
		if !errors.As(err, &cerr) || cerr.Field != "outboxsqlite.NewInboxTable table" {
			t.Fatalf("NewInboxTable(%q): %v; want a *outbox.ConfigError naming the table argument", table, err)
		}
	}
}

// An inbox table made by an older release (no outgoing or duplicates
// column) is upgraded by Migrate, keeping its records.
func TestInboxMigrateUpgradesATableOfAnOlderRelease(t *testing.T) {
	t.Parallel()
	store := newStore(t, outboxsqlite.Options{})
	old := uuid.Must(uuid.NewV7())
	if _, err := store.DB().ExecContext(t.Context(), `CREATE TABLE processed_messages (
	consumer TEXT NOT NULL, message_id TEXT NOT NULL, processed_at INTEGER NOT NULL,
	PRIMARY KEY (consumer, message_id)) STRICT, WITHOUT ROWID;
INSERT INTO processed_messages VALUES ('billing', ?1, 1)`, old.String()); err != nil {
		t.Fatal(err)
	}
	table, err := outboxsqlite.NewInboxTable(store, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := table.Migrate(t.Context()); err != nil {
		t.Fatalf("migrate an older table: %v", err)
	}
	in, err := outbox.NewInbox(table, "billing")
	if err != nil {
		t.Fatal(err)
	}
	applied, err := in.Handle(t.Context(), old, func(context.Context, *sql.Tx) error { return nil })
	if err != nil || applied {
		t.Fatalf("the record kept from before the upgrade: applied %v, %v; want skipped", applied, err)
	}
	stats, err := table.ConsumerStats(t.Context())
	if err != nil || len(stats) != 1 || stats[0].Duplicates != 1 {
		t.Fatalf("stats after the upgrade: %+v, %v; want billing with 1 duplicate", stats, err)
	}
}
