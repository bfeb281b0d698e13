package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/go-outbox/outbox/outboxdriver"
	"github.com/go-outbox/outbox/outboxpg"
)

// consoleTable is an outbox table the console serves: its store, or why it
// cannot show it.
type consoleTable struct {
	admin    outboxdriver.Admin // nil when noOutbox says why
	name     string
	noOutbox string
}

// consoleTables are the tables the console opened, and the inbox table
// beside them.
type consoleTables struct {
	tables []consoleTable
	inbox  inboxTable // nil without --inbox-table
	close  func()
}

// openConsoleTables opens the outbox tables the console serves: those
// --table names (the default table without it), or with allTables every
// outbox table of --schema or of the file, or those the --tables pattern
// matches (PostgreSQL), and the inbox table named
// inboxName beside them. A table that is missing or not migrated is served
// with pages that say so, so that a consumer's database, which has an inbox
// table and no outbox table, can be watched; with no outbox table and no
// inbox table to show, it refuses.
func (g *globalFlags) openConsoleTables(ctx context.Context, names []string, allTables bool, pattern, inboxName string) (_ *consoleTables, err error) {
	raw, err := g.resolveURL()
	if err != nil {
		return nil, err
	}
	var patternSchemas, patternTable string
	if pattern != "" {
		if patternSchemas, patternTable, err = tablesPattern(pattern); err != nil {
			return nil, err
		}
		if scheme := urlScheme(raw); scheme != "postgres" && scheme != "postgresql" {
			return nil, usagef("--tables needs a PostgreSQL database URL (postgres://...); for SQLite or MySQL give --table, repeated, or --all-tables")
		}
		if g.schema != "" || g.table != "" {
			return nil, usagef("--tables %q names the schemas and the table: leave out --schema and --table", pattern)
		}
	}
	switch {
	case allTables && len(names) > 0, pattern != "" && (allTables || len(names) > 0):
		return nil, usagef("give one of --table, --all-tables and --tables")
	case len(names) == 0:
		names = []string{g.table}
	}
	if urlScheme(raw) == "sqlite" {
		for _, n := range names {
			if strings.Contains(n, ".") {
				return nil, usagef("--table %s: SQLite tables have no schema; name the table alone", n)
			}
		}
	}
	open, list, closeAll, err := g.consoleOpener(ctx, raw)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			closeAll()
		}
	}()
	if pattern != "" {
		if names, err = list(patternSchemas, patternTable); err != nil {
			return nil, fmt.Errorf("--tables %s: list the outbox tables: %w", pattern, err)
		}
		if len(names) == 0 {
			return nil, usagef("--tables %s: no schema matching it has an outbox table %s; check the pattern, or create one with `outbox migrate up`", pattern, patternTable)
		}
	}
	if allTables {
		if names, err = list("", ""); err != nil {
			return nil, fmt.Errorf("--all-tables: list the outbox tables: %w", err)
		}
		if len(names) == 0 {
			where := "the file"
			if urlScheme(raw) != "sqlite" {
				where = "schema " + cmp.Or(g.schema, outboxpg.SchemaDefault)
			}
			return nil, usagef("--all-tables: %s has no outbox table (none has its TABLE_migrations table beside it); create one with `outbox migrate up`, or name the tables with --table", where)
		}
	}
	out := &consoleTables{close: closeAll}
	seen := map[string]bool{}
	var first *backend
	for _, n := range names {
		b, err := open(n)
		if err != nil {
			return nil, err
		}
		name := b.store.Name()
		if seen[name] {
			return nil, usagef("--table %s: the table %s is given twice; give each table once", n, name)
		}
		seen[name] = true
		if first == nil {
			first = b
		}
		t := consoleTable{admin: b.admin, name: name}
		if checker, ok := b.store.(outboxdriver.SchemaChecker); ok {
			if err := checker.CheckSchema(ctx); errors.Is(err, outboxdriver.ErrNotMigrated) {
				t.admin, t.noOutbox = nil, noOutboxText(err)
			} else if err != nil {
				return nil, err
			}
		}
		out.tables = append(out.tables, t)
	}
	if inboxName != "" {
		if out.inbox, err = first.inbox(ctx, inboxName); err != nil {
			return nil, err
		}
	}
	for _, t := range out.tables {
		if t.noOutbox == "" {
			return out, nil
		}
	}
	// No outbox table: the inbox is what there is to see, if it is there.
	problem := out.tables[0].noOutbox
	if out.inbox == nil {
		return nil, fmt.Errorf("%s; and no inbox table to show instead (--inbox-table \"\")", problem)
	}
	if _, err := out.inbox.ConsumerStats(ctx); err != nil {
		return nil, fmt.Errorf("%s; and the inbox table %s cannot be read either (%w): check --database-url and --schema, or run `outbox migrate up` or `outbox inbox migrate`", problem, out.inbox.Name(), err)
	}
	return out, nil
}

