package outboxmysql

import (
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
	return settings{
		table:  table,
		qTable: quote(table),
		qMigr:  quote(table + "_migrations"),
	}, nil
}

// quote quotes an identifier that sqlident.Check accepted with backticks,
// which MySQL and MariaDB take whatever the sql_mode (double quotes quote
// identifiers only under ANSI_QUOTES).
func quote(name string) string { return "`" + name + "`" }
