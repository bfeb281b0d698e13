package outboxsqlite

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"io/fs"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-outbox/outbox"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// Direction says which way a migration goes.
type Direction string

// The directions of a migration.
const (
	DirectionUp   Direction = "up"
	DirectionDown Direction = "down"
)

// MigrationStatus says whether one migration is applied to a table.
type MigrationStatus struct {
	// Applied reports whether the migration is recorded as applied.
	Applied bool
	// AppliedAt is when it was applied (zero if not applied).
	AppliedAt time.Time
	// Known is false for a version recorded in the database that this version
	// of outboxsqlite does not have: the table was migrated by a newer release.
	Known bool
	// Name is the migration's name, e.g. "create_outbox".
	Name string
	// Version is the migration's number, from 1. The numbers are the same as
	// outboxpg's: version 1 creates the same table in both stores.
	Version int
}

// migration is one embedded migration; its SQL still has placeholders.
type migration struct {
	version  int
	name     string
	up, down string
}

func (m migration) file(d Direction) string {
	return fmt.Sprintf("%03d_%s.%s.sql", m.version, m.name, d)
}

// migrations are the embedded migrations, versions 1 to len(migrations).
var migrations = mustLoadMigrations(migrationFiles)

var migrationFileRE = regexp.MustCompile(`^(\d{3})_([a-z0-9_]+)\.(up|down)\.sql$`)

func mustLoadMigrations(fsys fs.FS) []migration {
	ms, err := loadMigrations(fsys)
	if err != nil {
		panic("outboxsqlite: embedded migrations: " + err.Error())
	}
	return ms
}

func loadMigrations(fsys fs.FS) ([]migration, error) {
	paths, err := fs.Glob(fsys, "migrations/*.sql")
	if err != nil {
		return nil, err
	}
	byVersion := map[int]*migration{}
	for _, p := range paths {
		base := p[strings.LastIndex(p, "/")+1:]
		sm := migrationFileRE.FindStringSubmatch(base)
		if sm == nil {
			return nil, fmt.Errorf("file %s is not named NNN_name.up.sql or NNN_name.down.sql", base)
		}
		v, _ := strconv.Atoi(sm[1])
		b, err := fs.ReadFile(fsys, p)
		if err != nil {
			return nil, err
		}
		m := byVersion[v]
		if m == nil {
			m = &migration{version: v, name: sm[2]}
			byVersion[v] = m
		}
		if m.name != sm[2] {
			return nil, fmt.Errorf("version %d has two names, %s and %s", v, m.name, sm[2])
		}
		if sm[3] == "up" {
			m.up = string(b)
		} else {
			m.down = string(b)
		}
	}
	ms := make([]migration, 0, len(byVersion))
	for v := 1; v <= len(byVersion); v++ {
		m := byVersion[v]
		switch {
		case m == nil:
			return nil, fmt.Errorf("version %d is missing; versions must run from 1 without gaps", v)
		case m.up == "" || m.down == "":
			return nil, fmt.Errorf("version %d needs both an up and a down file", v)
		}
		ms = append(ms, *m)
	}
	return ms, nil
}

var placeholderRE = regexp.MustCompile(`\{\{(table|name:[a-z_]+)\}\}`)

// substitute replaces the placeholders of a migration with quoted identifiers
// built from validated names. Index names carry the table's name because
// SQLite's index names are global to the database file.
func substitute(sql string, s settings) string {
	return placeholderRE.ReplaceAllStringFunc(sql, func(ph string) string {
		switch key := ph[2 : len(ph)-2]; key {
		case "table":
			return s.qTable
		default:
			return quoteIdent(s.table + "_" + strings.TrimPrefix(key, "name:"))
		}
	})
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
func (m *Migrator) Latest() int { return len(migrations) }

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
	list := make([]MigrationStatus, len(migrations))
	for i, mg := range migrations {
		list[i] = MigrationStatus{Known: true, Name: mg.name, Version: mg.version}
	}
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
		appliedAt := time.UnixMicro(at).UTC()
		if version >= 1 && version <= len(list) {
			list[version-1].Applied = true
			list[version-1].AppliedAt = appliedAt
			continue
		}
		list = append(list, MigrationStatus{Applied: true, AppliedAt: appliedAt, Name: name, Version: version})
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
	order := slices.Clone(migrations)
	if direction == DirectionDown {
		slices.Reverse(order)
	}
	for _, mg := range order {
		sql := mg.up
		if direction == DirectionDown {
			sql = mg.down
		}
		fmt.Fprintf(&b, "-- %s\n%s\n", mg.file(direction), strings.TrimSpace(substitute(sql, m.set)))
	}
	return b.String()
}

// To migrates up or down until version is the last applied one (0 drops
// everything), and returns the versions it applied or reverted in order.
func (m *Migrator) To(ctx context.Context, version int) ([]int, error) {
	if version < 0 || version > len(migrations) {
		return nil, fmt.Errorf("outboxsqlite: migrate %s to version %d: unknown version; this release knows versions 0 to %d", m.set.table, version, len(migrations))
	}
	if err := m.needDB("migrate"); err != nil {
		return nil, err
	}
	var done []int
	for {
		v, more, err := m.step(ctx, version)
		if err != nil {
			return done, err
		}
		if !more {
			return done, nil
		}
		done = append(done, v)
	}
}

// Up applies every migration not applied yet and returns their versions.
func (m *Migrator) Up(ctx context.Context) ([]int, error) { return m.To(ctx, len(migrations)) }

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
			mg := migrations[current]
			if _, err := c.ExecContext(ctx, substitute(mg.up, m.set)); err != nil {
				return fmt.Errorf("apply %s: %w", mg.file(DirectionUp), err)
			}
			if _, err := c.ExecContext(ctx, `INSERT INTO `+m.set.qMigr+` (version, name, applied_at) VALUES (?, ?, ?)`,
				mg.version, mg.name, time.Now().UnixMicro()); err != nil {
				return fmt.Errorf("record %s: %w", mg.file(DirectionUp), err)
			}
			version, changed = mg.version, true
		case current > target:
			mg := migrations[current-1]
			if _, err := c.ExecContext(ctx, substitute(mg.down, m.set)); err != nil {
				return fmt.Errorf("apply %s: %w", mg.file(DirectionDown), err)
			}
			if _, err := c.ExecContext(ctx, `DELETE FROM `+m.set.qMigr+` WHERE version = ?`, mg.version); err != nil {
				return fmt.Errorf("record %s: %w", mg.file(DirectionDown), err)
			}
			version, changed = mg.version, true
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
	for i, v := range versions {
		if v > len(migrations) {
			return 0, fmt.Errorf("the database records migration version %d, which this release of outboxsqlite does not know (it knows 1 to %d); upgrade outboxsqlite", v, len(migrations))
		}
		if v != i+1 {
			return 0, fmt.Errorf("the migrations table %s records versions %v; expected 1 to %d without gaps", m.set.qMigr, versions, len(versions))
		}
	}
	return len(versions), nil
}
