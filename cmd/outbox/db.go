package main

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/outboxdriver"
	"github.com/go-outbox/outbox/outboxpg"
)

// backend is one open outbox table, whatever the database.
type backend struct {
	store    outboxdriver.Store
	admin    outboxdriver.Admin
	migrator migrator
	// send writes messages in one committed transaction and wakes relays.
	send func(ctx context.Context, msgs ...*outbox.Message) error
	// inbox opens the inbox table named table beside the outbox table.
	inbox func(ctx context.Context, table string) (inboxTable, error)
	close func()
}

// migrator is what `outbox migrate` needs from a store's migrations.
type migrator interface {
	Up(ctx context.Context) ([]int, error)
	Down(ctx context.Context, steps int) ([]int, error)
	List(ctx context.Context) ([]migrationStatus, error)
}

type migrationStatus struct {
	Version   int
	Name      string
	Applied   bool
	AppliedAt time.Time
}

// resolveURL returns the URL from the flag or DATABASE_URL.
func (g *globalFlags) resolveURL() (string, error) {
	u := g.databaseURL
	if u == "" {
		u = os.Getenv("DATABASE_URL")
	}
	if u == "" {
		return "", usagef("no database: pass --database-url or set DATABASE_URL (e.g. postgres://user@localhost:5432/app)")
	}
	rememberSecret(u)
	return u, nil
}

// storeMode holds the store options a command sets for itself.
type storeMode struct {
	notify     bool // writes wake relays in other processes (PostgreSQL NOTIFY; used by `send`)
	orderByKey bool // claims keep the order of each key (used by `relay`)
	skipDead   bool // in key order, a dead message lets its key go on
	watchWAL   bool // wake up from the table's inserts in the WAL (PostgreSQL; used by `relay`)
	txLeases   bool // claims hold their rows in a transaction (PostgreSQL; used by `relay`)
	workers    int  // the relay's workers, each holding a connection while txLeases
}

// heldClaimSpareConns are the connections a relay with transaction leases
// needs besides one per worker: the idle probe, the wake-up and the clean-up
// of published messages.
const heldClaimSpareConns = 3

// openReady is open for the commands that use the table: it fails, naming
// `outbox migrate up`, when the table is missing or at an older migration,
// rather than with the database's error about a missing table or column.
func (g *globalFlags) openReady(ctx context.Context, mode storeMode) (*backend, error) {
	b, err := g.open(ctx, mode)
	if err != nil {
		return nil, err
	}
	if checker, ok := b.store.(outboxdriver.SchemaChecker); ok {
		if err := checker.CheckSchema(ctx); err != nil {
			b.close()
			return nil, err
		}
	}
	return b, nil
}

// open connects to the database and opens the outbox table in mode.
func (g *globalFlags) open(ctx context.Context, mode storeMode) (*backend, error) {
	raw, err := g.resolveURL()
	if err != nil {
		return nil, err
	}
	switch scheme := urlScheme(raw); scheme {
	case "postgres", "postgresql":
		return g.openPostgres(ctx, raw, mode)
	case "sqlite": // sqlite:///abs/app.db, sqlite:relative/app.db
		return g.openSQLite(ctx, raw, mode)
	case "mysql": // mysql://user:password@host:3306/db?param=value
		return g.openMySQL(ctx, raw, mode)
	case "":
		return nil, usagef("the database URL is not a URL; use postgres://user:password@host:5432/db, sqlite:///path/app.db or " + mysqlURLForm)
	default:
		return nil, usagef("database URL scheme %q is not supported; use postgres://user:password@host:5432/db, sqlite:///path/app.db or "+mysqlURLForm, scheme)
	}
}

// urlScheme returns the lower-cased scheme of raw, or "" if raw does not
// start with one. It never returns more of raw: a key=value connection
// string could hold a password.
func urlScheme(raw string) string {
	scheme, _, ok := strings.Cut(raw, ":")
	if !ok || scheme == "" {
		return ""
	}
	for i, c := range scheme {
		letter := 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z'
		if !letter && (i == 0 || !('0' <= c && c <= '9' || c == '+' || c == '-' || c == '.')) {
			return ""
		}
	}
	return strings.ToLower(scheme)
}

// poolConfig is the pool configuration of the database URL raw for mode.
// With transaction leases each batch in flight holds a connection with its
// claim's transaction, and the store holds at most half of the pool's
// connections so (leasing the other claims by their columns; see
// outboxpg.Options.TransactionLeases): unless the URL sets pool_max_conns,
// the pool grows to twice the workers plus heldClaimSpareConns, so that
// every worker's claim is held and the idle probe, the wake-up, the
// clean-up and the publisher's own transactions still find a connection.
func poolConfig(raw string, mode storeMode) (*pgxpool.Config, error) {
	cfg, err := pgxpool.ParseConfig(raw)
	if err != nil {
		return nil, fmt.Errorf("parse database URL: %w", err)
	}
	if mode.txLeases && !strings.Contains(raw, "pool_max_conns") {
		cfg.MaxConns = max(cfg.MaxConns, 2*int32(mode.workers)+heldClaimSpareConns)
	}
	return cfg, nil
}

