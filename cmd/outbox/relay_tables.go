package main

import (
	"context"
	"errors"
	"strings"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/sqlident"
	"github.com/go-outbox/outbox/outboxpg"
)

// tablesFlagUsage is the help of `outbox relay --tables`.
const tablesFlagUsage = "PostgreSQL: serve every outbox table SCHEMA.TABLE matches, where * in SCHEMA " +
	"matches any characters (e.g. 'tenant_*.outbox'; TABLE defaults to outbox), found again every " +
	"--rescan-interval; one relay per table, --workers each (default 1 here), on one pool and one " +
	"LISTEN connection"

// tablesPattern splits --tables into its schema pattern and table name,
// checked before anything connects: the schema pattern of lower-case
// letters, digits, _ and *, as the schemas of outbox tables are named, and
// the table a name outboxpg takes.
func tablesPattern(raw string) (schemas, table string, err error) {
	schemas, table, ok := strings.Cut(raw, ".")
	if !ok {
		table = outboxpg.TableDefault
	}
	const form = "use SCHEMA.TABLE where * in SCHEMA matches any characters, e.g. 'tenant_*.outbox'"
	if schemas == "" || table == "" {
		return "", "", usagef("--tables %q: %s", raw, form)
	}
	for _, r := range schemas {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '_' || r == '*') {
			return "", "", usagef("--tables %q: the schema pattern takes lower-case letters, digits, _ and * (outbox tables' schemas are named %s); %s", raw, sqlident.Pattern, form)
		}
	}
	if err := sqlident.Check("table", table, outboxpg.MaxTableLength); err != nil {
		return "", "", usagef("--tables %q: the table after the dot is a name without *: %v; %s", raw, err, form)
	}
	return schemas, table, nil
}

// openTables opens the source of `outbox relay --tables`: the tables named
// table in the schemas the pattern schemas matches (from tablesPattern) on
// the PostgreSQL database of --database-url, with the relay's store
// options. close closes its pool.
func (g *globalFlags) openTables(ctx context.Context, schemas, table string, mode storeMode) (outbox.TableSource, func(), error) {
	switch {
	case g.schema != "" || g.table != "":
		return nil, nil, usagef("--tables %q names the schemas and the table: leave out --schema and --table", schemas+"."+table)
	case mode.watchWAL:
		return nil, nil, usagef("--watch-wal takes a replication slot per table: not with --tables; the relays wake on NOTIFY (writers with Notify) and poll")
	}
	raw, err := g.resolveURL()
	if err != nil {
		return nil, nil, err
	}
	if scheme := urlScheme(raw); scheme != "postgres" && scheme != "postgresql" {
		return nil, nil, usagef("--tables needs a PostgreSQL database URL (postgres://...); SQLite and MySQL have no schemas: name each table with --table")
	}
	pool, err := connectPostgres(ctx, raw, mode)
	if err != nil {
		return nil, nil, err
	}
	src, err := outboxpg.NewTables(pool, schemas, outboxpg.Options{Table: table, OrderByKey: mode.orderByKey, SkipDeadInKeyOrder: mode.skipDead, TransactionLeases: mode.txLeases})
	if err != nil {
		pool.Close()
		return nil, nil, err
	}
	return src, pool.Close, nil
}

// openTenantInboxes opens the inbox table named table in every schema the
// pattern matches (`outbox inbox purge --schemas`), on one pool that close
// closes. A pattern matching no schema with that table is refused.
func (g *globalFlags) openTenantInboxes(ctx context.Context, pattern, table string) (_ []inboxTable, done func(), err error) {
	if g.schema != "" {
		return nil, nil, usagef("--schemas %q names the schemas: leave out --schema", pattern)
	}
	raw, err := g.resolveURL()
	if err != nil {
		return nil, nil, err
	}
	if scheme := urlScheme(raw); scheme != "postgres" && scheme != "postgresql" {
		return nil, nil, usagef("--schemas needs a PostgreSQL database URL (postgres://...); SQLite and MySQL have no schemas")
	}
	pool, err := connectPostgres(ctx, raw, storeMode{})
	if err != nil {
		return nil, nil, err
	}
	defer func() {
		if err != nil {
			pool.Close()
		}
	}()
	schemas, err := outboxpg.MatchingSchemas(ctx, pool, pattern, table)
	var config *outbox.ConfigError
	switch {
	case errors.As(err, &config):
		return nil, nil, usagef("--schemas %q: %v", pattern, err)
	case err != nil:
		return nil, nil, err
	case len(schemas) == 0:
		return nil, nil, usagef("--schemas %q: no schema matching it has an inbox table %s; check the pattern and --inbox-table", pattern, table)
	}
	tables := make([]inboxTable, 0, len(schemas))
	for _, schema := range schemas {
		t, err := outboxpg.NewInboxTable(pool, outboxpg.InboxOptions{Schema: schema, Table: table})
		if err != nil {
			return nil, nil, err
		}
		tables = append(tables, t)
	}
	return tables, pool.Close, nil
}
