package outboxdriver

import (
	"context"
	"time"

	"github.com/google/uuid"
)

// StuckKeyFinder is implemented by stores that can list the keys whose
// head, the oldest pending message of the key, has waited long: a key
// retrying the same failure, held behind a dead message, or not reached by
// any relay. `outbox status`, the console and the table gauges show them.
type StuckKeyFinder interface {
	// StuckKeys returns the keys (non-empty ones) whose head has waited
	// more than olderThan by the database's clock, the longest waiting
	// first, at most limit of them, and how many there are in all. A head
	// that failed before has waited since it was written; one never tried
	// since it became due (it was scheduled, or replayed, or retried from
	// the dead letters). It reads every pending message's key, as Stats
	// does.
	StuckKeys(ctx context.Context, olderThan time.Duration, limit int) (keys []StuckKey, total int, err error)
}

// StuckKey is a key whose head has waited long.
type StuckKey struct {
	Key string
	// Head is the key's oldest pending message, and Topic its topic.
	Head  uuid.UUID
	Topic string
	// Waiting is how long the head has waited.
	Waiting time.Duration
	// Attempts and LastError are the head's failed attempts so far.
	Attempts  int
	LastError string
	// BehindDead is set when a dead message of the key came before the
	// head: in key order the key waits until it is retried or discarded.
	BehindDead bool
}
