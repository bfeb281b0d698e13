package outboxsqlite_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/go-outbox/outbox/outboxdriver"
	"github.com/go-outbox/outbox/outboxsqlite"
)

func TestATableMigratedBeforeTheRollupSaysWhichMigrationMakesIt(t *testing.T) {
	t.Parallel()
	path := dbPath(t)
	store, err := outboxsqlite.Open(t.Context(), path, outboxsqlite.Options{CreateIfMissing: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	m, err := outboxsqlite.NewMigrator(store.DB(), outboxsqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.To(t.Context(), 8); err != nil {
		t.Fatal(err)
	}
	addErr := store.AddMinute(t.Context(), 1, 0)
	_, _, readErr := store.Minutes(t.Context(), time.Hour)
	for _, err := range []error{addErr, readErr} {
		if !errors.Is(err, outboxdriver.ErrNotMigrated) || !strings.Contains(err.Error(), "migration 9") || !strings.Contains(err.Error(), "outbox migrate up") {
			t.Fatalf("rollup call on a table at migration 8: %v; want ErrNotMigrated naming migration 9 and `outbox migrate up`", err)
		}
	}
}
