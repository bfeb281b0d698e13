package outboxpg

import (
	"context"
	"embed"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/migrations"
	"github.com/go-outbox/outbox/internal/sqlident"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// Direction says which way a migration goes.
type Direction = migrations.Direction

// The directions of a migration.
const (
	DirectionUp   = migrations.DirectionUp
	DirectionDown = migrations.DirectionDown
)

// MigrationStatus says whether one migration is applied to a table.
type MigrationStatus = migrations.Status

// embedded are the package's migrations, versions 1 to len(embedded).
var embedded = migrations.MustLoad(migrationFiles, "outboxpg")

// substitute fills a migration's placeholders with quoted identifiers built
// from validated names.
func substitute(sql string, n names) string {
	return migrations.Substitute(sql, map[string]string{"schema": n.qSchema, "table": n.qTable, "relays": n.qRelays, "attempts": n.qAttempts, "paused": n.qPaused, "minutes": n.qMinutes}, n.table, sqlident.Quote)
}

// Migrator creates, upgrades and drops an outbox table with the embedded,
// numbered migrations, recording them in the table <table>_migrations of the
// same schema. Each migration runs in its own transaction together with its
// bookkeeping row; concurrent migrators (several instances starting at once)
// take turns on a transaction-scoped advisory lock.
type Migrator struct {
	names names
	pool  *pgxpool.Pool
}

// NewMigrator returns a Migrator for the table opts names. It validates opts
// and does not touch the database. pool may be nil when only SQL is needed;
// the other methods then return an error.
func NewMigrator(pool *pgxpool.Pool, opts Options) (*Migrator, error) {
	n, err := opts.resolve()
	if err != nil {
		return nil, err
	}
	return &Migrator{names: n, pool: pool}, nil
}

// Latest is the highest migration version this release knows.
func (m *Migrator) Latest() int { return len(embedded) }

// Down reverts the last steps applied migrations, newest first, and returns
// the versions it reverted. Reverting the first migration drops the table and
// every message in it.
func (m *Migrator) Down(ctx context.Context, steps int) ([]int, error) {
	if steps <= 0 {
		return nil, fmt.Errorf("outboxpg: migrate %s down: steps %d must be positive", m.name(), steps)
	}
	if err := m.needPool("migrate down"); err != nil {
		return nil, err
	}
	current, err := m.current(ctx)
	if err != nil {
		return nil, err
	}
	if steps > current {
		return nil, fmt.Errorf("outboxpg: migrate %s down %d step(s): only %d migration(s) applied; going below version 0 is not possible", m.name(), steps, current)
	}
	return m.To(ctx, current-steps)
}

// List returns every known migration with whether it is applied, in version
// order, followed by any versions recorded in the database that this release
// does not know.
func (m *Migrator) List(ctx context.Context) ([]MigrationStatus, error) {
	list := migrations.Statuses(embedded)
	if err := m.needPool("list migrations"); err != nil {
		return nil, err
	}
	var exists pgtype.Text
	if err := m.pool.QueryRow(ctx, `SELECT to_regclass($1)::text`, m.names.qMigr).Scan(&exists); err != nil {
		return nil, fmt.Errorf("outboxpg: list migrations of %s: %w", m.name(), err)
	}
	if !exists.Valid {
		return list, nil
	}
	rows, _ := m.pool.Query(ctx, `SELECT version, name, applied_at FROM `+m.names.qMigr+` ORDER BY version`)
	applied, err := pgx.CollectRows(rows, pgx.RowToStructByPos[migrationRow])
	if err != nil {
		return nil, fmt.Errorf("outboxpg: list migrations of %s: %w", m.name(), err)
	}
	for _, a := range applied {
		list = migrations.MarkApplied(list, a.Version, a.Name, a.AppliedAt.UTC())
	}
	return list, nil
}

// migrationRow is a row of the migrations table.
type migrationRow struct {
	Version   int
	Name      string
	AppliedAt time.Time
}

// SQL returns every migration's SQL for direction (up in version order, down
// in reverse), with the table's names filled in, for teams that apply
// migrations with their own tool. Up starts with CREATE SCHEMA IF NOT EXISTS
// unless the schema is "public". It leaves out the bookkeeping that Up and
// Down do in <table>_migrations. Any other direction returns "".
func (m *Migrator) SQL(direction Direction) string {
	if direction != DirectionUp && direction != DirectionDown {
		return ""
	}
	var b strings.Builder
	if direction == DirectionUp && m.names.schema != "public" {
		fmt.Fprintf(&b, "CREATE SCHEMA IF NOT EXISTS %s;\n\n", m.names.qSchema)
	}
	b.WriteString(migrations.Dump(embedded, direction, func(sql string) string { return substitute(sql, m.names) }))
	return b.String()
}

// To migrates up or down until version is the last applied one (0 drops
// everything), and returns the versions it applied or reverted in order.
func (m *Migrator) To(ctx context.Context, version int) ([]int, error) {
	if version < 0 || version > len(embedded) {
		return nil, fmt.Errorf("outboxpg: migrate %s to version %d: unknown version; this release knows versions 0 to %d", m.name(), version, len(embedded))
	}
	if err := m.needPool("migrate"); err != nil {
		return nil, err
	}
	return migrations.Walk(func() (int, bool, error) { return m.step(ctx, version) })
}

// Up applies every migration not applied yet and returns their versions.
func (m *Migrator) Up(ctx context.Context) ([]int, error) { return m.To(ctx, len(embedded)) }

func (m *Migrator) needPool(doing string) error {
	if m.pool == nil {
		return &outbox.ConfigError{Field: "outboxpg.NewMigrator pool", Value: "nil",
			Fix: "pass a pool from pgxpool.New(ctx, url) to " + doing + "; a Migrator without one can only print SQL"}
	}
	return nil
}

func (m *Migrator) name() string { return m.names.schema + "." + m.names.table }

// step applies or reverts one migration towards target, in a transaction that
// holds the migration lock, and reports which version it changed and whether
// it changed any.
func (m *Migrator) step(ctx context.Context, target int) (version int, changed bool, err error) {
	err = pgx.BeginFunc(ctx, m.pool, func(tx pgx.Tx) error {
		current, err := m.lockAndRead(ctx, tx)
		if err != nil {
			return err
		}
		switch {
		case current < target:
			mg := embedded[current]
			if _, err := tx.Exec(ctx, substitute(mg.Up, m.names)); err != nil {
				return fmt.Errorf("apply %s: %w", mg.File(DirectionUp), err)
			}
			if _, err := tx.Exec(ctx, `INSERT INTO `+m.names.qMigr+` (version, name) VALUES ($1, $2)`, mg.Version, mg.Name); err != nil {
				return fmt.Errorf("record %s: %w", mg.File(DirectionUp), err)
			}
			version, changed = mg.Version, true
		case current > target:
			mg := embedded[current-1]
			if _, err := tx.Exec(ctx, substitute(mg.Down, m.names)); err != nil {
				return fmt.Errorf("apply %s: %w", mg.File(DirectionDown), err)
			}
			if _, err := tx.Exec(ctx, `DELETE FROM `+m.names.qMigr+` WHERE version = $1`, mg.Version); err != nil {
				return fmt.Errorf("record %s: %w", mg.File(DirectionDown), err)
			}
			version, changed = mg.Version, true
		}
		return nil
	})
	if err != nil {
		return 0, false, fmt.Errorf("outboxpg: migrate %s to version %d: %w", m.name(), target, err)
	}
	return version, changed, nil
}

// current returns the last applied version.
func (m *Migrator) current(ctx context.Context) (current int, err error) {
	err = pgx.BeginFunc(ctx, m.pool, func(tx pgx.Tx) error {
		current, err = m.lockAndRead(ctx, tx)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("outboxpg: read migrations of %s: %w", m.name(), err)
	}
	return current, nil
}

// lockAndRead takes the migration lock, creates the schema and the
// bookkeeping table if needed, and returns the last applied version. It fails
// if the database records versions this release does not know, or a gap.
func (m *Migrator) lockAndRead(ctx context.Context, tx pgx.Tx) (int, error) {
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, m.names.migrateLockKey); err != nil {
		return 0, fmt.Errorf("take migration lock: %w", err)
	}
	// CREATE SCHEMA IF NOT EXISTS needs the CREATE privilege on the database
	// even when the schema exists, so it only runs when needed.
	var schemaExists bool
	if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)`, m.names.schema).Scan(&schemaExists); err != nil {
		return 0, fmt.Errorf("look for schema %s: %w", m.names.qSchema, err)
	}
	if !schemaExists {
		if _, err := tx.Exec(ctx, `CREATE SCHEMA IF NOT EXISTS `+m.names.qSchema); err != nil {
			return 0, fmt.Errorf("create schema: %w", err)
		}
	}
	if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+m.names.qMigr+` (
	version    integer     PRIMARY KEY,
	name       text        NOT NULL,
	applied_at timestamptz NOT NULL DEFAULT now()
)`); err != nil {
		return 0, fmt.Errorf("create migrations table: %w", err)
	}
	rows, _ := tx.Query(ctx, `SELECT version FROM `+m.names.qMigr+` ORDER BY version`)
	versions, err := pgx.CollectRows(rows, pgx.RowTo[int])
	if err != nil {
		return 0, fmt.Errorf("read migrations table: %w", err)
	}
	if err := migrations.CheckApplied(versions, len(embedded), "outboxpg", m.names.qMigr); err != nil {
		return 0, err
	}
	return len(versions), nil
}
