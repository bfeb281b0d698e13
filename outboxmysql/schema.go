package outboxmysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/go-outbox/outbox/outboxdriver"
)

// schemaColumns are the columns the store uses: a table that lacks one is
// at an older migration.
const schemaColumns = messageColumns + ", seq, lease_token, locked_until, overtaken"

// requiredMigration is the newest migration that changes what the store
// reads and writes: 2, the key index and the overtaken count.
const requiredMigration = 2

// CheckSchema reports whether the table is ready for this release: it exists
// with every column the store uses and the indexes its statements name, and
// its migrations table, if a Migrator
// made it, records the migrations the store needs. Tables created by another
// tool from Migrator.SQL have no migrations table; their columns decide. A
// missing or outdated table is an error wrapping outboxdriver.ErrNotMigrated
// that names the fix.
func (s *Store) CheckSchema(ctx context.Context) error {
	notMigrated := func(what string) error {
		return fmt.Errorf("%w: outboxmysql: %s; run `outbox migrate up` (or outboxmysql.Migrator.Up) on the same database and table", outboxdriver.ErrNotMigrated, what)
	}
	rows, err := s.db.QueryContext(ctx, `SELECT `+schemaColumns+` FROM `+s.set.qTable+` LIMIT 0`)
	if err == nil {
		err = errors.Join(rows.Err(), rows.Close())
	}
	switch {
	case isNoSuchTable(err):
		return notMigrated(fmt.Sprintf("table %s does not exist in the database", s.Name()))
	case errNumber(err) == errBadField:
		return notMigrated(fmt.Sprintf("table %s is at an older migration than this release needs (%v)", s.Name(), err))
	case err != nil:
		return fmt.Errorf("outboxmysql: check table %s: %w", s.Name(), err)
	}
	if err := s.checkIndexes(ctx); err != nil {
		return err
	}
	var latest sql.NullInt64
	err = s.db.QueryRowContext(ctx, `SELECT MAX(version) FROM `+s.set.qMigr).Scan(&latest)
	switch {
	case isNoSuchTable(err):
		return nil // created by another tool: the columns are all there
	case err != nil:
		return fmt.Errorf("outboxmysql: check migrations of %s: %w", s.Name(), err)
	case latest.Int64 < requiredMigration:
		return notMigrated(fmt.Sprintf("table %s is at migration %d; this release needs %d", s.Name(), latest.Int64, requiredMigration))
	}
	return nil
}

// namedIndexes are the indexes the store's statements name (FORCE INDEX,
// see byID): the table's name, then these suffixes, as the migrations made
// them. A table renamed after its migration keeps the old names.
var namedIndexes = []string{"_pending_idx", "_status_idx"}

// checkIndexes reports an index the store's statements name and the table
// lacks, with the fix.
func (s *Store) checkIndexes(ctx context.Context) error {
	for _, suffix := range namedIndexes {
		var n int
		err := s.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM information_schema.STATISTICS
WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ? AND INDEX_NAME = ?`, s.set.table, s.set.table+suffix).Scan(&n)
		if err != nil {
			return fmt.Errorf("outboxmysql: check indexes of %s: %w", s.Name(), err)
		}
		if n == 0 {
			return fmt.Errorf("%w: outboxmysql: table %s has no index %s, which the store's claims and settlements name; "+
				"a table renamed after its migration keeps its old index names: rename the indexes to %s_pending_idx and %s_status_idx "+
				"(ALTER TABLE ... RENAME INDEX old TO new), or create the table with `outbox migrate up`", outboxdriver.ErrNotMigrated, s.Name(), s.set.table+suffix, s.set.table, s.set.table)
		}
	}
	return nil
}