// noOutboxText is what the outbox pages say of a table that is missing or
// not migrated (err, wrapping outboxdriver.ErrNotMigrated).
func noOutboxText(err error) string {
	return fmt.Sprintf("no outbox table to show here (%v). The inbox pages work without one. "+
		"Create or update the outbox table with `outbox migrate up` (with the same --schema and --table), "+
		"or start the console with --table naming the outbox table you meant", err)
}

// consoleOpener returns how to open the table named (TABLE, or on
// PostgreSQL SCHEMA.TABLE) in the database raw names, the tables of
// PostgreSQL sharing one pool; how to list the outbox tables of --schema or
// of the file, for --all-tables, or on PostgreSQL those named table in the
// schemas the pattern schemas matches, for --tables; and how to close them
// all.
func (g *globalFlags) consoleOpener(ctx context.Context, raw string) (open func(name string) (*backend, error), list func(schemas, table string) ([]string, error), closeAll func(), err error) {
	var closers []func()
	closeAll = func() {
		for _, c := range closers {
			c()
		}
	}
	if scheme := urlScheme(raw); scheme == "postgres" || scheme == "postgresql" {
		pool, err := connectPostgres(ctx, raw, storeMode{})
		if err != nil {
			return nil, nil, nil, err
		}
		closers = append(closers, pool.Close)
		open = func(name string) (*backend, error) {
			t := *g
			if schema, table, ok := strings.Cut(name, "."); ok {
				t.schema, t.table = schema, table
			} else {
				t.table = name
			}
			return t.postgresBackend(pool, storeMode{})
		}
		list = func(schemas, table string) ([]string, error) {
			if schemas != "" {
				return matchingTables(ctx, pool, schemas, table)
			}
			rows, err := pool.Query(ctx, `SELECT t.relname FROM pg_class t JOIN pg_namespace n ON n.oid = t.relnamespace
WHERE n.nspname = $1 AND t.relkind = 'r'
  AND EXISTS (SELECT FROM pg_class m WHERE m.relnamespace = t.relnamespace AND m.relkind = 'r' AND m.relname = t.relname || '_migrations')
ORDER BY t.relname`, cmp.Or(g.schema, outboxpg.SchemaDefault))
			if err != nil {
				return nil, err
			}
			return pgx.CollectRows(rows, pgx.RowTo[string])
		}
		return open, list, closeAll, nil
	}
	open = func(name string) (*backend, error) {
		t := *g
		t.table = name
		b, err := t.open(ctx, storeMode{})
		if err == nil {
			closers = append(closers, b.close)
		}
		return b, err
	}
	list = func(string, string) ([]string, error) {
		b, err := open(g.table)
		if err != nil {
			return nil, err
		}
		s, err := b.store.(*sqliteDB).get(ctx)
		if err != nil {
			return nil, err
		}
		rows, err := s.DB().QueryContext(ctx, `SELECT t.name FROM sqlite_schema t WHERE t.type = 'table'
  AND EXISTS (SELECT 1 FROM sqlite_schema m WHERE m.type = 'table' AND m.name = t.name || '_migrations')
ORDER BY t.name`)
		if err != nil {
			return nil, err
		}
		defer rows.Close()
		var names []string
		for rows.Next() {
			var n string
			if err := rows.Scan(&n); err != nil {
				return nil, err
			}
			names = append(names, n)
		}
		return names, rows.Err()
	}
	return open, list, closeAll, nil
}

// consoleSet is the console of several tables: each table's pages under
// its base, /t/SCHEMA.TABLE/, and an index of them at /.
type consoleSet struct {
	tables []*console
}

