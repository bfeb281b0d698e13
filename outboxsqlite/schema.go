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

// schemaColumns are the columns the newest migration leaves in the table and
// the store uses: a table that lacks one is at an older migration.
const schemaColumns = messageColumns + `, lease_token, locked_until, overtaken`

// CheckSchema reports whether the table is ready for this release: it exists
// with every column the store uses, and its migrations table, if a Migrator
// made it, records the latest version. Tables created by another tool from
// Migrator.SQL have no migrations table; their columns decide. A missing or
// outdated table is an error wrapping outboxdriver.ErrNotMigrated that names
// the fix.
func (s *Store) CheckSchema(ctx context.Context) error {
	notMigrated := func(what string) error {
		return fmt.Errorf("%w: outboxsqlite: %s; run `outbox migrate up` (or outboxsqlite.Migrator.Up) on the same file and table", outboxdriver.ErrNotMigrated, what)
	}
	rows, err := s.db.QueryContext(ctx, `SELECT `+schemaColumns+` FROM `+s.set.qTable+` LIMIT 0`)
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
	case latest.Int64 < int64(len(embedded)):
		return notMigrated(fmt.Sprintf("table %s is at migration %d; this release needs %d", s.Name(), latest.Int64, len(embedded)))
	}
	return nil
}
