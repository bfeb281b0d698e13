package main

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/go-outbox/outbox/outboxmysql"
)

// The demo on MySQL or MariaDB runs in the user's database, beside their
// own tables, and must never change one of them. It touches only the
// tables of demoMySQLTables, all named outbox_demo or outbox_demo_*, each
// marked with demoTableMark as its comment once made, and demoRunTable,
// which a run makes, marked, before any other: so a run that was killed
// before it could mark its tables leaves a marked record that it was
// there. A run
//
//   - holds a named lock on its database, so that two demos never drop
//     each other's tables;
//   - stops, touching nothing, if a table of the list is not marked and no
//     earlier run's record is there: it is someone else's;
//   - drops the others, which an earlier run kept (--keep) or could not
//     drop (killed): they hold nothing but the demo's rows;
//   - makes its record, creates its tables afresh and marks them;
//   - drops them, and then its record, at the end, unless --keep.
//
// A table named like the demo's but not in the list (a user's copy of a
// kept table, say) is never touched. The list is the migrations' and the
// inbox's tables: TestDemoOnMySQLTouchesOnlyItsOwnTables fails if a
// release adds one.
//
// It drops and creates rather than empties the tables so that every run
// starts from the same state: the migrations all run, the inbox holds no
// record of the ids of an earlier run, and a table kept by an older release
// of the CLI is not reused with an older schema.
const (
	demoMySQLTable = "outbox_demo"
	demoRunTable   = "outbox_demo_run"
	demoTableMark  = "outbox demo table: the next outbox demo on this database drops it"
)

// demoMySQLTables are the tables a run makes besides its record.
var demoMySQLTables = []string{
	demoMySQLTable, // and its side tables, made by outboxmysql's migrations:
	demoMySQLTable + "_migrations", demoMySQLTable + "_relays", demoMySQLTable + "_attempts",
	demoMySQLTable + "_paused", demoMySQLTable + "_minutes",
	demoMySQLTable + "_inbox", demoMySQLTable + "_inbox_outgoing", demoMySQLTable + "_inbox_parked",
	demoMySQLTable + "_orders", demoMySQLTable + "_revenue",
}

