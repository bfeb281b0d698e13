// Package migrations loads the numbered, embedded SQL migrations of a store
// (NNN_name.up.sql and NNN_name.down.sql) and fills their identifier
// placeholders. Each store applies them in its own way; the file format, the
// status type and the SQL dump for other migration tools are shared here.
package migrations

import (
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Direction says which way a migration goes.
type Direction string

// The directions of a migration.
const (
	DirectionUp   Direction = "up"
	DirectionDown Direction = "down"
)

// Status says whether one migration is applied to a table.
type Status struct {
	// Applied reports whether the migration is recorded as applied.
	Applied bool
	// AppliedAt is when it was applied (zero if not applied).
	AppliedAt time.Time
	// Known is false for a version recorded in the database that this
	// release does not have: the table was migrated by a newer release.
	Known bool
	// Name is the migration's name, e.g. "create_outbox".
	Name string
	// Version is the migration's number, from 1. Every store numbers its
	// migrations alike: version 1 creates the same table in each.
	Version int
}

// Migration is one embedded migration; its SQL still has placeholders.
type Migration struct {
	Version  int
	Name     string
	Up, Down string
}

// File is the migration's file name in direction d.
func (m Migration) File(d Direction) string {
	return fmt.Sprintf("%03d_%s.%s.sql", m.Version, m.Name, d)
}

// SQL is the migration's SQL in direction d, placeholders unfilled.
func (m Migration) SQL(d Direction) string {
	if d == DirectionDown {
		return m.Down
	}
	return m.Up
}

var fileRE = regexp.MustCompile(`^(\d{3})_([a-z0-9_]+)\.(up|down)\.sql$`)

// MustLoad is Load for the migrations a package embeds: a malformed set is a
// bug of the release, so it panics, naming pkg.
func MustLoad(fsys fs.FS, pkg string) []Migration {
	ms, err := Load(fsys)
	if err != nil {
		panic(pkg + ": embedded migrations: " + err.Error())
	}
	return ms
}

// Load reads migrations/*.sql from fsys and returns the migrations in
// version order. Versions must run from 1 without gaps, each with an up and a
// down file of the same name.
func Load(fsys fs.FS) ([]Migration, error) {
	paths, err := fs.Glob(fsys, "migrations/*.sql")
	if err != nil {
		return nil, err
	}
	byVersion := map[int]*Migration{}
	for _, p := range paths {
		base := path.Base(p)
		sm := fileRE.FindStringSubmatch(base)
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
			m = &Migration{Version: v, Name: sm[2]}
			byVersion[v] = m
		}
		if m.Name != sm[2] {
			return nil, fmt.Errorf("version %d has two names, %s and %s", v, m.Name, sm[2])
		}
		if sm[3] == "up" {
			m.Up = string(b)
		} else {
			m.Down = string(b)
		}
	}
	ms := make([]Migration, 0, len(byVersion))
	for v := 1; v <= len(byVersion); v++ {
		m := byVersion[v]
		switch {
		case m == nil:
			return nil, fmt.Errorf("version %d is missing; versions must run from 1 without gaps", v)
		case m.Up == "" || m.Down == "":
			return nil, fmt.Errorf("version %d needs both an up and a down file", v)
		}
		ms = append(ms, *m)
	}
	return ms, nil
}

var placeholderRE = regexp.MustCompile(`\{\{([a-z]+|name:[a-z_]+)\}\}`)

// Substitute fills the placeholders of sql: {{key}} with values[key] (quoted
// identifiers such as the table's), and {{name:x}} with quote(prefix + "_" +
// x), the name of an index or constraint of the table. Only identifiers that
// the store validated may reach values, prefix and quote.
func Substitute(sql string, values map[string]string, prefix string, quote func(string) string) string {
	return placeholderRE.ReplaceAllStringFunc(sql, func(ph string) string {
		key := ph[2 : len(ph)-2]
		if name, ok := strings.CutPrefix(key, "name:"); ok {
			return quote(prefix + "_" + name)
		}
		if v, ok := values[key]; ok {
			return v
		}
		return ph
	})
}

// Dump returns the SQL of every migration in direction d (up in version
// order, down in reverse), each after a comment naming its file, filled by
// fill: for teams that apply migrations with their own tool.
func Dump(ms []Migration, d Direction, fill func(string) string) string {
	order := slices.Clone(ms)
	if d == DirectionDown {
		slices.Reverse(order)
	}
	var b strings.Builder
	for _, m := range order {
		fmt.Fprintf(&b, "-- %s\n%s\n", m.File(d), strings.TrimSpace(fill(m.SQL(d))))
	}
	return b.String()
}

// Statuses returns the status of every migration in ms as not applied, in
// version order: a Migrator's List starts from it and marks what the
// database records with MarkApplied.
func Statuses(ms []Migration) []Status {
	list := make([]Status, len(ms))
	for i, m := range ms {
		list[i] = Status{Known: true, Name: m.Name, Version: m.Version}
	}
	return list
}

// MarkApplied marks version as applied at at in list, which Statuses made,
// and returns list. A version that list does not hold (the table was
// migrated by a newer release) is appended as unknown, with the name the
// database recorded.
func MarkApplied(list []Status, version int, name string, at time.Time) []Status {
	if version >= 1 && version <= len(list) {
		list[version-1].Applied = true
		list[version-1].AppliedAt = at
		return list
	}
	return append(list, Status{Applied: true, AppliedAt: at, Name: name, Version: version})
}

// CheckApplied checks the versions a migrations table records, in order,
// before a Migrator adds or removes one: they must run from 1 without gaps
// and stay within the known versions 1 to known. pkg names the store and
// table the migrations table in the errors.
func CheckApplied(versions []int, known int, pkg, table string) error {
	for i, v := range versions {
		if v > known {
			return fmt.Errorf("the database records migration version %d, which this release of %s does not know (it knows 1 to %d); upgrade %s", v, pkg, known, pkg)
		}
		if v != i+1 {
			return fmt.Errorf("the migrations table %s records versions %v; expected 1 to %d without gaps", table, versions, len(versions))
		}
	}
	return nil
}

// Walk calls step, which applies or reverts one migration (each in a
// transaction of its own), until step changes nothing or fails, and returns
// the versions it changed, in order; on failure, those changed before it.
func Walk(step func() (version int, changed bool, err error)) ([]int, error) {
	var done []int
	for {
		v, changed, err := step()
		if err != nil {
			return done, err
		}
		if !changed {
			return done, nil
		}
		done = append(done, v)
	}
}
