package outboxmysql_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"

	"github.com/google/uuid"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/outboxmysql"
	"github.com/go-outbox/outbox/storetest"
)

func TestInboxConformance(t *testing.T) {
	t.Parallel()
	storetest.RunInbox(t, func(t *testing.T) storetest.InboxHarness[*sql.Tx] {
		store := newStore(t, outboxmysql.Options{Table: randomTable()})
		table, err := outboxmysql.NewInboxTable(store, "")
		if err != nil {
			t.Fatalf("new inbox table: %v", err)
		}
		for range 2 { // idempotent
			if err := table.Migrate(t.Context()); err != nil {
				t.Fatalf("migrate: %v", err)
			}
		}
		if _, err := store.DB().ExecContext(t.Context(), `CREATE TABLE effects (message_id BINARY(16) NOT NULL)`); err != nil {
			t.Fatalf("create effects table: %v", err)
		}
		return storetest.InboxHarness[*sql.Tx]{
			Table:  table,
			Parked: table,
			Purge:  table.PurgeProcessed,
			Outbox: store,
			Writer: newWriter(t, store),
			Effect: func(ctx context.Context, tx *sql.Tx, id uuid.UUID) error {
				_, err := tx.ExecContext(ctx, `INSERT INTO effects VALUES (?)`, id[:])
				return err
			},
			Effects: func(ctx context.Context, id uuid.UUID) (n int, err error) {
				err = store.DB().QueryRowContext(ctx, `SELECT COUNT(*) FROM effects WHERE message_id = ?`, id[:]).Scan(&n)
				return n, err
			},
		}
	})
}

func TestNewInboxTableRejectsInvalidNames(t *testing.T) {
	t.Parallel()
	store, err := outboxmysql.New(&sql.DB{}, outboxmysql.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, table := range []string{"Processed", "1st", "t;drop"} {
		_, err := outboxmysql.NewInboxTable(store, table)
		var cerr *outbox.ConfigError
		if !errors.As(err, &cerr) || cerr.Field != "outboxmysql.NewInboxTable table" {
			t.Fatalf("NewInboxTable(%q): %v; want a *outbox.ConfigError naming the table argument", table, err)
		}
	}
}

// An inbox table made by a release before parked messages has no parked
// table; Migrate, which consumers run at every start, adds it.
func TestInboxMigrateAddsTheParkedTableToAnOlderInbox(t *testing.T) {
	t.Parallel()
	store := newStore(t, outboxmysql.Options{Table: randomTable()})
	table := migratedInbox(t, store)
	if _, err := store.DB().ExecContext(t.Context(), "DROP TABLE "+table.ParkedName()); err != nil {
		t.Fatal(err)
	}
	m := keyMessage("order-1")
	if err := table.Park(t.Context(), "billing", m, 1, "failed"); err == nil {
		t.Fatalf("park %s with no parked table: no error", m.ID)
	}
	if err := table.Migrate(t.Context()); err != nil {
		t.Fatalf("migrate the older inbox: %v", err)
	}
	if err := table.Park(t.Context(), "billing", m, 1, "failed"); err != nil {
		t.Fatalf("park %s once Migrate ran: %v", m.ID, err)
	}
	if got, err := table.GetParked(t.Context(), "billing", m.ID); err != nil || got.Error != "failed" {
		t.Fatalf("get parked %s: %+v, %v", m.ID, got, err)
	}
}
