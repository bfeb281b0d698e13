package outbox

import (
	"context"

	"github.com/go-outbox/outbox/outboxdriver"
)

// TableSource lists the outbox tables a TablesRelay serves: a fixed list,
// or the tables found in a database (every schema matching a pattern, say),
// asked again at every rescan so that tables added and dropped while the
// relay runs are picked up.
type TableSource interface {
	// Tables returns a store for each table to serve now. A store's Name
	// identifies its table from one call to the next: a name that appears
	// gets a relay, and one that disappears has its relay stopped. Names
	// must differ: of two stores with one name, the second is not served
	// (an ERROR says so).
	Tables(ctx context.Context) ([]outboxdriver.Store, error)
}

// TablesListener is a TableSource that hears of writes to any of its
// tables on one connection, where each store's own ListenForWrites would
// hold one connection per table.
type TablesListener interface {
	TableSource
	// ListenForWrites calls wake with a table's name (its store's Name)
	// after each write to it, until ctx ends, for the tables of the latest
	// Tables call (a call that changes them is heard from soon after). Like
	// outboxdriver.WriteListener, it calls wake for every table each time
	// listening starts, the first time included, since writes made while
	// not listening are not heard of, and it reconnects by itself after a
	// failure.
	ListenForWrites(ctx context.Context, wake func(name string)) error
}

// StaticTables is a TableSource of a fixed list of stores.
type StaticTables []outboxdriver.Store

// Tables returns the list.
func (s StaticTables) Tables(context.Context) ([]outboxdriver.Store, error) { return s, nil }
