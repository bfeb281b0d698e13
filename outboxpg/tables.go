package outboxpg

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/sqlident"
	"github.com/go-outbox/outbox/outboxdriver"
)

// Tables is the outbox tables of one name (Options.Table) in every schema of
// a database whose name matches a pattern (a schema per tenant, say), served
// by one outbox.TablesRelay. It lists them anew at each call of
// Tables, so schemas created and dropped while the relay runs are picked
// up, and hears of writes to all of them on one connection
// (ListenForWrites). It is safe for concurrent use.
type Tables struct {
	opts    Options
	pattern string // as given, for messages
	pool    *pgxpool.Pool

	// scan serializes Tables calls, so that the latest call to return is
	// the one whose list the listener follows.
	scan sync.Mutex

	mu      sync.Mutex
	changed chan struct{}     // closed when listed changes, then replaced
	listed  []*Store          // the latest Tables call's, in name order
	skipped map[string]bool   // schemas whose names New refused, warned of once
	stores  map[string]*Store // listed, by schema
}

// The interfaces Tables implements.
var _ outbox.TablesListener = (*Tables)(nil)

// NewTables returns a source of the outbox tables named opts.Table (default
// "outbox") in every schema of pool's database whose name matches schemas,
// a pattern where * matches any run of characters and every other character
// stands for itself ("tenant_*": the "_" is not a wildcard). The schema of
// each table comes from the pattern, so opts.Schema must be empty; the rest
// of opts applies to every table's Store as it does in New (set Notify on
// the writers' side for ListenForWrites to hear them). Options.WatchWAL is
// refused: it would take a replication slot per table. NewTables validates
// its arguments and does not touch the database.
func NewTables(pool *pgxpool.Pool, schemas string, opts Options) (*Tables, error) {
	if pool == nil {
		return nil, &outbox.ConfigError{Field: "outboxpg.NewTables pool", Value: "nil",
			Fix: "pass a pool from pgxpool.New(ctx, url)"}
	}
	if err := checkSchemaPattern(schemas); err != nil {
		return nil, err
	}
	if opts.Schema != "" {
		return nil, &outbox.ConfigError{Field: "outboxpg.Options.Schema", Value: fmt.Sprintf("%q", opts.Schema),
			Fix: "leave it empty with NewTables: each table's schema is one that matches the schemas pattern (pass \"" + opts.Schema + "\" as the pattern for that schema alone)"}
	}
	if opts.WatchWAL {
		return nil, &outbox.ConfigError{Field: "outboxpg.Options.WatchWAL", Value: true,
			Fix: "turn it off with NewTables, which LISTENs for every table on one connection (a WAL watcher takes a replication slot per table): set Options.Notify on the writers instead"}
	}
	if _, err := opts.resolve(); err != nil {
		return nil, err
	}
	return &Tables{
		opts:    opts,
		pattern: schemas,
		pool:    pool,
		changed: make(chan struct{}),
		skipped: map[string]bool{},
		stores:  map[string]*Store{},
	}, nil
}

// checkSchemaPattern refuses a pattern that no schema a Store accepts can
// match.
func checkSchemaPattern(p string) error {
	const field = "outboxpg.NewTables schemas"
	if p == "" {
		return &outbox.ConfigError{Field: field, Value: `""`,
			Fix: `pass a pattern of schema names, where * matches any run of characters, e.g. "tenant_*"`}
	}
	for _, r := range p {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '_' || r == '*') {
			return &outbox.ConfigError{Field: field, Value: fmt.Sprintf("%q", p),
				Fix: "use lower-case letters, digits, underscores and *, as schema names of outbox tables have (" + sqlident.Pattern + ")"}
		}
	}
	return nil
}

