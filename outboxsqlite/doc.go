// Package outboxsqlite stores the transactional outbox in an SQLite database
// file, through database/sql and the pure-Go driver modernc.org/sqlite (no
// cgo). It is the zero-install store: one file, no server, for services
// that run on one machine.
//
// # Set-up
//
// Open the file, create the table once with the embedded migrations (or
// print them with Migrator.SQL for another migration tool), then build a
// Writer:
//
//	store, err := outboxsqlite.Open(ctx, "/var/lib/app/app.db", outboxsqlite.Options{CreateIfMissing: true})
//	...
//	defer store.Close()
//	migrator, err := outboxsqlite.NewMigrator(store.DB(), outboxsqlite.Options{})
//	if _, err := migrator.Up(ctx); err != nil { ... }
//	writer, err := outbox.NewWriter[*sql.Tx](store, outbox.WriterConfig{})
//
// Application code writes messages in its own transactions on store.DB(),
// or lets Writer.Transact run the transaction and wake the relays of the
// process right after the commit:
//
//	err = writer.Transact(ctx, func(ctx context.Context, tx *sql.Tx) error {
//		if _, err := tx.ExecContext(ctx, `UPDATE orders SET state = 'paid' WHERE id = ?`, id); err != nil {
//			return err
//		}
//		return writer.Write(ctx, tx, &outbox.Message{Topic: "orders.paid", Key: id, Payload: body})
//	})
//
// Open refuses a missing file unless Options.CreateIfMissing is set, and
// fails with an error naming the path and the fix for a missing directory,
// a file that is not an SQLite database or is damaged, a file this process
// may not write, and a file system without the shared memory WAL mode
// needs. New wraps a *sql.DB the application opened itself.
//
// # Table
//
// Options.Table names the table (default "outbox"), validated as a
// lower-case identifier and only ever put into SQL quoted. The migrations
// make the same columns as outboxpg's but seq (the rowid keeps the insert
// order), numbered in another order: key order is migration 2 here and 3
// there, the lease column 3 here and 2 there. Ids and lease tokens are UUID
// text, times are integer microseconds since the Unix epoch (so they compare
// and sort as numbers), headers are JSON text, and the table is STRICT. The
// migrator records applied versions in <table>_migrations. Partial indexes
// on pending, leased, dead and published rows keep the claim, the idle
// probe, dead-letter listing and retention cheap however large one of these
// sets grows.
//
// A row is a message. Its status is pending, published (kept only for the
// relay's retention period) or dead. available_at says when a pending
// message is due; a claim leaves it alone and sets locked_until, the end of
// the lease (migration 3), together with lease_token, as outboxpg does. A
// crashed relay's messages are due again when their leases run out, in their
// old place in the queue.
//
// # Locking
//
// SQLite has no SKIP LOCKED and no row locks: one connection at a time may
// write to the file. Every write of the Store is a short BEGIN IMMEDIATE
// transaction, which takes that lock before it reads, so a claim reads the
// due rows and leases them with no other writer in between, in this
// process or another: two relays can never claim the same message, and an
// exchange records the last batch's outcomes and claims the next batch
// all or nothing. Nothing is held while publishing: the lease (locked_until
// and lease_token) is what keeps other relays off a claimed batch.
//
// Writers of one Store (its own and RunInTx's) queue in the process before
// they ask SQLite for the lock, which hands it over in order; between
// processes, a writer tries again every 50 µs to 2 ms for up to
// Options.BusyTimeout (5 s) rather than through SQLite's busy_timeout, whose
// sleeps grow to 100 ms and let a busy process keep the lock from the
// others. Transactions that write should be short, since all writers of the
// file take turns: that includes the application's.
//
// Readers do not wait for writers (WAL mode): the idle probe (NextDue), the
// relay's "is anything due?" check before a claim, Stats and the dead-letter
// listing are plain reads. An idle relay writes nothing.
//
// # Time
//
// Due times, leases and backoff are computed with the clock of the machine,
// read after the write lock is taken, to the microsecond. Every process that
// opens the file runs on that machine (SQLite's locks do not work across
// network file systems), so this is the database's clock, as the Store
// interface requires.
//
// # Waking relays
//
// A relay in the writer's process is woken in-process after the commit
// (Writer.Transact, or Writer.Notify after the application's own commit),
// at no cost. A relay in another process watches the file: ListenForWrites
// runs PRAGMA data_version, which changes whenever another connection
// commits, every Options.WatchInterval (10 ms). That is not a query to a
// server but a look at the WAL index in the file's shared memory: it reads
// nothing from disk, writes nothing, and costs the writers nothing. Its
// price is CPU in the relay's process: about 1.7 % of one core at 10 ms on a
// 2-core machine, half of it Go's timer wake-up (a relay that only polls
// uses 0.15 %). Options.WatchInterval trades it against wake-up latency;
// The relay's Config.DisableListen turns it off, and the relay then relies on
// its polling.
//
// # Limits
//
// One machine: the file must be on a local disk, and every writer and relay
// runs there. One writer at a time: commits are serialized, each waits for
// one fsync (synchronous=FULL, so that a message a relay has published can
// never vanish on power loss), which bounds throughput to a few thousand
// commits per second on a fast disk. Beyond that, or for more than one
// machine, use PostgreSQL (outboxpg).
package outboxsqlite
