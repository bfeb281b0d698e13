package outboxsqlite

import (
	"cmp"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/sqlident"
)

// Defaults and limits for Options.
const (
	// BusyTimeoutDefault is how long a write waits for another writer to
	// finish when Options.BusyTimeout is zero.
	BusyTimeoutDefault = 5 * time.Second
	// MaxTableLength is the longest table name, in bytes. SQLite has no limit
	// of its own; this is outboxpg's, so one table name works with both stores.
	MaxTableLength = 40
	// TableDefault is the table used when Options.Table is empty.
	TableDefault = "outbox"
	// WatchIntervalDefault is how often ListenForWrites looks for commits
	// when Options.WatchInterval is zero.
	WatchIntervalDefault = 10 * time.Millisecond
)

// Options configures a Store or a Migrator. The zero value uses the table
// "outbox", refuses to create a missing database file, waits up to 5 s for
// the write lock and watches for commits every 10 ms.
type Options struct {
	// BusyTimeout bounds how long a write transaction waits for the write
	// lock while another connection, in this process or another, holds it.
	// The Store's transactions (RunInTx's too) wait for it themselves, in
	// short steps, and leave it as SQLite's busy_timeout on the connections
	// they used; Open sets that on every connection, for the application's
	// own transactions. Default BusyTimeoutDefault (5 s); at most one hour.
	BusyTimeout time.Duration
	// CreateIfMissing lets Open create the database file when it does not
	// exist (its directory must exist). Default false: a missing file is an
	// error, so a typo in a path never turns into a new, empty database.
	// Set it where the table is created (`outbox migrate up` does).
	CreateIfMissing bool
	// OrderByKey makes the Store's claims keep the order of messages that
	// share a non-empty Key: a message is claimed only when no message of
	// its key inserted before it (by rowid; SQLite commits one transaction
	// at a time, so that is commit order) is still pending, or together
	// with those before it as one run in a batch, in order. So a key's
	// messages are published one after the other, and a message waiting for
	// its retry holds back only the rest of its key. Messages without a key
	// are claimed as usual. Set it on the Store of every relay of the table.
	// A dead message holds the rest of its key until it is retried or
	// discarded (Stats.BehindDead counts what waits), unless
	// SkipDeadInKeyOrder is set. Default false.
	OrderByKey bool
	// SkipDeadInKeyOrder, with OrderByKey, lets a key go on past a dead
	// message: its later messages are published while it waits in the
	// dead letters, and retrying it later sends it after them. Choose it
	// where a key's messages do not depend on each other, and an
	// undeliverable one must not stop its key. Default false: a dead
	// message holds its key, so that no consumer applies a later message
	// of the key (OrderCancelled) before it (OrderPaid).
	SkipDeadInKeyOrder bool
	// Logger receives what the store handles by itself but an operator must
	// know of, such as a write watcher that failed and starts again.
	// Default slog.Default().
	Logger *slog.Logger
	// Table is the outbox table. It must match ^[a-z_][a-z0-9_]*$, have at
	// most MaxTableLength bytes and not start with "sqlite_" (SQLite
	// reserves those names). Default TableDefault ("outbox").
	Table string
	// WatchInterval is how often ListenForWrites checks whether any
	// connection committed to the database file (PRAGMA data_version, a look
	// at the file's shared memory). A relay in another process wakes within
	// about this long of a commit. An idle relay's watcher costs about 1.7 %
	// of one core at 10 ms, 1.4 % at 20 ms (see ListenForWrites). Default
	// WatchIntervalDefault (10 ms); 1 ms to 10 s.
	WatchInterval time.Duration
}

// settings are validated options with every default applied, and the names
// derived from them. Nothing else is ever put into SQL text.
type settings struct {
	table     string // validated, unquoted
	qTable    string // quoted table
	qMigr     string // quoted <table>_migrations
	qRelays   string // quoted <table>_relays, the relay registry
	qAttempts string // quoted <table>_attempts, failed attempts
	qPaused   string // quoted <table>_paused, paused topics
	qMinutes  string // quoted <table>_minutes, the per-minute rollup

	busyTimeout     time.Duration
	createIfMissing bool
	orderByKey      bool
	deadHoldsKey    bool // in key order, unless SkipDeadInKeyOrder
	logger          *slog.Logger
	watchInterval   time.Duration
}

// resolve applies defaults and validates o.
func (o Options) resolve() (settings, error) {
	table := o.Table
	if table == "" {
		table = TableDefault
	}
	if err := sqlident.Check("outboxsqlite.Options.Table", table, MaxTableLength); err != nil {
		return settings{}, err
	}
	if strings.HasPrefix(table, "sqlite_") {
		return settings{}, &outbox.ConfigError{Field: "outboxsqlite.Options.Table", Value: fmt.Sprintf("%q", table),
			Fix: `SQLite reserves names starting with "sqlite_"; pick another name`}
	}
	s := settings{
		table:           table,
		qTable:          sqlident.Quote(table),
		qMigr:           sqlident.Quote(table + "_migrations"),
		qRelays:         sqlident.Quote(table + "_relays"),
		qAttempts:       sqlident.Quote(table + "_attempts"),
		qPaused:         sqlident.Quote(table + "_paused"),
		qMinutes:        sqlident.Quote(table + "_minutes"),
		busyTimeout:     o.BusyTimeout,
		createIfMissing: o.CreateIfMissing,
		orderByKey:      o.OrderByKey,
		deadHoldsKey:    o.OrderByKey && !o.SkipDeadInKeyOrder,
		logger:          cmp.Or(o.Logger, slog.Default()),
		watchInterval:   o.WatchInterval,
	}
	switch {
	case s.busyTimeout == 0:
		s.busyTimeout = BusyTimeoutDefault
	case s.busyTimeout < 0 || s.busyTimeout > time.Hour:
		return settings{}, &outbox.ConfigError{Field: "outboxsqlite.Options.BusyTimeout", Value: o.BusyTimeout,
			Fix: "use a positive duration up to 1h, or 0 for the default " + BusyTimeoutDefault.String()}
	}
	switch {
	case s.watchInterval == 0:
		s.watchInterval = WatchIntervalDefault
	case s.watchInterval < time.Millisecond || s.watchInterval > 10*time.Second:
		return settings{}, &outbox.ConfigError{Field: "outboxsqlite.Options.WatchInterval", Value: o.WatchInterval,
			Fix: "use 1ms to 10s, or 0 for the default " + WatchIntervalDefault.String()}
	}
	return s, nil
}
