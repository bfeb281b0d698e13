package outboxdriver

import (
	"context"
	"time"
)

// MinuteRollup is implemented by stores that keep, beside their table, a
// row per minute (the table <table>_minutes) of what the relays published
// and what failed, with a sample of the backlog: the console's charts of
// the last hour read it instead of scanning the outbox table. Relays add to
// it at each heartbeat. A table migrated before the rollup existed has no
// rollup table: the methods then return an error wrapping ErrNotMigrated.
type MinuteRollup interface {
	// AddMinute adds published and failed to the row of the current minute
	// by the database's clock, creating it if needed. The first call that
	// finds the minute without a sample also samples the pending count and
	// the oldest pending message's age into it, so that one relay per
	// minute pays for that read. It deletes rows older than MinutesKept.
	AddMinute(ctx context.Context, published, failed int64) error
	// Minutes returns the rows of the minutes that began within span
	// before now, oldest first, and the database's clock when it read
	// them. Minutes no relay beat in have no row.
	Minutes(ctx context.Context, span time.Duration) ([]Minute, time.Time, error)
}

// MinutesKept is how long the rollup keeps a minute's row.
const MinutesKept = 24 * time.Hour

// Minute is one row of the rollup.
type Minute struct {
	// Start is the start of the minute, by the database's clock.
	Start time.Time
	// Published and Failed count the messages published, and the failed
	// attempts (retried or dead-lettered; a postponement while the
	// destination is unavailable is not one), that relays reported in the
	// minute.
	Published int64
	Failed    int64
	// Sampled says whether Pending and OldestPending were sampled in the
	// minute: the pending messages and the age of the oldest one then.
	Sampled       bool
	Pending       int64
	OldestPending time.Duration
}