// openDemoMySQL opens the MySQL or MariaDB database raw names, as the other
// commands open it, and makes the demo's tables there.
func openDemoMySQL(ctx context.Context, raw string, keep bool) (_ *demoDB, err error) {
	b, err := (&globalFlags{table: demoMySQLTable}).openMySQL(ctx, raw, storeMode{})
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			b.close()
		}
	}()
	store, ok := b.store.(*outboxmysql.Store)
	if !ok {
		return nil, fmt.Errorf("the MySQL store is a %T", b.store)
	}
	db := store.DB()
	var database, version string
	if err := db.QueryRowContext(ctx, `SELECT DATABASE(), VERSION()`).Scan(&database, &version); err != nil {
		return nil, err
	}
	unlock, err := lockDemoDatabase(ctx, db, database)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			unlock()
		}
	}()
	earlier, err := dropEarlierDemo(ctx, db, database)
	if err != nil {
		return nil, err
	}
	// From here on, every table of the list is this run's.
	defer func() {
		if err != nil && !keep {
			dropDemoTables(db)
		}
	}()
	if _, err := db.ExecContext(ctx, "CREATE TABLE `"+demoRunTable+"` (started_at DATETIME NOT NULL) ENGINE = InnoDB COMMENT = '"+demoTableMark+"'"); err != nil {
		return nil, err
	}
	if _, err := b.migrator.Up(ctx); err != nil {
		return nil, err
	}
	for _, ddl := range []string{
		`CREATE TABLE outbox_demo_orders (id BIGINT NOT NULL PRIMARY KEY, customer VARCHAR(64) NOT NULL, total_cents BIGINT NOT NULL)
			ENGINE = InnoDB COMMENT = '` + demoTableMark + `'`,
		`CREATE TABLE outbox_demo_revenue (customer VARCHAR(64) NOT NULL PRIMARY KEY, orders BIGINT NOT NULL, total_cents BIGINT NOT NULL)
			ENGINE = InnoDB COMMENT = '` + demoTableMark + `'`,
	} {
		if _, err := db.ExecContext(ctx, ddl); err != nil {
			return nil, err
		}
	}
	inboxTable, err := outboxmysql.NewInboxTable(store, demoMySQLTable+"_inbox")
	if err != nil {
		return nil, err
	}
	if err := inboxTable.Migrate(ctx); err != nil {
		return nil, err
	}
	if err := markDemoTables(ctx, db); err != nil {
		return nil, err
	}

	about := fmt.Sprintf("MySQL database %s (server %s): outbox table %s migrated, %s_orders/_revenue/_inbox tables created", database, version, demoMySQLTable, demoMySQLTable)
	if len(earlier) > 0 {
		about += fmt.Sprintf(", after dropping the %d left by an earlier demo", len(earlier))
	}
	if keep {
		about += "; kept afterwards (--keep), for outbox status --table " + demoMySQLTable
	} else {
		about += "; dropped at the end"
	}
	return &demoDB{
		about: about,
		close: func() {
			if !keep {
				dropDemoTables(db)
			}
			unlock()
			b.close()
		},
		inbox: inboxTable,
		sql: demoStatements{
			// VALUES(), not an alias of the new row: MariaDB has no such alias.
			applyRevenue: `INSERT INTO outbox_demo_revenue (customer, orders, total_cents) VALUES (?, 1, ?)
			ON DUPLICATE KEY UPDATE orders = orders + 1, total_cents = total_cents + VALUES(total_cents)`,
			insertOrder:     `INSERT INTO outbox_demo_orders (id, customer, total_cents) VALUES (?, ?, ?)`,
			orderTotals:     `SELECT COUNT(*), COALESCE(SUM(total_cents), 0) FROM outbox_demo_orders`,
			pendingAttempts: `SELECT COALESCE(SUM(attempts), 0) FROM outbox_demo WHERE status = 'pending'`,
			revenueTotals:   `SELECT COALESCE(SUM(orders), 0), COALESCE(SUM(total_cents), 0) FROM outbox_demo_revenue`,
		},
		store: store,
	}, nil
}

// lockDemoDatabase takes the server's named lock of the demo on database,
// on a connection of its own, and returns the function that releases it.
// The name is a hash: lock names are limited to 64 characters, database
// names are not much shorter.
func lockDemoDatabase(ctx context.Context, db *sql.DB, database string) (func(), error) {
	// Lower case: where the server ignores the case of names
	// (lower_case_table_names), App and app are one database.
	sum := sha256.Sum256([]byte(strings.ToLower(database)))
	name := "outbox_demo:" + hex.EncodeToString(sum[:16])
	conn, err := db.Conn(ctx)
	if err != nil {
		return nil, err
	}
	var got sql.NullInt64
	if err := conn.QueryRowContext(ctx, `SELECT GET_LOCK(?, 0)`, name).Scan(&got); err != nil {
		_ = conn.Close()
		return nil, err
	}
	if got.Int64 != 1 {
		_ = conn.Close()
		return nil, fmt.Errorf("another outbox demo is running on database %s; wait for it to end", database)
	}
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, _ = conn.ExecContext(ctx, `DO RELEASE_LOCK(?)`, name)
		_ = conn.Close()
	}, nil
}

// demoTable is a table (or view) of the database with the name of one of
// the demo's.
type demoTable struct {
	name   string
	marked bool // it carries demoTableMark
}

