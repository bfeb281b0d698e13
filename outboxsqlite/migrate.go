package outboxsqlite

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"strings"
	"time"

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
var embedded = migrations.MustLoad(migrationFiles, "outboxsqlite")

// substitute fills a migration's placeholders with quoted identifiers built
// from validated names. Index names carry the table's name because SQLite's
// index names are global to the database file.
func substitute(sql string, s settings) string {
	return migrations.Substitute(sql, map[string]string{"table": s.qTable, "relays": s.qRelays, "attempts": s.qAttempts, "paused": s.qPaused, "minutes": s.qMinutes}, s.table, sqlident.Quote)
}

// Migrator creates, upgrades and drops an outbox table with the embedded,
// numbered migrations, recording them in the table <table>_migrations of the
// same database file. Each migration runs in its own BEGIN IMMEDIATE
// transaction together with its bookkeeping row: SQLite lets one writer at a
// time hold that lock, so concurrent migrators (several processes starting
// at once) take turns, and each sees what the one before it applied.
type Migrator struct {
	db  *sql.DB
	set settings
}

// NewMigrator returns a Migrator for the table opts names, on db (usually
// Store.DB of a Store from Open). It validates opts and does not touch the
// database. db may be nil when only SQL is needed; the other methods then
// return an error.
func NewMigrator(db *sql.DB, opts Options) (*Migrator, error) {
	s, err := opts.resolve()
	if err != nil {
		return nil, err
	}
	return &Migrator{db: db, set: s}, nil
}

// Latest is the highest migration version this release knows.
func (m *Migrator) Latest() int { return len(embedded) }

