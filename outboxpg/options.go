package outboxpg

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"log/slog"

	"github.com/go-outbox/outbox/internal/sqlident"
)

// Defaults and limits for Options.
const (
	// SchemaDefault is the schema used when Options.Schema is empty.
	SchemaDefault = "public"
	// TableDefault is the table used when Options.Table is empty.
	TableDefault = "outbox"
	// MaxSchemaLength is the longest schema name, in bytes: PostgreSQL's
	// identifier limit.
	MaxSchemaLength = 63
	// MaxTableLength is the longest table name, in bytes. It is shorter than
	// PostgreSQL's limit to leave room for the suffixes of the indexes and of
	// the migrations table ("_migrations").
	MaxTableLength = 40
)

// Options configures a Store or an SQLWriter. The zero value uses the table
// public.outbox, does not NOTIFY on writes, and listens for notifications in
// ListenForWrites.
type Options struct {
	// Notify makes every write also send a NOTIFY on the table's channel, so
	// relays in other processes wake within milliseconds. NOTIFY fires only if
	// the transaction commits, but it takes a database-wide lock during the
	// commit, which costs throughput when many transactions write at once
	// (measured: 11-19 % fewer commits/s for 8-32 writers). Leave it off when
	// the relay runs in the writers' process (the in-process wake-up is free)
	// or when the polling interval is short enough. Default false.
	Notify bool
	// OrderByKey makes the Store's claims keep the order of messages that
	// share a non-empty Key: a message is claimed only when no message of
	// its key inserted before it (by the seq column, drawn at INSERT) is
	// still pending, or together with those before it as one run in a
	// batch, in order (a hot key fills a batch). So a key's messages are
	// published one after the other in insert order, and a message that
	// waits for its retry holds back only the rest of its key. Insert order is commit order when the
	// writes of a key are serialized (by a lock on the aggregate's row).
	// Messages without a key are claimed as usual. Set it on the Store of
	// every relay of the table: a relay without it claims regardless of
	// keys. A dead message holds the rest of its key until it is retried or
	// discarded (Stats.BehindDead counts what waits), unless
	// SkipDeadInKeyOrder is set. Default false.
	OrderByKey bool
	// SkipDeadInKeyOrder, with OrderByKey, lets a key go on past a dead
	// message: its later messages are published while it waits in the
	// dead letters, and retrying it later sends it after them. Choose it
	// where a key's messages do not depend on each other, and an
	// undeliverable one must not stop its key. Default false: a dead
	// message holds its key, so that no consumer applies a later message
	// of the key (OrderCancelled) before it (OrderPaid). Set it alike on
	// every relay of the table.
	SkipDeadInKeyOrder bool
	// TransactionLeases makes the Store's claims hold their rows in a
	// transaction instead of writing a lease into them: a claim deletes its
	// rows in a transaction that stays open, on a connection of its own,
	// while the relay publishes them, and the next exchange commits it, with
	// the rows that were not published put back as their outcome says
	// (retried, released, dead, or kept as published under Retention). A
	// message is thus written once between its insert and its deletion, as
	// in a bare DELETE ... RETURNING loop, where a leased claim writes it
	// twice (measured: the drain goes from about half of that loop's rate
	// to most of it; docs/benchmarks.md). If the relay dies, its
	// connection closes and PostgreSQL rolls the transaction back: the
	// messages are due again at once, not when a lease runs out. A relay
	// that hangs is cut off by idle_in_transaction_session_timeout, set to
	// the lease for each claim's transaction.
	//
	// The costs: each batch in flight holds a pooled connection, and
	// claims hold at most half of the pool's connections, leaving the rest
	// to the publisher's own transactions (in-process handlers with an
	// inbox each need one while their batch's claim holds another), writers
	// and the relay's probes; a claim that finds no place is leased by its
	// columns instead, and a warning says so once. Size the pool's MaxConns
	// at twice the relay's Workers plus a few. The open transactions hold
	// back vacuum for as long as a publish lasts; messages in flight count
	// as pending, not in flight, in Stats and the console, since no lease
	// is written; and the claim does not work through a pooler in
	// statement mode (transaction mode is fine). Messages leased by
	// columns (outbox.Relay.PublishNow) are settled as usual. Set it on the
	// relay's Store; writers need nothing. Default false.
	TransactionLeases bool
	// Logger receives what the store handles by itself but an operator must
	// know of, such as rows it could not dead-letter. Default slog.Default().
	Logger *slog.Logger
	// Schema holds the table. It must match ^[a-z_][a-z0-9_]*$ and have at
	// most MaxSchemaLength bytes. Default SchemaDefault ("public").
	Schema string
	// Table is the outbox table. It must match ^[a-z_][a-z0-9_]*$ and have at
	// most MaxTableLength bytes. Default TableDefault ("outbox").
	Table string
	// WatchWAL makes ListenForWrites (the relay's cross-process wake-up)
	// watch the table's inserts in the write-ahead log instead of
	// LISTENing: writers need nothing (set it on the relay's Store only),
	// and their commits take no lock for it, unlike Notify's. The relay
	// opens a logical replication connection, creates a TEMPORARY slot
	// (pgoutput) that the server drops when the session ends, however it
	// ends, and wakes after every transaction that inserted into the table.
	// It confirms what it receives every 10 s, so the slot holds back no
	// WAL. It needs wal_level = logical, one replication slot and one WAL
	// sender per relay (max_replication_slots, max_wal_senders), a role with
	// the REPLICATION attribute, and the publication named after the
	// table's NOTIFY channel ("outbox_<schema>_<table>"): created if
	// missing (FOR TABLE ... WITH (publish = 'insert'), which takes CREATE
	// on the database and ownership of the table), or created beforehand
	// by the table's owner. It does not work through a transaction-mode
	// pooler. The server decodes all of the cluster's WAL for the slot: CPU
	// on the database that grows with its write volume, and a wake-up comes
	// only once everything committed before it is decoded, so a burst of
	// large transactions elsewhere delays it (by seconds, in tests); polling
	// stays the safety net. When the server or
	// the role does not allow it, ListenForWrites returns an error wrapping
	// ErrWALWatchUnavailable that names the fix, and the relay logs it
	// once and polls. Default false.
	WatchWAL bool
}

