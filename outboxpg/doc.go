// Package outboxpg stores the transactional outbox in PostgreSQL, through pgx
// v5 (github.com/jackc/pgx/v5) or database/sql on pgx's stdlib driver.
//
// # Set-up
//
// Create the table once, with the embedded migrations (or print them with
// Migrator.SQL for another migration tool), then build a Store and a Writer:
//
//	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
//	...
//	migrator, err := outboxpg.NewMigrator(pool, outboxpg.Options{})
//	if _, err := migrator.Up(ctx); err != nil { ... }
//	store, err := outboxpg.New(pool, outboxpg.Options{})
//	writer, err := outbox.NewWriter[pgx.Tx](store, outbox.WriterConfig{})
//
// Application code then writes messages in its own transactions, and a relay
// publishes them:
//
//	err = writer.Transact(ctx, func(ctx context.Context, tx pgx.Tx) error {
//		if _, err := tx.Exec(ctx, `UPDATE orders SET state = 'paid' WHERE id = $1`, id); err != nil {
//			return err
//		}
//		return writer.Write(ctx, tx, &outbox.Message{Topic: "orders.paid", Key: id, Payload: body})
//	})
//
// Applications on database/sql use NewSQL for an Inserter of *sql.Tx; it
// writes the same rows with the same statement.
//
// # Table
//
// Options.Schema and Options.Table name the table (default public.outbox).
// Both are validated as lower-case identifiers and only ever reach SQL quoted.
// The migrator records applied versions in <table>_migrations in the same
// schema, and concurrent migrators take turns on an advisory lock.
//
// A row is a message. Its status is pending, published (kept only for the
// relay's retention period) or dead. available_at says when a pending message
// is due. A claim leases it by setting locked_until and lease_token, so a
// crashed relay's messages are due again when their leases run out, with no
// clean-up. No index covers those two columns and inserts leave 60 % of each
// page free (fillfactor 40), so a claim is a heap-only (HOT) update: the row is
// rewritten on its own page, no index gets an entry, and the WAL record holds
// only the changed bytes (pg_waldump over a claim of 1,000 rows with 256-byte
// payloads: 167 bytes of WAL per message, against 717 for the same claim
// without room for HOT updates). Partial indexes on pending, dead and
// published rows keep the claim, the idle probe, dead-letter listing and
// retention cheap however large one of these sets grows.
//
// The free space costs writers a little (inserts extend the table more
// often: about 5 % fewer commits per second for 8 concurrent single-message
// writers, see docs/benchmarks.md). A table whose writers matter more than
// its relays' speed can take it back with ALTER TABLE ... SET (fillfactor =
// 100); claims are then ordinary updates, and nothing else changes.
//
// Migration 2 moved the lease out of available_at. Relays of a version
// before it must be stopped before it runs: they would not see the new
// leases and could publish leased messages a second time.
//
// # Round trips
//
// Each of the relay's calls is one statement or one round trip:
//
//   - Writer.Write inserts any number of messages with one INSERT ... SELECT
//     FROM unnest(arrays), so the statement and its parameter count do not
//     depend on the number of messages.
//   - SettleAndClaim sends the outcomes of the last batch (one statement per kind:
//     published, retried, dead) and the claim of the next batch as one
//     pgx.Batch. pgx sends a batch as one pipeline ending in a single Sync
//     message, and PostgreSQL runs all statements before a Sync in one
//     implicit transaction: one round trip, all or nothing. (The first time a
//     pooled connection sees a statement, pgx prepares it, in one extra round
//     trip per connection.)
//   - NextDue, the idle probe, is one read-only query: the first entry of the
//     pending index for messages due later, and the rows already due (those in
//     flight, as only an idle relay asks) for leases that run out first. In
//     key order it reads at most outboxdriver.KeyWindow due rows to find a
//     head, and says "due now" if they all wait behind heads in flight.
//
// # Waking relays in other processes
//
// A relay in the writer's process is woken in-process after the commit, at no
// cost. A relay elsewhere polls, and can also LISTEN: with Options.Notify the
// insert statement also calls pg_notify, which PostgreSQL delivers only if
// the transaction commits. NOTIFY takes a database-wide lock while
// committing, so it costs write throughput under concurrency; it is off by
// default. ListenForWrites holds one connection of its own, which sends
// nothing while idle; the relay's Config.DisableListen turns it off.
//
// With Options.WatchWAL on the relay's Store instead, the writers do
// nothing and their commits take no lock: ListenForWrites streams the
// table's inserts through a temporary logical replication slot and wakes
// after every transaction that inserted into it. That needs wal_level =
// logical and a role with the REPLICATION attribute; without them the relay
// logs one warning naming the fix and polls. The server's walsender decodes
// the cluster's WAL for it, which costs CPU on the database.
// docs/benchmarks.md compares the three (commits/s, database CPU, latency).
package outboxpg
