// Package outboxmysql stores outbox messages in a MySQL or MariaDB table,
// through database/sql with github.com/go-sql-driver/mysql: a Store for
// relays (outboxdriver.Store and Admin), an Inserter for outbox.NewWriter on
// *sql.Tx, and a Migrator that creates the table.
//
//	db, err := sql.Open("mysql", "app:secret@tcp(127.0.0.1:3306)/shop?interpolateParams=true")
//	store, err := outboxmysql.New(db, outboxmysql.Options{})
//	m, err := outboxmysql.NewMigrator(db, outboxmysql.Options{})
//	_, err = m.Up(ctx)
//	w, err := outbox.NewWriter[*sql.Tx](store, outbox.WriterConfig{})
//
// The store needs no particular DSN parameter: it binds times as UTC text
// and reads DATETIME columns whether or not parseTime is set, so loc and
// the session's time_zone cannot shift them. interpolateParams=true is
// recommended: without it the driver prepares every statement with
// arguments on the server first, a second round trip per statement.
//
// # Isolation and locks
//
// Claims read with SELECT ... FOR UPDATE SKIP LOCKED under a lease, as
// outboxpg's do. The store runs its own transactions at READ COMMITTED, so
// that its locking reads take no gap locks: under REPEATABLE READ (the
// default) a claim would lock the gap where new messages are inserted, and
// the application's writers would wait for it. The application's own
// transactions may use any isolation level. A deadlock or lock wait timeout
// (errors 1213 and 1205) in a claim or a settlement runs its transaction
// again; the relay never sees it as a failed publish.
//
// # Servers
//
// The tests run on MariaDB 10.11. The SQL keeps to what MySQL 8.0 accepts
// too (no DELETE ... RETURNING, no JSON tables, backtick-quoted names), but
// MySQL 8 has not been tested.
//
// This release claims by due time only: key order (OrderByKey), the inbox
// and the relay's side tables come with later migrations.
package outboxmysql