// names holds validated identifiers and everything derived from them. Nothing
// else is ever put into SQL text.
type names struct {
	schema string // validated, unquoted
	table  string // validated, unquoted

	qSchema   string // quoted schema
	qTable    string // quoted schema.table
	qMigr     string // quoted schema.table_migrations
	qRelays   string // quoted schema.table_relays, the relay registry
	qAttempts string // quoted schema.table_attempts, failed attempts
	qPaused   string // quoted schema.table_paused, paused topics
	qMinutes  string // quoted schema.table_minutes, the per-minute rollup

	channel string // NOTIFY channel, unquoted (pg_notify takes it as text)

	purgeLockKey   int64 // advisory lock taken by PurgePublished
	migrateLockKey int64 // advisory lock taken by the migrator
}

// resolve applies defaults and validates the identifiers.
func (o Options) resolve() (names, error) {
	schema, table := o.Schema, o.Table
	if schema == "" {
		schema = SchemaDefault
	}
	if table == "" {
		table = TableDefault
	}
	if err := sqlident.Check("outboxpg.Options.Schema", schema, MaxSchemaLength); err != nil {
		return names{}, err
	}
	if err := sqlident.Check("outboxpg.Options.Table", table, MaxTableLength); err != nil {
		return names{}, err
	}
	n := names{
		schema:    schema,
		table:     table,
		qSchema:   sqlident.Quote(schema),
		qTable:    sqlident.Quote(schema) + "." + sqlident.Quote(table),
		qMigr:     sqlident.Quote(schema) + "." + sqlident.Quote(table+"_migrations"),
		qRelays:   sqlident.Quote(schema) + "." + sqlident.Quote(table+"_relays"),
		qAttempts: sqlident.Quote(schema) + "." + sqlident.Quote(table+"_attempts"),
		qPaused:   sqlident.Quote(schema) + "." + sqlident.Quote(table+"_paused"),
		qMinutes:  sqlident.Quote(schema) + "." + sqlident.Quote(table+"_minutes"),
		channel:   channelName(schema, table),
	}
	n.purgeLockKey = lockKey("outboxpg purge " + schema + "." + table)
	// One key for every outbox table: concurrent migrators of different
	// tables in one schema would otherwise race on CREATE SCHEMA IF NOT EXISTS.
	n.migrateLockKey = lockKey("outboxpg migrate")
	return n, nil
}

// channelName derives the NOTIFY channel from the table's names. Channel names
// are identifiers (at most 63 bytes), so long names are cut and made unique
// again with a hash.
func channelName(schema, table string) string {
	name := "outbox_" + schema + "_" + table
	if len(name) <= 63 {
		return name
	}
	sum := sha256.Sum256([]byte(schema + "." + table))
	return name[:50] + "_" + hex.EncodeToString(sum[:6])
}

// lockKey maps a name to a pg_advisory_lock key.
func lockKey(name string) int64 {
	sum := sha256.Sum256([]byte(name))
	return int64(binary.BigEndian.Uint64(sum[:8]))
}

// deadHoldsKey reports whether, in key order, a dead message holds the rest
// of its key.
func (o Options) deadHoldsKey() bool { return o.OrderByKey && !o.SkipDeadInKeyOrder }
