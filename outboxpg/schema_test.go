package outboxpg_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/go-outbox/outbox/internal/pgtest"
	"github.com/go-outbox/outbox/outboxpg"
	"github.com/go-outbox/outbox/relaytest"
)

// A relay on a table that does not exist, or is at an older migration, stops
// at once with the fix instead of logging a failed claim every poll.
func TestRelayRefusesToStartOnAMissingOrOutdatedTable(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	opts := outboxpg.Options{Schema: pgtest.Schema(t)}
	s, err := outboxpg.New(pool, opts)
	if err != nil {
		t.Fatal(err)
	}
	relaytest.RequireRunRefuses(t, s, s.Name(), "does not exist")

	m, err := outboxpg.NewMigrator(pool, opts)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.To(t.Context(), 2); err != nil {
		t.Fatal(err)
	}
	relaytest.RequireRunRefuses(t, s, s.Name(), "at an older migration", "seq")

	if _, err := m.Up(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := s.CheckSchema(t.Context()); err != nil {
		t.Fatalf("CheckSchema after migrate up: %v", err)
	}
	// The last migration adds no column: the migrations table tells.
	if _, err := m.Down(t.Context(), 1); err != nil {
		t.Fatal(err)
	}
	relaytest.RequireRunRefuses(t, s, s.Name(), fmt.Sprintf("at migration %d; this release needs %d", m.Latest()-1, m.Latest()))
}

// A table created from the dumped SQL by another migration tool has no
// migrations table: its columns decide, and they are all there.
func TestTableCreatedFromTheDumpedSQLPassesTheCheck(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	opts := outboxpg.Options{Schema: pgtest.Schema(t)}
	m, err := outboxpg.NewMigrator(nil, opts)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(t.Context(), m.SQL(outboxpg.DirectionUp)); err != nil {
		t.Fatal(err)
	}
	s, err := outboxpg.New(pool, opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.CheckSchema(t.Context()); err != nil {
		t.Fatalf("CheckSchema on a table made from Migrator.SQL: %v", err)
	}
}

// The outbox churns through its rows like a queue: migration 4 makes
// autovacuum start after a fixed number of dead rows and run unthrottled on
// this table, and migrating down restores the cluster's settings.
func TestMigrationFourTunesAutovacuumForAQueue(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	opts := outboxpg.Options{Schema: pgtest.Schema(t)}
	m, err := outboxpg.NewMigrator(pool, opts)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.To(t.Context(), 4); err != nil {
		t.Fatal(err)
	}
	options := func() []string {
		var got []string
		if err := pool.QueryRow(t.Context(), `SELECT coalesce(reloptions, '{}') FROM pg_class WHERE oid = $1::regclass`, opts.Schema+".outbox").Scan(&got); err != nil {
			t.Fatal(err)
		}
		return got
	}
	got := options()
	for _, want := range []string{"autovacuum_vacuum_scale_factor=0", "autovacuum_vacuum_threshold=10000", "autovacuum_vacuum_cost_delay=0"} {
		if !slices.Contains(got, want) {
			t.Errorf("table options %v after migration 4 lack %s", got, want)
		}
	}
	if _, err := m.To(t.Context(), 3); err != nil {
		t.Fatal(err)
	}
	if got := options(); slices.ContainsFunc(got, func(o string) bool { return strings.HasPrefix(o, "autovacuum_") }) {
		t.Errorf("table options %v after migrating down from 4 still hold autovacuum settings", got)
	}
}
