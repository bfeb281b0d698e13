package outboxpg

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/go-outbox/outbox/outboxdriver"
)

var _ outboxdriver.SchemaChecker = (*Store)(nil)

// requiredMigration is the newest migration that changes what the store
// reads and writes. Later ones only tune (migration 4 sets autovacuum), so a
// table without them works, and a relay on it starts. Claims in key order
// where a dead message holds its key read the key dead index (migration 5):
// without it each of their probes would read every dead message. A store
// that skips dead messages in key order counts the messages that overtake
// them in the overtaken column (migration 6).
func (s *Store) requiredMigration() int {
	switch {
	case s.opts.skipsDead():
		return 6
	case s.opts.deadHoldsKey():
		return 5
	}
	return 3
}

// requiredColumns are the columns the store uses: the overtaken column
// only when it skips dead messages in key order (Get and ListDead read 0
// on a table without it).
func (s *Store) requiredColumns() string {
	if s.opts.skipsDead() {
		return schemaColumns + ", overtaken"
	}
	return schemaColumns
}

// schemaColumns are the columns the newest migration leaves in the table and
// the store uses: a table that lacks one is at an older migration.
const schemaColumns = messageColumns + `, lease_token, locked_until, seq`

// CheckSchema reports whether the table is ready for this release: it exists
// with every column the store uses, and its migrations table, if the table
// was migrated by a Migrator, records the migrations the store needs (up to
// 3; `outbox status` tells of later, tuning ones). Tables created by another
// tool from Migrator.SQL have no migrations table; their columns decide. A
// missing or outdated table is an error wrapping outboxdriver.ErrNotMigrated
// that names the fix; a role the database refuses (wrong password, no such
// database, no privilege on the table) one wrapping outboxdriver.ErrRefused.
func (s *Store) CheckSchema(ctx context.Context) error {
	notMigrated := func(what string) error {
		return fmt.Errorf("%w: outboxpg: %s; run `outbox migrate up` (or outboxpg.Migrator.Up) with the same schema and table", outboxdriver.ErrNotMigrated, what)
	}
	_, err := s.pool.Exec(ctx, `SELECT `+s.requiredColumns()+` FROM `+s.names.qTable+` LIMIT 0`)
	var pgErr *pgconn.PgError
	switch {
	case errors.As(err, &pgErr) && (pgErr.Code == "42P01" || pgErr.Code == "3F000"): // undefined_table, invalid_schema_name
		return notMigrated(fmt.Sprintf("table %s does not exist", s.Name()))
	case errors.As(err, &pgErr) && pgErr.Code == "42703": // undefined_column
		return notMigrated(fmt.Sprintf("table %s is at an older migration than this release needs (%s)", s.Name(), pgErr.Message))
	case refused(err):
		return fmt.Errorf("%w: outboxpg: table %s: %w; check the connection URL's user, password and database, and the role's grants (GRANT SELECT, INSERT, UPDATE, DELETE ON the table)", outboxdriver.ErrRefused, s.Name(), err)
	case err != nil:
		return fmt.Errorf("outboxpg: check table %s: %w", s.Name(), err)
	}
	if err := s.checkNotPartitioned(ctx, notMigrated); err != nil {
		return err
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
	if need := s.requiredMigration(); latest < need {
		return notMigrated(fmt.Sprintf("table %s is at migration %d; this release needs %d", s.Name(), latest, need))
	}
	return nil
}

// checkNotPartitioned refuses a partitioned table, or one with inheritance
// children. The store tells rows apart by their address (ctid) within one
// table: a claim remembers where its rows are, and the key-order claim reads
// and locks rows by address. Across partitions (or a parent and its
// children) addresses repeat, and pg_relation_filenode of a partitioned
// parent is NULL, so settling by address could delete a row of another
// partition. Until partitioning is supported on purpose, such a table stops
// the relay at start with the fix.
func (s *Store) checkNotPartitioned(ctx context.Context, notMigrated func(string) error) error {
	var partitioned, inherited bool
	err := s.pool.QueryRow(ctx, `SELECT relkind = 'p', relhassubclass FROM pg_class WHERE oid = $1::regclass`, s.names.qTable).Scan(&partitioned, &inherited)
	if err != nil {
		return fmt.Errorf("outboxpg: check table %s: %w", s.Name(), err)
	}
	if partitioned || inherited {
		what := "partitioned"
		if !partitioned {
			what = "the parent of other tables (inheritance)"
		}
		return notMigrated(fmt.Sprintf("table %s is %s, which this release does not support: the store settles rows by their address in one table, and addresses repeat across partitions. Use a plain table as the migrations create it", s.Name(), what))
	}
	return nil
}

// refused reports whether the database refused the role for good:
// SQLSTATE class 28 (invalid authorization: wrong password, unknown role),
// 3D000 (no such database) and 42501 (insufficient privilege). Other errors
// (the server down or restarting, a timeout) may pass, so the relay asks
// again.
func refused(err error) bool {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return false
	}
	return strings.HasPrefix(pgErr.Code, "28") || pgErr.Code == "3D000" || pgErr.Code == "42501"
}