// likePattern turns a pattern of NewTables into one for LIKE ... ESCAPE '\':
// * becomes %, and LIKE's own wildcards (_ and %) and its escape stand for
// themselves.
func likePattern(p string) string {
	var b strings.Builder
	for _, r := range p {
		switch r {
		case '*':
			b.WriteByte('%')
		case '_', '%', '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// tablesQuery finds the schemas that hold the table: partitioned tables
// count, views do not, and the system's schemas are never tenants. Names
// sort by bytes (COLLATE "C"), as Go sorts strings.
const tablesQuery = `SELECT n.nspname
	FROM pg_catalog.pg_namespace AS n
	JOIN pg_catalog.pg_class AS c ON c.relnamespace = n.oid
	WHERE c.relname = $1 AND c.relkind IN ('r', 'p')
	  AND n.nspname LIKE $2 ESCAPE '\'
	  AND n.nspname NOT LIKE 'pg\_%' ESCAPE '\' AND n.nspname <> 'information_schema'
	ORDER BY n.nspname COLLATE "C"`

// MatchingSchemas returns the schemas of pool's database whose names match
// pattern, as NewTables takes it (* matches any run of characters), and
// that hold a table named table, in name order: the tenants of a database
// with a schema per tenant, for work across them other than a relay's (the
// purge of each tenant's inbox table, say).
func MatchingSchemas(ctx context.Context, pool *pgxpool.Pool, pattern, table string) ([]string, error) {
	if err := checkSchemaPattern(pattern); err != nil {
		return nil, err
	}
	if err := sqlident.Check("outboxpg.MatchingSchemas table", table, MaxTableLength); err != nil {
		return nil, err
	}
	return matchingSchemas(ctx, pool, pattern, table)
}

// matchingSchemas is MatchingSchemas with its arguments checked.
func matchingSchemas(ctx context.Context, pool *pgxpool.Pool, pattern, table string) ([]string, error) {
	rows, err := pool.Query(ctx, tablesQuery, table, likePattern(pattern))
	if err != nil {
		return nil, fmt.Errorf("outboxpg: list the tables %s.%s: %w", pattern, table, err)
	}
	schemas, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("outboxpg: list the tables %s.%s: %w", pattern, table, err)
	}
	return schemas, nil
}

// Tables returns a Store for the table in each schema that matches the
// pattern and holds a table of that name, in the order of the schemas'
// names. A table is listed whatever its migration: a relay's start check
// (CheckSchema) tells what it lacks. A table keeps its *Store from one call
// to the next, for as long as it is listed, so what a Store keeps (its
// open claims with Options.TransactionLeases, say) lives on across rescans.
// A schema whose name a Store cannot take (upper-case letters, say) is
// skipped, with a warning logged once.
func (t *Tables) Tables(ctx context.Context) ([]outboxdriver.Store, error) {
	t.scan.Lock()
	defer t.scan.Unlock()
	n, _ := t.opts.resolve() // validated by NewTables
	schemas, err := matchingSchemas(ctx, t.pool, t.pattern, n.table)
	if err != nil {
		return nil, err
	}

	t.mu.Lock()
	defer t.mu.Unlock()
	stores := make(map[string]*Store, len(schemas))
	listed := make([]*Store, 0, len(schemas))
	for _, schema := range schemas {
		s := t.stores[schema]
		if s == nil {
			opts := t.opts
			opts.Schema = schema
			if s, err = New(t.pool, opts); err != nil {
				t.warnSkipped(schema, err)
				continue
			}
		}
		stores[schema] = s
		listed = append(listed, s)
	}
	if !slices.Equal(listed, t.listed) {
		close(t.changed)
		t.changed = make(chan struct{})
	}
	t.stores, t.listed = stores, listed
	out := make([]outboxdriver.Store, len(listed))
	for i, s := range listed {
		out[i] = s
	}
	return out, nil
}

// warnSkipped logs, once per schema, that a schema matching the pattern
// cannot be served. Called with t.mu held.
func (t *Tables) warnSkipped(schema string, err error) {
	if t.skipped[schema] {
		return
	}
	t.skipped[schema] = true
	logger := t.opts.Logger
	if logger == nil {
		logger = slog.Default()
	}
	logger.Warn("outboxpg: a schema matches the pattern of NewTables but its name cannot hold an outbox table; it is skipped",
		slog.String("schema", schema), slog.String("pattern", t.pattern), slog.Any("error", err))
}

// current returns the stores of the latest Tables call and a channel closed
// when a later call changes them.
func (t *Tables) current() ([]*Store, <-chan struct{}) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.listed, t.changed
}
