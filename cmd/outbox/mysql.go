package main

import (
	"context"
	"database/sql"
	"fmt"
	"net"
	"net/url"
	"strings"

	"github.com/go-sql-driver/mysql"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/outboxmysql"
)

// mysqlURLForm is the form of a MySQL or MariaDB database URL, for errors
// and help.
const mysqlURLForm = "mysql://user:password@host:3306/db?param=value"

// mysqlDefaults are the driver parameters a mysql:// URL gets unless it sets
// them: parseTime makes DATETIME columns times rather than text (the store
// reads either; the application's tools prefer times), and
// interpolateParams sends each statement with its arguments in one round
// trip instead of preparing it first.
var mysqlDefaults = map[string]string{"parseTime": "true", "interpolateParams": "true"}

// mysqlConfig turns a mysql:// URL into a go-sql-driver/mysql configuration:
// the user and password, the host and port (3306 if none; tcp), the
// database from the path, and the query parameters as the driver's DSN
// parameters (tls, timeout, charset, ...), with mysqlDefaults added. The
// errors never quote the URL: it may hold a password.
func mysqlConfig(raw string) (*mysql.Config, error) {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return nil, usagef("the database URL is not a MySQL URL; use %s", mysqlURLForm)
	}
	db := strings.TrimPrefix(u.Path, "/")
	if db == "" || strings.Contains(db, "/") {
		return nil, usagef("the MySQL URL names no database; use %s", mysqlURLForm)
	}
	q := u.Query()
	for k, v := range mysqlDefaults {
		if !q.Has(k) {
			q.Set(k, v)
		}
	}
	addr := u.Host
	if u.Port() == "" {
		addr = net.JoinHostPort(u.Hostname(), "3306")
	}
	cfg, err := mysql.ParseDSN("tcp(" + addr + ")/" + db + "?" + q.Encode())
	if err != nil {
		return nil, usagef("the MySQL URL's parameters are not the driver's: %v; use %s", err, mysqlURLForm)
	}
	if u.User != nil {
		cfg.User = u.User.Username()
		cfg.Passwd, _ = u.User.Password()
	}
	return cfg, nil
}

// openMySQL opens the table of --table in the MySQL or MariaDB database raw
// names.
func (g *globalFlags) openMySQL(ctx context.Context, raw string, mode storeMode) (*backend, error) {
	if g.schema != "" {
		return nil, usagef("--schema %q: a MySQL table lives in the URL's database; leave --schema out and name the database in the URL", g.schema)
	}
	if mode.watchWAL {
		return nil, usagef("--watch-wal is for PostgreSQL; a MySQL relay polls adaptively and is woken by writes of its own process")
	}
	if mode.txLeases && mode.orderByKey {
		return nil, usagef("--transaction-leases with --order-by-key: a MySQL relay in key order leases its claims by their columns; leave --transaction-leases out")
	}
	cfg, err := mysqlConfig(raw)
	if err != nil {
		return nil, err
	}
	connector, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, err
	}
	db := sql.OpenDB(connector)
	if err := db.PingContext(ctx); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("connect to MySQL at %s: %w", cfg.Addr, err)
	}
	opts := outboxmysql.Options{Table: g.table, OrderByKey: mode.orderByKey, SkipDeadInKeyOrder: mode.skipDead, TransactionLeases: mode.txLeases}
	store, err := outboxmysql.New(db, opts)
	if err != nil {
		_ = db.Close()
		return nil, err
	}
	w, err := outbox.NewWriter(store, outbox.WriterConfig{})
	if err != nil {
		_ = db.Close()
		return nil, err
	}
	m, err := outboxmysql.NewMigrator(db, opts)
	if err != nil {
		_ = db.Close()
		return nil, err
	}
	return &backend{
		store:    store,
		admin:    store,
		migrator: mysqlMigrator{m},
		send: func(ctx context.Context, msgs ...*outbox.Message) error {
			return w.Transact(ctx, func(ctx context.Context, tx *sql.Tx) error { return w.Write(ctx, tx, msgs...) })
		},
		inbox: func(_ context.Context, table string) (inboxTable, error) {
			return outboxmysql.NewInboxTable(store, table)
		},
		close: func() { _ = db.Close() },
	}, nil
}

var _ inboxTable = (*outboxmysql.InboxTable)(nil)

// mysqlMigrator adapts outboxmysql.Migrator to the CLI's migrator.
type mysqlMigrator struct{ m *outboxmysql.Migrator }

func (p mysqlMigrator) Up(ctx context.Context) ([]int, error) { return p.m.Up(ctx) }
func (p mysqlMigrator) Down(ctx context.Context, steps int) ([]int, error) {
	return p.m.Down(ctx, steps)
}
func (p mysqlMigrator) List(ctx context.Context) ([]migrationStatus, error) {
	all, err := p.m.List(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]migrationStatus, len(all))
	for i, s := range all {
		out[i] = migrationStatus{Version: s.Version, Name: s.Name, Applied: s.Applied, AppliedAt: s.AppliedAt}
	}
	return out, nil
}