func (g *globalFlags) openPostgres(ctx context.Context, raw string, mode storeMode) (*backend, error) {
	pool, err := connectPostgres(ctx, raw, mode)
	if err != nil {
		return nil, err
	}
	b, err := g.postgresBackend(pool, mode)
	if err != nil {
		pool.Close()
		return nil, err
	}
	b.close = pool.Close
	return b, nil
}

// connectPostgres opens a pool on the database raw names, for mode.
func connectPostgres(ctx context.Context, raw string, mode storeMode) (*pgxpool.Pool, error) {
	cfg, err := poolConfig(raw, mode)
	if err != nil {
		return nil, err
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connect to PostgreSQL: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("connect to PostgreSQL at %s: %w", cfg.ConnConfig.Host, err)
	}
	return pool, nil
}

// postgresBackend is the table of --schema and --table over pool, which
// its close leaves open: several tables may share the pool (the console's).
func (g *globalFlags) postgresBackend(pool *pgxpool.Pool, mode storeMode) (*backend, error) {
	opts := outboxpg.Options{Schema: g.schema, Table: g.table, Notify: mode.notify, OrderByKey: mode.orderByKey, SkipDeadInKeyOrder: mode.skipDead, WatchWAL: mode.watchWAL, TransactionLeases: mode.txLeases}
	store, err := outboxpg.New(pool, opts)
	if err != nil {
		return nil, err
	}
	w, err := outbox.NewWriter(store, outbox.WriterConfig{})
	if err != nil {
		return nil, err
	}
	m, err := outboxpg.NewMigrator(pool, opts)
	if err != nil {
		return nil, err
	}
	return &backend{
		store:    store,
		admin:    store,
		migrator: pgMigrator{m},
		send: func(ctx context.Context, msgs ...*outbox.Message) error {
			return w.Transact(ctx, func(ctx context.Context, tx pgx.Tx) error { return w.Write(ctx, tx, msgs...) })
		},
		inbox: func(_ context.Context, table string) (inboxTable, error) {
			return outboxpg.NewInboxTable(pool, outboxpg.InboxOptions{Schema: g.schema, Table: table})
		},
		close: func() {},
	}, nil
}

// secrets holds the passwords and tokens seen in URLs; redact removes them
// from every error message and log line.
var secrets secretSet

type secretSet struct {
	mu   sync.RWMutex
	list []string
}

// add remembers each non-empty value, also in its URL-escaped forms (an
// error may quote the URL as given). The longest come first: a shorter secret
// that happens to be part of a longer one must not cut it up before it is
// found whole.
func (s *secretSet) add(values ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, v := range values {
		if v == "" {
			continue
		}
		for _, form := range []string{v, url.QueryEscape(v), url.PathEscape(v)} {
			if !slices.Contains(s.list, form) {
				s.list = append(s.list, form)
			}
		}
	}
	slices.SortStableFunc(s.list, func(a, b string) int { return len(b) - len(a) })
}

// redact removes from text every secret remembered, and any password that a
// user:password@ in text shows.
func (s *secretSet) redact(text string) string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	for _, v := range s.list {
		text = strings.ReplaceAll(text, v, "xxxxx")
	}
	return urlPassword.ReplaceAllString(text, "${1}xxxxx@")
}

// remember finds the password in a database or broker URL (or a key-value
// connection string) and remembers it.
func (s *secretSet) remember(raw string) {
	if u, err := url.Parse(raw); err == nil {
		if u.User != nil {
			p, _ := u.User.Password()
			s.add(p)
		}
		s.add(u.Query().Get("password"))
	}
	// URLs that do not parse still have a recognisable user:password@. The
	// user part may hold anything but ':' and '@', a '/' included: a URL
	// typed wrong is rather redacted too much than shown with its password.
	for _, m := range urlPassword.FindAllStringSubmatch(raw, -1) {
		s.add(m[2])
	}
	for _, m := range kvPassword.FindAllStringSubmatch(raw, -1) {
		s.add(m[1])
	}
}

// rememberSecret remembers the password of raw for every later redact.
func rememberSecret(raw string) { secrets.remember(raw) }

var (
	kvPassword  = regexp.MustCompile(`password=([^\s&]+)`)
	urlPassword = regexp.MustCompile(`(://[^:@\s]*:)([^@\s]+)@`)
)

// redact removes from s every password remembered, and any that a
// user:password@ in s shows.
func redact(s string) string { return secrets.redact(s) }