// Down reverts the last steps applied migrations, newest first, and returns
// the versions it reverted. Reverting the first migration drops the table and
// every message in it.
func (m *Migrator) Down(ctx context.Context, steps int) ([]int, error) {
	if steps <= 0 {
		return nil, fmt.Errorf("outboxsqlite: migrate %s down: steps %d must be positive", m.set.table, steps)
	}
	if err := m.needDB("migrate down"); err != nil {
		return nil, err
	}
	var current int
	err := immediateTx(ctx, m.db, m.set.busyTimeout, func(ctx context.Context, c *sql.Conn) (err error) {
		current, err = m.prepare(ctx, c)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("outboxsqlite: read migrations of %s: %w", m.set.table, explain(err, ""))
	}
	if steps > current {
		return nil, fmt.Errorf("outboxsqlite: migrate %s down %d step(s): only %d migration(s) applied; going below version 0 is not possible", m.set.table, steps, current)
	}
	return m.To(ctx, current-steps)
}

// List returns every known migration with whether it is applied, in version
// order, followed by any versions recorded in the database that this release
// does not know. It only reads.
func (m *Migrator) List(ctx context.Context) ([]MigrationStatus, error) {
	list := migrations.Statuses(embedded)
	if err := m.needDB("list migrations"); err != nil {
		return nil, err
	}
	var exists bool
	err := m.db.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM sqlite_schema WHERE type = 'table' AND name = ?)`, m.set.table+"_migrations").Scan(&exists)
	if err != nil {
		return nil, fmt.Errorf("outboxsqlite: list migrations of %s: %w", m.set.table, explain(err, ""))
	}
	if !exists {
		return list, nil
	}
	rows, err := m.db.QueryContext(ctx, `SELECT version, name, applied_at FROM `+m.set.qMigr+` ORDER BY version`)
	if err != nil {
		return nil, fmt.Errorf("outboxsqlite: list migrations of %s: %w", m.set.table, explain(err, ""))
	}
	defer rows.Close()
	for rows.Next() {
		var (
			version int
			name    string
			at      int64
		)
		if err := rows.Scan(&version, &name, &at); err != nil {
			return nil, fmt.Errorf("outboxsqlite: list migrations of %s: %w", m.set.table, err)
		}
		list = migrations.MarkApplied(list, version, name, time.UnixMicro(at).UTC())
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("outboxsqlite: list migrations of %s: %w", m.set.table, err)
	}
	return list, nil
}

// SQL returns every migration's SQL for direction (up in version order, down
// in reverse), with the table's names filled in, for teams that apply
// migrations with their own tool. It leaves out the bookkeeping that Up and
// Down do in <table>_migrations. Any other direction returns "".
func (m *Migrator) SQL(direction Direction) string {
	if direction != DirectionUp && direction != DirectionDown {
		return ""
	}
	var b strings.Builder
	b.WriteString(migrations.Dump(embedded, direction, func(sql string) string { return substitute(sql, m.set) }))
	return b.String()
}

// To migrates up or down until version is the last applied one (0 drops
// everything), and returns the versions it applied or reverted in order.
func (m *Migrator) To(ctx context.Context, version int) ([]int, error) {
	if version < 0 || version > len(embedded) {
		return nil, fmt.Errorf("outboxsqlite: migrate %s to version %d: unknown version; this release knows versions 0 to %d", m.set.table, version, len(embedded))
	}
	if err := m.needDB("migrate"); err != nil {
		return nil, err
	}
	return migrations.Walk(func() (int, bool, error) { return m.step(ctx, version) })
}

// Up applies every migration not applied yet and returns their versions.
func (m *Migrator) Up(ctx context.Context) ([]int, error) { return m.To(ctx, len(embedded)) }

func (m *Migrator) needDB(doing string) error {
	if m.db == nil {
		return &outbox.ConfigError{Field: "outboxsqlite.NewMigrator db", Value: "nil",
			Fix: "pass the *sql.DB of a Store (Store.DB) to " + doing + "; a Migrator without one can only print SQL"}
	}
	return nil
}

// step applies or reverts one migration towards target, in one write
// transaction, and reports which version it changed and whether it changed
// any.
func (m *Migrator) step(ctx context.Context, target int) (version int, changed bool, err error) {
	err = immediateTx(ctx, m.db, m.set.busyTimeout, func(ctx context.Context, c *sql.Conn) error {
		current, err := m.prepare(ctx, c)
		if err != nil {
			return err
		}
		switch {
		case current < target:
			mg := embedded[current]
			if _, err := c.ExecContext(ctx, substitute(mg.Up, m.set)); err != nil {
				return fmt.Errorf("apply %s: %w", mg.File(DirectionUp), err)
			}
			if _, err := c.ExecContext(ctx, `INSERT INTO `+m.set.qMigr+` (version, name, applied_at) VALUES (?, ?, ?)`,
				mg.Version, mg.Name, time.Now().UnixMicro()); err != nil {
				return fmt.Errorf("record %s: %w", mg.File(DirectionUp), err)
			}
			version, changed = mg.Version, true
		case current > target:
			mg := embedded[current-1]
			if _, err := c.ExecContext(ctx, substitute(mg.Down, m.set)); err != nil {
				return fmt.Errorf("apply %s: %w", mg.File(DirectionDown), err)
			}
			if _, err := c.ExecContext(ctx, `DELETE FROM `+m.set.qMigr+` WHERE version = ?`, mg.Version); err != nil {
				return fmt.Errorf("record %s: %w", mg.File(DirectionDown), err)
			}
			version, changed = mg.Version, true
		}
		return nil
	})
	if err != nil {
		return 0, false, fmt.Errorf("outboxsqlite: migrate %s to version %d: %w", m.set.table, target, explain(err, ""))
	}
	return version, changed, nil
}

// prepare creates the bookkeeping table if needed and returns the last
// applied version. It runs inside the write transaction, which is the
// migration lock. It fails if the database records versions this release
// does not know, or a gap.
func (m *Migrator) prepare(ctx context.Context, c *sql.Conn) (int, error) {
	if _, err := c.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS `+m.set.qMigr+` (
	version    INTEGER NOT NULL PRIMARY KEY,
	name       TEXT    NOT NULL,
	applied_at INTEGER NOT NULL
) STRICT`); err != nil {
		return 0, fmt.Errorf("create migrations table: %w", err)
	}
	rows, err := c.QueryContext(ctx, `SELECT version FROM `+m.set.qMigr+` ORDER BY version`)
	if err != nil {
		return 0, fmt.Errorf("read migrations table: %w", err)
	}
	defer rows.Close()
	var versions []int
	for rows.Next() {
		var v int
		if err := rows.Scan(&v); err != nil {
			return 0, fmt.Errorf("read migrations table: %w", err)
		}
		versions = append(versions, v)
	}
	if err := rows.Err(); err != nil {
		return 0, fmt.Errorf("read migrations table: %w", err)
	}
	if err := migrations.CheckApplied(versions, len(embedded), "outboxsqlite", m.set.qMigr); err != nil {
		return 0, err
	}
	return len(versions), nil
}
