package outboxmysql

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/migrations"
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

// MigrateLockTimeout is how long a Migrator waits for another one (in any
// process) to finish migrating the same table before it gives up.
const MigrateLockTimeout = 60 * time.Second

// embedded are the package's migrations, versions 1 to len(embedded).
var embedded = migrations.MustLoad(migrationFiles, "outboxmysql")

// substitute fills a migration's placeholders with quoted identifiers built
// from validated names.
func substitute(sql string, s settings) string {
	return migrations.Substitute(sql, map[string]string{"table": s.qTable,
		"relays": s.side(sideRelays), "attempts": s.side(sideAttempts), "paused": s.side(sidePaused), "minutes": s.side(sideMinutes)}, s.table, quote)
}

// statementsOf splits a migration's SQL into its statements, for a *sql.DB
// that may not allow several in one Exec (go-sql-driver/mysql's
// multiStatements is off by default). The migrations keep to a rule that
// makes this simple: a statement ends with a semicolon at the end of a line,
// and comments are whole lines starting with "--".
func statementsOf(sql string) []string {
	var (
		stmts []string
		cur   strings.Builder
	)
	for line := range strings.Lines(sql) {
		if strings.HasPrefix(strings.TrimSpace(line), "--") {
			continue
		}
		cur.WriteString(line)
		if strings.HasSuffix(strings.TrimSpace(line), ";") {
			if s := strings.TrimSuffix(strings.TrimSpace(cur.String()), ";"); s != "" {
				stmts = append(stmts, s)
			}
			cur.Reset()
		}
	}
	if s := strings.TrimSpace(cur.String()); s != "" {
		stmts = append(stmts, s)
	}
	return stmts
}

// Migrator creates, upgrades and drops an outbox table with the embedded,
// numbered migrations, recording them in the table <table>_migrations of the
// same database.
//
// MySQL commits every DDL statement by itself, so a migration cannot run
// in a transaction: instead, concurrent migrators (several processes
// starting at once) take turns under a named lock of the server
// (GET_LOCK), held on one connection for the whole run, and each sees what
// the one before it applied. Each migration that creates or alters the
// table is one statement, so it is applied whole or not at all; its
// bookkeeping row follows it.
type Migrator struct {
	db  *sql.DB
	set settings
}

// NewMigrator returns a Migrator for the table opts names, on db. It
// validates opts and does not touch the database. db may be nil when only
// SQL is needed; the other methods then return an error.
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
		return nil, fmt.Errorf("outboxmysql: migrate %s down: steps %d must be positive", m.set.table, steps)
	}
	if err := m.needDB("migrate down"); err != nil {
		return nil, err
	}
	var done []int
	err := m.locked(ctx, func(c *sql.Conn) error {
		current, err := m.prepare(ctx, c)
		if err != nil {
			return err
		}
		if steps > current {
			return fmt.Errorf("only %d migration(s) applied; going below version 0 is not possible", current)
		}
		done, err = m.walk(ctx, c, current-steps)
		return err
	})
	if err != nil {
		return done, fmt.Errorf("outboxmysql: migrate %s down %d step(s): %w", m.set.table, steps, err)
	}
	return done, nil
}

