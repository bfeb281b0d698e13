package outboxpg

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/go-outbox/outbox/outboxdriver"
)

var _ outboxdriver.SchemaChecker = (*Store)(nil)

// schemaColumns are the columns the newest migration leaves in the table and
// the store uses: a table that lacks one is at an older migration.
const schemaColumns = messageColumns + `, lease_token, locked_until, seq`

// CheckSchema reports whether the table is ready for this release: it exists
// with every column the store uses, and its migrations table, if the table
// was migrated by a Migrator, records the latest version. Tables created by
// another tool from Migrator.SQL have no migrations table; their columns
// decide. A missing or outdated table is an error wrapping
// outboxdriver.ErrNotMigrated that names the fix.
func (s *Store) CheckSchema(ctx context.Context) error {
	notMigrated := func(what string) error {
		return fmt.Errorf("%w: outboxpg: %s; run `outbox migrate up` (or outboxpg.Migrator.Up) with the same schema and table", outboxdriver.ErrNotMigrated, what)
	}
	_, err := s.pool.Exec(ctx, `SELECT `+schemaColumns+` FROM `+s.names.qTable+` LIMIT 0`)
	var pgErr *pgconn.PgError
	switch {
	case errors.As(err, &pgErr) && (pgErr.Code == "42P01" || pgErr.Code == "3F000"): // undefined_table, invalid_schema_name
		return notMigrated(fmt.Sprintf("table %s does not exist", s.Name()))
	case errors.As(err, &pgErr) && pgErr.Code == "42703": // undefined_column
		return notMigrated(fmt.Sprintf("table %s is at an older migration than this release needs (%s)", s.Name(), pgErr.Message))
	case err != nil:
		return fmt.Errorf("outboxpg: check table %s: %w", s.Name(), err)
	}
	var applied *int32
	err = s.pool.QueryRow(ctx, `SELECT CASE WHEN to_regclass($1) IS NULL THEN NULL ELSE 0 END`, s.names.qMigr).Scan(&applied)
	if err != nil {
		return fmt.Errorf("outboxpg: check table %s: %w", s.Name(), err)
	}
	if applied == nil {
		return nil // created by another tool: the columns are all there
	}
	var latest int
	err = s.pool.QueryRow(ctx, `SELECT COALESCE(max(version), 0) FROM `+s.names.qMigr).Scan(&latest)
	if errors.As(err, &pgErr) && pgErr.Code == "42501" { // insufficient_privilege
		// A role granted the outbox table only (least privilege) cannot
		// read the bookkeeping; the columns, checked above, decide.
		return nil
	}
	if err != nil {
		return fmt.Errorf("outboxpg: check migrations of %s: %w", s.Name(), err)
	}
	if latest < len(embedded) {
		return notMigrated(fmt.Sprintf("table %s is at migration %d; this release needs %d", s.Name(), latest, len(embedded)))
	}
	return nil
}
