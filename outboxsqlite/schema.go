package outboxsqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/go-outbox/outbox/outboxdriver"
)

var _ outboxdriver.SchemaChecker = (*Store)(nil)

// schemaColumns are the columns every store uses: a table that lacks one
// is at an older migration.
const schemaColumns = messageColumns + `, lease_token, locked_until`

// requiredMigration is the newest migration that changes what the store
// reads and writes: a store that skips dead messages in key order counts
// the messages that overtake them in the overtaken column (migration 5).
// Other stores work at migration 4 (Get and ListDead read 0 there), so a
// relay that needs no newer migration, and `outbox dead`, keep working on
// a table not yet migrated up.
func (s *Store) requiredMigration() int {
	if s.set.skipsDead() {
		return 5
	}
	return 4
}

// requiredColumns are the columns the store uses: the overtaken column
// only when it skips dead messages in key order.
func (s *Store) requiredColumns() string {
	if s.set.skipsDead() {
		return schemaColumns + ", overtaken"
	}
	return schemaColumns
}

// CheckSchema reports whether the table is ready for this release: it exists
// with every column the store uses, and its migrations table, if a Migrator
// made it, records the migrations the store needs (requiredMigration). Tables created by another tool from
// Migrator.SQL have no migrations table; their columns decide. A missing or
// outdated table is an error wrapping outboxdriver.ErrNotMigrated that names
// the fix.
func (s *Store) CheckSchema(ctx context.Context) error {
	notMigrated := func(what string) error {
		return fmt.Errorf("%w: outboxsqlite: %s; run `outbox migrate up` (or outboxsqlite.Migrator.Up) on the same file and table", outboxdriver.ErrNotMigrated, what)
	}
	rows, err := s.db.QueryContext(ctx, `SELECT `+s.requiredColumns()+` FROM `+s.set.qTable+` LIMIT 0`)
	if err == nil {
		err = errors.Join(rows.Err(), rows.Close())
	}
	switch {
	case err != nil && strings.Contains(err.Error(), "no such table"):
		return notMigrated(fmt.Sprintf("table %s does not exist", s.Name()))
	case err != nil && strings.Contains(err.Error(), "no such column"):
		return notMigrated(fmt.Sprintf("table %s is at an older migration than this release needs (%v)", s.Name(), err))
	case err != nil:
		return fmt.Errorf("outboxsqlite: check table %s: %w", s.Name(), explain(err, s.path))
	}
	var latest sql.NullInt64
	err = s.db.QueryRowContext(ctx, `SELECT max(version) FROM `+s.set.qMigr).Scan(&latest)
	switch {
	case err != nil && strings.Contains(err.Error(), "no such table"):
		return nil // created by another tool: the columns are all there
	case err != nil:
		return fmt.Errorf("outboxsqlite: check migrations of %s: %w", s.Name(), explain(err, s.path))
	case latest.Int64 < int64(s.requiredMigration()):
		return notMigrated(fmt.Sprintf("table %s is at migration %d; this release needs %d", s.Name(), latest.Int64, s.requiredMigration()))
	}
	return nil
}
