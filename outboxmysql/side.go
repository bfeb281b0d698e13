package outboxmysql

import (
	"fmt"

	"github.com/go-outbox/outbox/outboxdriver"
)

// The tables beside the outbox table, named <table>_<suffix>, and the
// migrations that create them.
const (
	sideRelays   = "relays"   // the relay registry, migration 3
	sideAttempts = "attempts" // the history of failed attempts, migration 4
	sidePaused   = "paused"   // paused topics, migration 5
	sideMinutes  = "minutes"  // the per-minute rollup, migration 6
)

// side returns the quoted name of the table beside s's named by suffix.
func (s settings) side(suffix string) string { return quote(s.table + "_" + suffix) }

// sideTableError wraps err of an operation on a table beside the outbox
// table (what, named by suffix, made by migration); a missing table wraps
// ErrNotMigrated with the fix, which gains what forWhat says.
func (s *Store) sideTableError(op, what, suffix string, migration int, forWhat string, err error) error {
	name := s.set.side(suffix)
	if isNoSuchTable(err) {
		return fmt.Errorf("%w: outboxmysql: %s: %s %s does not exist (migration %d); run `outbox migrate up` %s",
			outboxdriver.ErrNotMigrated, op, what, name, migration, forWhat)
	}
	return fmt.Errorf("outboxmysql: %s in %s: %w", op, name, err)
}