// List returns every known migration with whether it is applied, in version
// order, followed by any versions recorded in the database that this release
// does not know. It only reads.
func (m *Migrator) List(ctx context.Context) ([]MigrationStatus, error) {
	list := migrations.Statuses(embedded)
	if err := m.needDB("list migrations"); err != nil {
		return nil, err
	}
	rows, err := m.db.QueryContext(ctx, `SELECT version, name, applied_at FROM `+m.set.qMigr+` ORDER BY version`)
	if isNoSuchTable(err) {
		return list, nil
	}
	if err != nil {
		return nil, fmt.Errorf("outboxmysql: list migrations of %s: %w", m.set.table, err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			version int
			name    string
			at      utcTime
		)
		if err := rows.Scan(&version, &name, &at); err != nil {
			return nil, fmt.Errorf("outboxmysql: list migrations of %s: %w", m.set.table, err)
		}
		list = migrations.MarkApplied(list, version, name, at.Time)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("outboxmysql: list migrations of %s: %w", m.set.table, err)
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
	return migrations.Dump(embedded, direction, func(sql string) string { return substitute(sql, m.set) })
}

// To migrates up or down until version is the last applied one (0 drops
// everything), and returns the versions it applied or reverted in order.
func (m *Migrator) To(ctx context.Context, version int) ([]int, error) {
	if version < 0 || version > len(embedded) {
		return nil, fmt.Errorf("outboxmysql: migrate %s to version %d: unknown version; this release knows versions 0 to %d", m.set.table, version, len(embedded))
	}
	if err := m.needDB("migrate"); err != nil {
		return nil, err
	}
	var done []int
	err := m.locked(ctx, func(c *sql.Conn) (err error) {
		done, err = m.walk(ctx, c, version)
		return err
	})
	if err != nil {
		return done, fmt.Errorf("outboxmysql: migrate %s to version %d: %w", m.set.table, version, err)
	}
	return done, nil
}

// Up applies every migration not applied yet and returns their versions.
func (m *Migrator) Up(ctx context.Context) ([]int, error) { return m.To(ctx, len(embedded)) }

func (m *Migrator) needDB(doing string) error {
	if m.db == nil {
		return &outbox.ConfigError{Field: "outboxmysql.NewMigrator db", Value: "nil",
			Fix: "pass the *sql.DB of the database that holds the table to " + doing + "; a Migrator without one can only print SQL"}
	}
	return nil
}

// locked runs fn on one connection while it holds the table's migration
// lock. The lock belongs to the connection's session: the server releases
// it if the connection dies, so a crashed migrator never leaves it held.
func (m *Migrator) locked(ctx context.Context, fn func(c *sql.Conn) error) error {
	c, err := m.db.Conn(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	name := lockName("migrate")
	var got sql.NullInt64
	if err := c.QueryRowContext(ctx, `SELECT GET_LOCK(`+name+`, ?)`, m.set.table, int(MigrateLockTimeout/time.Second)).Scan(&got); err != nil {
		return fmt.Errorf("take the migration lock: %w", err)
	}
	if got.Int64 != 1 {
		return fmt.Errorf("another migrator held the migration lock of %s for %v; try again once it is done", m.set.table, MigrateLockTimeout)
	}
	defer func() {
		// A connection whose context ended cannot release the lock; closing
		// it (above) ends its session, which does.
		_, _ = c.ExecContext(context.WithoutCancel(ctx), `DO RELEASE_LOCK(`+name+`)`, m.set.table)
	}()
	return fn(c)
}

// lockName is the SQL expression of the name of the server-wide lock for
// what (migrate, purge) on table, whose one parameter is the table: the
// database and table, hashed to stay within MySQL's 64 characters for a
// lock name.
func lockName(what string) string {
	return `CONCAT('outbox_` + what + `_', SHA1(CONCAT(DATABASE(), '.', ?)))`
}

// walk applies or reverts migrations one at a time towards target, and
// returns the versions it changed, in order.
func (m *Migrator) walk(ctx context.Context, c *sql.Conn, target int) ([]int, error) {
	return migrations.Walk(func() (version int, changed bool, err error) {
		current, err := m.prepare(ctx, c)
		if err != nil {
			return 0, false, err
		}
		switch {
		case current < target:
			mg := embedded[current]
			if err := execAll(ctx, c, substitute(mg.Up, m.set)); err != nil {
				return 0, false, fmt.Errorf("apply %s: %w", mg.File(DirectionUp), err)
			}
			if _, err := c.ExecContext(ctx, `INSERT INTO `+m.set.qMigr+` (version, name, applied_at) VALUES (?, ?, UTC_TIMESTAMP(6))`,
				mg.Version, mg.Name); err != nil {
				return 0, false, fmt.Errorf("record %s: %w", mg.File(DirectionUp), err)
			}
			return mg.Version, true, nil
		case current > target:
			mg := embedded[current-1]
			if err := execAll(ctx, c, substitute(mg.Down, m.set)); err != nil {
				return 0, false, fmt.Errorf("apply %s: %w", mg.File(DirectionDown), err)
			}
			if _, err := c.ExecContext(ctx, `DELETE FROM `+m.set.qMigr+` WHERE version = ?`, mg.Version); err != nil {
				return 0, false, fmt.Errorf("record %s: %w", mg.File(DirectionDown), err)
			}
			return mg.Version, true, nil
		}
		return 0, false, nil
	})
}

func execAll(ctx context.Context, c *sql.Conn, sql string) error {
	for _, stmt := range statementsOf(sql) {
		if _, err := c.ExecContext(ctx, stmt); err != nil {
			return err
		}
	}
	return nil
}

// prepare creates the bookkeeping table if needed and returns the last
// applied version. It runs under the migration lock. It fails if the
// database records versions this release does not know, or a gap.
func (m *Migrator) prepare(ctx context.Context, c *sql.Conn) (int, error) {
	if _, err := c.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS `+m.set.qMigr+` (
	version    INT          NOT NULL PRIMARY KEY,
	name       VARCHAR(255) NOT NULL,
	applied_at DATETIME(6)  NOT NULL
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4`); err != nil {
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
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return 0, fmt.Errorf("read migrations table: %w", err)
	}
	if err := migrations.CheckApplied(versions, len(embedded), "outboxmysql", m.set.qMigr); err != nil {
		return 0, err
	}
	return len(versions), nil
}
