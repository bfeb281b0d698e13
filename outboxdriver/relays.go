package outboxdriver

import (
	"context"
	"time"

	"github.com/google/uuid"
)

// RelayRegistry is implemented by stores that keep, beside their table, a
// row per running relay (the table <table>_relays), so that operators can
// see which relays serve a table and whether any is alive. A relay beats
// every Config.HeartbeatInterval; one that stops cleanly removes its row,
// one that dies leaves it to go stale. The registry is for people and
// alerts only: nothing in claiming or settling reads it.
//
// A table migrated before the registry existed has no registry table: the
// methods then return an error wrapping ErrNotMigrated, the relay logs it
// once and runs on, and `outbox status` names the fix.
type RelayRegistry interface {
	// BeatRelay inserts or refreshes beat's row, stamping it as seen now by
	// the database's clock (started at that time too, when inserted), and
	// deletes rows not seen for longer than beat.Forget.
	BeatRelay(ctx context.Context, beat RelayBeat) error
	// RemoveRelay deletes the row of relay id; none is no error.
	RemoveRelay(ctx context.Context, id uuid.UUID) error
	// Relays lists the registered relays, the most recently seen first,
	// and the database's clock when it read them, to judge their ages by.
	Relays(ctx context.Context) ([]RelayRow, time.Time, error)
}

// RelayBeat is what a relay says of itself at each beat. Its times are ages
// by the relay's clock, which the store turns into times by the database's,
// so that relays on machines with skewed clocks still compare.
type RelayBeat struct {
	// ID identifies one run of a relay (a new one each Run).
	ID uuid.UUID
	// Host, PID and Version say where it runs and what it is: the host
	// name, the process id and the outbox module's version.
	Host    string
	PID     int
	Version string
	// Config is the relay's configuration as JSON, for operators to read.
	Config string
	// Interval is the relay's heartbeat interval: a row not seen for a few
	// of them is stale.
	Interval time.Duration
	// SinceClaim and SincePublish are how long ago the relay last claimed
	// messages and last had one published; negative when it has not yet.
	SinceClaim   time.Duration
	SincePublish time.Duration
	// Forget is how long a row may go unseen before a beat deletes it.
	Forget time.Duration
}

// RelayRow is one registered relay, as a store lists it.
type RelayRow struct {
	ID       uuid.UUID
	Host     string
	PID      int
	Version  string
	Config   string
	Interval time.Duration
	// StartedAt is the relay's first beat; SeenAt its last one.
	StartedAt time.Time
	SeenAt    time.Time
	// LastClaimAt and LastPublishAt are zero when it has not yet.
	LastClaimAt   time.Time
	LastPublishAt time.Time
}

// RelayStaleBeats is how many heartbeat intervals a relay's row may go
// unseen and still count as live.
const RelayStaleBeats = 3

// Live reports whether the relay was seen within RelayStaleBeats of its
// heartbeat intervals before now.
func (r RelayRow) Live(now time.Time) bool {
	return now.Sub(r.SeenAt) <= RelayStaleBeats*r.Interval
}
