package outboxpg_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/go-outbox/outbox/internal/pgtest"
	"github.com/go-outbox/outbox/outboxdriver"
	"github.com/go-outbox/outbox/outboxpg"
)

func TestATableMigratedBeforeTheRollupSaysWhichMigrationMakesIt(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	opts := outboxpg.Options{Schema: pgtest.Schema(t)}
	m, err := outboxpg.NewMigrator(pool, opts)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.To(t.Context(), 9); err != nil {
		t.Fatal(err)
	}
	store, err := outboxpg.New(pool, opts)
	if err != nil {
		t.Fatal(err)
	}
	addErr := store.AddMinute(t.Context(), 1, 0)
	_, _, readErr := store.Minutes(t.Context(), time.Hour)
	for _, err := range []error{addErr, readErr} {
		if !errors.Is(err, outboxdriver.ErrNotMigrated) || !strings.Contains(err.Error(), "migration 10") || !strings.Contains(err.Error(), "outbox migrate up") {
			t.Fatalf("rollup call on a table at migration 9: %v; want ErrNotMigrated naming migration 10 and `outbox migrate up`", err)
		}
	}
}
