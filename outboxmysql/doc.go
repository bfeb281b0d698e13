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
// # Key order
//
// With Options.OrderByKey a claim takes only the head of each key (its
// pending message with the least seq, the AUTO_INCREMENT insert order) and
// the run of due messages after it, by the steps of
// docs/design/key-order-claim.md. MySQL has no data-modifying CTEs, so the
// steps run as statements of one READ COMMITTED transaction, as
// outboxsqlite's do: one read of the due heads (the walk of the key index,
// a loose index scan, and the oldest and newest due rows), a locking read
// of the heads (FOR UPDATE SKIP LOCKED, rechecking that each is still due
// and not leased), one read of the runs of every head it locked, a locking
// read of the runs, cut at the first message it could not lock, and the
// lease. Claims side by side pass over each other's heads and never wait
// for a row lock; a deadlock with a settlement runs the transaction again.
// A dead message holds the rest of its key unless
// Options.SkipDeadInKeyOrder, which counts on each dead message the later
// messages of its key published past it (Message.Overtaken, migration 2).
//
// # Servers
//
// The tests run on MariaDB 10.11. The SQL keeps to what MySQL 8.0 accepts
// too (no DELETE ... RETURNING, no JSON tables, backtick-quoted names), but
// MySQL 8 has not been tested.
//
// # Tables beside the outbox table
//
// Migrations 3 to 6 add, as outboxpg's do, the relay registry
// (<table>_relays), the history of failed attempts (<table>_attempts), the
// paused topics (<table>_paused) and the per-minute rollup
// (<table>_minutes); the Store implements the outboxdriver interfaces that
// use them, and Replayer and StuckKeyFinder on the outbox table itself. On a
// table migrated before them, their methods return an error wrapping
// outboxdriver.ErrNotMigrated that names the fix. Pauses and resumes of a
// table take turns under a named lock (GET_LOCK), held until they commit; a
// relay's check of the paused topics after a postponement (PausedAmong)
// answers outboxdriver.ErrPauseChanging while that lock is taken, instead
// of waiting, and the relay checks again at its next heartbeat. A replay leaves out
// messages whose expiry header, in the form the writer stores (RFC 3339 in
// UTC), has passed; any other form is replayed and dead-lettered by the
// relay if it has expired.
//
// # Inbox
//
// InboxTable is outbox.Inbox's table of processed message ids
// (processed_messages, created by its Migrate), with the messages each
// handling wrote to outbox tables of the database in
// processed_messages_outgoing until they are published, so that a record
// outlives them and a duplicate delivery publishes those left pending
// (Store.ClaimIDs, for Relay.PublishNow). Beside it,
// processed_messages_parked (also created by Migrate) keeps the messages
// consumers parked (outbox.KeyParkStore), for `outbox inbox parked` and the
// console: the same semantics as outboxpg's, with the picks by key order
// done as locking reads in READ COMMITTED transactions.
package outboxmysql