// forTables returns the consoles of tables, which share c's checks, form
// token and inbox. One table is served at / as it always was.
func (c *console) forTables(tables []consoleTable) consoleSet {
	var set consoleSet
	for _, t := range tables {
		tc := *c
		tc.admin, tc.table, tc.noOutbox = t.admin, t.name, t.noOutbox
		if len(tables) > 1 {
			tc.base = "/t/" + t.name
		}
		set.tables = append(set.tables, &tc)
	}
	return set
}

func (s consoleSet) names() []string {
	var out []string
	for _, c := range s.tables {
		out = append(out, c.table)
	}
	return out
}

func (s consoleSet) handler() http.Handler {
	first := s.tables[0]
	if len(s.tables) == 1 {
		return first.handler()
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", s.index)
	for _, c := range s.tables {
		mux.Handle(c.base+"/", http.StripPrefix(c.base, c.routes()))
	}
	return first.guarded(mux)
}

// tableLine is a table on the index: its figures and warnings, or why it
// has none.
type tableLine struct {
	Base, Name, Problem string
	Stats               outboxdriver.Stats
	Oldest              string
	Banners             []banner
}

// index lists the tables with what on-call looks at first in each:
// pending, dead, the oldest pending message's age and the overview's
// warnings.
func (s consoleSet) index(w http.ResponseWriter, r *http.Request) {
	first := s.tables[0]
	lines := make([]tableLine, 0, len(s.tables))
	for _, c := range s.tables {
		line := tableLine{Base: c.base, Name: c.table, Problem: c.noOutbox}
		if line.Problem == "" {
			line.Stats, line.Oldest, line.Banners, line.Problem = c.summary(r.Context())
		}
		lines = append(lines, line)
	}
	p := first.page(r, "Tables")
	p.Base, p.Table, p.Index = "", "", true
	var inbox string
	if first.inbox != nil {
		inbox = first.inbox.Name()
	}
	first.render(w, "tables", struct {
		page
		Tables     []tableLine
		Inbox      string
		InboxBase  string
		At         string
		StuckAfter string
	}{p, lines, inbox, first.base, time.Now().UTC().Format("15:04:05 MST"), first.stuckAfter.String()})
}

// summary is the table's figures and warnings for the index, or why they
// could not be read.
func (c *console) summary(ctx context.Context) (st outboxdriver.Stats, oldest string, banners []banner, problem string) {
	st, err := c.admin.Stats(ctx)
	if err != nil {
		return st, "", nil, err.Error()
	}
	oldest = "none"
	if st.Pending > 0 {
		oldest = st.OldestPending.Round(time.Millisecond).String()
	}
	relays := readRelays(ctx, c.admin)
	stuck := readStuckKeys(ctx, c.admin, c.stuckAfter, consoleStuckKeys)
	return st, oldest, overviewBanners(st, relays, stuck, c.stuckAfter), ""
}

// outboxOnly serves a page of the outbox table with next, or, when there
// is no outbox table, a page that says so and what to do.
func (c *console) outboxOnly(next http.HandlerFunc) http.HandlerFunc {
	if c.noOutbox == "" {
		return next
	}
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet {
			http.Error(w, "refused: "+c.noOutbox, http.StatusNotFound)
			return
		}
		c.render(w, "no-outbox", struct {
			page
			Problem string
		}{c.page(r, "No outbox table"), c.noOutbox})
	}
}

// outboxChange is next, a change of the outbox table, refused when there is
// no outbox table.
func (c *console) outboxChange(next func(http.ResponseWriter, *http.Request, *auditLine)) func(http.ResponseWriter, *http.Request, *auditLine) {
	if c.noOutbox == "" {
		return next
	}
	return func(w http.ResponseWriter, _ *http.Request, _ *auditLine) {
		http.Error(w, "refused: "+c.noOutbox, http.StatusNotFound)
	}
}

// matchingTables names the tables `outbox relay --tables` would serve: those
// named table in the schemas the pattern schemas matches, SCHEMA.TABLE each.
func matchingTables(ctx context.Context, pool *pgxpool.Pool, schemas, table string) ([]string, error) {
	src, err := outboxpg.NewTables(pool, schemas, outboxpg.Options{Table: table})
	if err != nil {
		return nil, err
	}
	stores, err := src.Tables(ctx)
	if err != nil {
		return nil, err
	}
	names := make([]string, len(stores))
	for i, s := range stores {
		names[i] = s.Name()
	}
	return names, nil
}