// demoTables lists the tables (and views) of db's database that have the
// name of one of the demo's, its record included.
func demoTables(ctx context.Context, db *sql.DB) ([]demoTable, error) {
	names := append([]string{demoRunTable}, demoMySQLTables...)
	args := make([]any, len(names))
	for i, n := range names {
		args[i] = n
	}
	rows, err := db.QueryContext(ctx, `SELECT TABLE_NAME, COALESCE(TABLE_COMMENT, '') FROM information_schema.TABLES
		WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME IN (?`+strings.Repeat(", ?", len(names)-1)+`) ORDER BY TABLE_NAME`, args...)
	if err != nil {
		return nil, fmt.Errorf("list the demo's tables: %w", err)
	}
	defer rows.Close()
	var all []demoTable
	for rows.Next() {
		var t demoTable
		var comment string
		if err := rows.Scan(&t.name, &comment); err != nil {
			return nil, err
		}
		// information_schema may compare names without case: a table
		// named like the demo's in other letters is someone else's.
		t.marked = comment == demoTableMark && slices.Contains(names, t.name)
		all = append(all, t)
	}
	return all, rows.Err()
}

// dropEarlierDemo drops the tables an earlier demo left, and returns their
// names; it refuses, dropping none, if a table of the demo's is not marked
// as the demo's while no earlier run's record is there.
func dropEarlierDemo(ctx context.Context, db *sql.DB, database string) ([]string, error) {
	all, err := demoTables(ctx, db)
	if err != nil {
		return nil, err
	}
	recorded := slices.ContainsFunc(all, func(t demoTable) bool { return t.name == demoRunTable && t.marked })
	var foreign, earlier []string
	for _, t := range all {
		// A run killed before it marked its tables left its record.
		if t.marked || recorded && t.name != demoRunTable && slices.Contains(demoMySQLTables, t.name) {
			earlier = append(earlier, t.name)
		} else {
			foreign = append(foreign, t.name)
		}
	}
	if len(foreign) > 0 {
		them := "it"
		if len(foreign) > 1 {
			them = "them"
		}
		return nil, fmt.Errorf("database %s already has %s, named like the demo's tables (%s, %s_*) but not marked as the demo's; the demo changes no table of yours, so it stops: rename or drop %s, or give --database another database",
			database, strings.Join(foreign, ", "), demoMySQLTable, demoMySQLTable, them)
	}
	// The record last: a run killed while dropping finds it still.
	if err := dropTables(ctx, db, withRecordLast(earlier)); err != nil {
		return nil, err
	}
	return earlier, nil
}

// withRecordLast returns names with demoRunTable, if there, moved to the end.
func withRecordLast(names []string) []string {
	out := slices.DeleteFunc(slices.Clone(names), func(n string) bool { return n == demoRunTable })
	if len(out) < len(names) {
		out = append(out, demoRunTable)
	}
	return out
}

// markDemoTables marks the demo's tables that the migrations created.
// The comment is a constant, written into the statement: COMMENT takes no
// placeholder, and the URL may turn interpolateParams off.
func markDemoTables(ctx context.Context, db *sql.DB) error {
	all, err := demoTables(ctx, db)
	if err != nil {
		return err
	}
	for _, t := range all {
		if t.marked || !slices.Contains(demoMySQLTables, t.name) {
			continue
		}
		if _, err := db.ExecContext(ctx, "ALTER TABLE `"+t.name+"` COMMENT = '"+demoTableMark+"'"); err != nil {
			return fmt.Errorf("mark the demo's table %s: %w", t.name, err)
		}
	}
	return nil
}

// dropDemoTables drops the demo's tables at the end of a run, and then its
// record. An error cannot change the demo's result; the next run drops
// what is left.
func dropDemoTables(db *sql.DB) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_ = dropTables(ctx, db, append(slices.Clone(demoMySQLTables), demoRunTable))
}

// dropTables drops names, one statement each, in order.
func dropTables(ctx context.Context, db *sql.DB, names []string) error {
	for _, name := range names {
		if _, err := db.ExecContext(ctx, "DROP TABLE IF EXISTS `"+name+"`"); err != nil {
			return fmt.Errorf("drop the demo's table %s: %w", name, err)
		}
	}
	return nil
}
