package outboxdriver

import (
	"context"
	"time"

	"github.com/google/uuid"
)

// AttemptRecorder is implemented by stores that keep, beside their table
// (<table>_attempts), the history of each message's failed attempts: when,
// with what error, and what the relay did next, so that an operator sees
// more than the last error. The relay records the failures of each
// settlement after the store has taken it; nothing that claims or settles
// reads the history. A table migrated before it existed has none: the
// methods then return an error wrapping ErrNotMigrated.
type AttemptRecorder interface {
	// RecordAttempts stores attempts (a newer record of the same message
	// and attempt number replaces the older) and keeps only the last
	// AttemptsKept of each message.
	RecordAttempts(ctx context.Context, attempts []Attempt) error
	// Attempts returns the recorded attempts of message id, oldest first.
	Attempts(ctx context.Context, id uuid.UUID) ([]Attempt, error)
	// ForgetAttempts deletes the records of messages ids: a relay forgets
	// a message's failures once it is published.
	ForgetAttempts(ctx context.Context, ids []uuid.UUID) error
	// LastFailures returns, for each of ids with a recorded attempt, the
	// time of its last one: when a dead message died.
	LastFailures(ctx context.Context, ids []uuid.UUID) (map[uuid.UUID]time.Time, error)
	// PurgeAttempts deletes up to limit records of messages no longer in
	// the table (discarded, or deleted by hand) and returns how many it
	// deleted. It reads the whole history: relays run it rarely.
	PurgeAttempts(ctx context.Context, limit int) (int, error)
}

// AttemptsKept is how many of a message's latest failed attempts a store
// keeps.
const AttemptsKept = 10

// Attempt is one failed attempt to publish a message.
type Attempt struct {
	MessageID uuid.UUID
	// Number counts the message's attempts, from 1.
	Number int
	// At is when it was recorded, by the database's clock (stores fill it).
	At time.Time
	// Outcome is what the relay did next: retry it later, or dead-letter it.
	Outcome AttemptOutcome
	// Class sorts the failure: see the AttemptClass constants.
	Class AttemptClass
	// Error is the publisher's error, whole.
	Error string
}

// AttemptOutcome is what followed a failed attempt.
type AttemptOutcome string

// The outcomes of a failed attempt.
const (
	AttemptRetried AttemptOutcome = "retried"
	AttemptDead    AttemptOutcome = "dead"
)

// AttemptClass sorts failures for grouping dead letters.
type AttemptClass string

// The classes of a failure.
const (
	// ClassRetryable is an error the relay retries.
	ClassRetryable AttemptClass = "retryable"
	// ClassExhausted is a retryable error on the last allowed attempt.
	ClassExhausted AttemptClass = "exhausted"
	// ClassPermanent is an error marked permanent (outbox.Permanent).
	ClassPermanent AttemptClass = "permanent"
	// ClassExpired is a message whose expiry passed (outbox.ErrExpired).
	ClassExpired AttemptClass = "expired"
)

// LatestAttempts returns attempts with only the last record of each
// message and attempt number, in their order: a store's statement may not
// write one row twice.
func LatestAttempts(attempts []Attempt) []Attempt {
	type slot struct {
		id     uuid.UUID
		number int
	}
	last := make(map[slot]int, len(attempts))
	for i, a := range attempts {
		last[slot{a.MessageID, a.Number}] = i
	}
	if len(last) == len(attempts) {
		return attempts
	}
	kept := make([]Attempt, 0, len(last))
	for i, a := range attempts {
		if last[slot{a.MessageID, a.Number}] == i {
			kept = append(kept, a)
		}
	}
	return kept
}
