package outboxmysql

import (
	"log/slog"

	"github.com/go-outbox/outbox/internal/sqlident"
)

// Defaults and limits for Options.
const (
	// MaxTableLength is the longest table name, in bytes: outboxpg's, so
	// that one table name works with every store, and short enough that
	// <table>_migrations stays within MySQL's 64 characters.
	MaxTableLength = 40
	// TableDefault is the table used when Options.Table is empty.
	TableDefault = "outbox"
	// MaxTopicBytes is the longest topic a message may have: the topic
	// column is VARBINARY(1024). InsertTx refuses a longer one rather than
	// let a server without strict SQL mode cut it short.
	MaxTopicBytes = 1024
	// MaxKeyBytes is the longest key a message may have: the key column is
	// VARBINARY(512), short enough to be indexed with the status and insert
	// order in one InnoDB index entry (3072 bytes at most).
	MaxKeyBytes = 512
)

// Options configures a Store, a Writer's inserter or a Migrator. The zero
// value uses the table "outbox" in the database the *sql.DB connects to.
type Options struct {
	// OrderByKey makes the Store's claims keep the order of messages that
	// share a non-empty Key: a message is claimed only when no message of
	// its key inserted before it (by seq, the AUTO_INCREMENT insert order)
	// is still pending, or together with those before it as one run in a
	// batch, in order. So a key's messages are published one after the
	// other, and a message waiting for its retry holds back only the rest
	// of its key. Messages without a key are claimed as usual. Set it on
	// the Store of every relay of the table. A dead message holds the rest
	// of its key until it is retried or discarded (Stats.BehindDead counts
	// what waits), unless SkipDeadInKeyOrder is set. Needs migration 2.
	// Default false.
	OrderByKey bool
	// SkipDeadInKeyOrder, with OrderByKey, lets a key go on past a dead
	// message: its later messages are published while it waits in the
	// dead letters, and retrying it later sends it after them (each dead
	// message counts them, Message.Overtaken). Choose it where a key's
	// messages do not depend on each other, and an undeliverable one must
	// not stop its key. Default false: a dead message holds its key, so
	// that no consumer applies a later message of the key (OrderCancelled)
	// before it (OrderPaid).
	SkipDeadInKeyOrder bool
	// TransactionLeases makes the Store's claims hold their rows in a
	// transaction instead of writing a lease into them: a claim locks its
	// rows (FOR UPDATE) in a transaction that stays open, on a connection
	// of its own, while the relay publishes them, and the next exchange
	// records the outcomes in it and commits it; rows it does not list are
	// left as they were. A message is thus written once between its insert
	// and its deletion, as in a bare claim-and-delete loop, where a leased
	// claim writes it twice (measured in docs/benchmarks.md). If the relay
	// dies, its connection closes and the server rolls the transaction
	// back: the messages are due again at once, not when a lease runs out.
	// A relay that hangs loses the claim when the lease ends (the
	// transaction's context ends, and database/sql rolls it back), and one
	// cut off from the server by the server's wait_timeout, set to the lease
	// on the claim's connection.
	//
	// The costs: each batch in flight holds a connection of the *sql.DB;
	// with SetMaxOpenConns, claims hold at most half of them, leaving the
	// rest to the publisher's own transactions (in-process handlers with an
	// inbox each need one while their batch's claim holds another), writers
	// and the relay's probes; a claim that finds no place is leased by its
	// columns instead, and a warning says so once. Set SetMaxOpenConns, if
	// at all, to twice the relay's Workers plus a few. Messages in flight
	// count as pending, not in flight, in Stats and the console, since no
	// lease is written. Messages leased by columns (outbox.Relay.PublishNow)
	// are settled as usual. A held settlement that fails (a lost
	// connection, say) cannot be tried again: the batch's messages are due
	// again and published again, where a leased claim's settlement is
	// retried under its lease. Not with OrderByKey yet: New refuses the
	// pair. Set it on the relay's Store; writers need nothing. Default
	// false.
	TransactionLeases bool
	// Logger receives what the store handles by itself but an operator must
	// know of, such as a held claim that found no connection to hold.
	// Default slog.Default().
	Logger *slog.Logger
	// Table is the outbox table, in the *sql.DB's current database. It
	// must match ^[a-z_][a-z0-9_]*$ and have at most MaxTableLength bytes.
	// Default TableDefault ("outbox").
	Table string
}

// settings are validated options with every default applied, and the names
// derived from them. Nothing else is ever put into SQL text.
type settings struct {
	table  string // validated, unquoted
	qTable string // quoted table
	qMigr  string // quoted <table>_migrations

	orderByKey   bool
	deadHoldsKey bool // in key order, unless SkipDeadInKeyOrder
	held         bool // claims held in transactions (TransactionLeases)
	logger       *slog.Logger
}

// resolve applies defaults and validates o.
func (o Options) resolve() (settings, error) {
	table := o.Table
	if table == "" {
		table = TableDefault
	}
	if err := sqlident.Check("outboxmysql.Options.Table", table, MaxTableLength); err != nil {
		return settings{}, err
	}
	if o.TransactionLeases && o.OrderByKey {
		return settings{}, errHeldWithKeyOrder
	}
	logger := o.Logger
	if logger == nil {
		logger = slog.Default()
	}
	return settings{
		table:  table,
		qTable: quote(table),
		qMigr:  quote(table + "_migrations"),

		orderByKey:   o.OrderByKey,
		deadHoldsKey: o.OrderByKey && !o.SkipDeadInKeyOrder,
		held:         o.TransactionLeases,
		logger:       logger,
	}, nil
}

// quote quotes an identifier that sqlident.Check accepted with backticks,
// which MySQL and MariaDB take whatever the sql_mode (double quotes quote
// identifiers only under ANSI_QUOTES).
func quote(name string) string { return "`" + name + "`" }

// skipsDead reports whether, in key order, the store lets a key go on past
// a dead message, and so counts the messages that overtake it.
func (s settings) skipsDead() bool { return s.orderByKey && !s.deadHoldsKey }
