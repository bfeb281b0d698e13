package outboxsqlite_test

import (
	"testing"

	"github.com/go-outbox/outbox/outboxsqlite"
	"github.com/go-outbox/outbox/relaytest"
)

// A relay on a table that does not exist, or is at an older migration, stops
// at once with the fix instead of logging a failed claim every poll.
func TestRelayRefusesToStartOnAMissingOrOutdatedTable(t *testing.T) {
	t.Parallel()
	s, opts := openUnmigrated(t)
	relaytest.RequireRunRefuses(t, s, s.Name(), "does not exist")

	m, err := outboxsqlite.NewMigrator(s.DB(), opts)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.To(t.Context(), 2); err != nil {
		t.Fatal(err)
	}
	relaytest.RequireRunRefuses(t, s, s.Name(), "at an older migration", "locked_until")

	if _, err := m.Up(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := s.CheckSchema(t.Context()); err != nil {
		t.Fatalf("CheckSchema after migrate up: %v", err)
	}
}

// A table created from the dumped SQL by another migration tool has no
// migrations table: its columns decide, and they are all there.
func TestTableCreatedFromTheDumpedSQLPassesTheCheck(t *testing.T) {
	t.Parallel()
	s, opts := openUnmigrated(t)
	m, err := outboxsqlite.NewMigrator(nil, opts)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.DB().ExecContext(t.Context(), m.SQL(outboxsqlite.DirectionUp)); err != nil {
		t.Fatal(err)
	}
	if err := s.CheckSchema(t.Context()); err != nil {
		t.Fatalf("CheckSchema on a table made from Migrator.SQL: %v", err)
	}
}

// openUnmigrated opens a new database file with no outbox table in it.
func openUnmigrated(t *testing.T) (*outboxsqlite.Store, outboxsqlite.Options) {
	t.Helper()
	opts := outboxsqlite.Options{CreateIfMissing: true, Table: randomTable()}
	s, err := outboxsqlite.Open(t.Context(), dbPath(t), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s, opts
}
