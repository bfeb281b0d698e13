package outbox

import (
	"context"
	"time"

	"github.com/google/uuid"
)

// Store is the relay's access to an outbox table. Each database has its own
// implementation (outboxpg, outboxsqlite); all of them pass the conformance
// suite in the storetest package. Application code does not call a Store: it
// writes through a Writer and runs a Relay.
//
// Times that decide when a message is due (leases, backoff) are computed by the
// database's clock, never the caller's, so relays on machines with skewed
// clocks still agree.
type Store interface {
	// Exchange first records the outcomes in settle (if any) and then leases up
	// to claim.Limit due messages to claim.Token for claim.Lease (if
	// claim.Limit > 0). Where the database allows, both happen in one round
	// trip and one transaction: the per-batch statement count bounds the
	// relay's throughput. Outcomes only apply to messages still leased to
	// settle.Token; a message whose lease expired and was claimed again is left
	// to its new holder.
	Exchange(ctx context.Context, settle Settlement, claim Claim) ([]Message, error)

	// Release ends the leases of token on ids without counting an attempt, so
	// the messages are due again at once.
	Release(ctx context.Context, token uuid.UUID, ids []uuid.UUID) error

	// NextDue returns how long until the earliest pending message becomes
	// due by the database's clock (zero or negative: due now), and whether
	// any pending message exists. It is the relay's idle probe: one cheap
	// read-only query (e.g. min(available_at) - now()).
	NextDue(ctx context.Context) (time.Duration, bool, error)

	// PurgePublished deletes up to limit published messages whose PublishedAt
	// is older than before, and returns how many it deleted. At most one
	// caller at a time across all processes does the work; the others return
	// (0, nil) at once.
	PurgePublished(ctx context.Context, before time.Time, limit int) (int, error)

	// Name identifies the table (e.g. "public.outbox") in logs and for the
	// in-process wake-up signal.
	Name() string
}

// Claim asks a Store to lease due messages.
type Claim struct {
	// Limit is the most messages to lease; 0 claims nothing.
	Limit int
	// Lease is how long the messages stay leased.
	Lease time.Duration
	// Token identifies the lease holder; outcomes and releases must carry it.
	Token uuid.UUID
}

// Settlement is the outcome of publishing one batch, grouped by kind so a
// store records each kind with one statement.
type Settlement struct {
	// Token is the lease token the batch was claimed with.
	Token uuid.UUID
	// Published lists the messages the broker confirmed.
	Published []uuid.UUID
	// KeepPublished keeps published messages (status published, PublishedAt
	// set) instead of deleting them.
	KeepPublished bool
	// Retry lists messages to try again later; each counts one attempt,
	// unless it is marked Unsent.
	Retry []Retry
	// Dead lists messages that failed for good; each counts one attempt.
	Dead []Failure
}

// Empty reports whether the settlement records nothing.
func (s *Settlement) Empty() bool {
	return len(s.Published) == 0 && len(s.Retry) == 0 && len(s.Dead) == 0
}

// Retry is a failed attempt to be retried after Delay (measured from the
// database's now).
type Retry struct {
	ID    uuid.UUID
	Delay time.Duration
	Error string
	// Unsent says the message never left because its destination could not
	// be reached: it is postponed by Delay, moving back in the queue so that
	// messages to other destinations get their turn, with Error recorded
	// but no attempt counted.
	Unsent bool
}

// Counted returns the attempts the retry adds to the message: 0 if it is
// Unsent, else 1.
func (r Retry) Counted() int32 {
	if r.Unsent {
		return 0
	}
	return 1
}

// Failure is a message that is dead-lettered with its last error.
type Failure struct {
	ID    uuid.UUID
	Error string
}

// Admin is the operator's access to a table: status counts and dead letters.
// Stores implement it next to Store; the CLI uses it.
type Admin interface {
	// Stats counts messages by state.
	Stats(ctx context.Context) (Stats, error)
	// Get returns one message by id, or ErrNotFound.
	Get(ctx context.Context, id uuid.UUID) (Message, error)
	// ListDead returns dead messages in id order, after the given id
	// (uuid.Nil for the first page), at most limit of them.
	ListDead(ctx context.Context, after uuid.UUID, limit int) ([]Message, error)
	// RetryDead makes the given dead messages pending again with their attempt
	// count reset, and returns how many it changed. With no ids it retries
	// every dead message.
	RetryDead(ctx context.Context, ids ...uuid.UUID) (int, error)
	// DiscardDead deletes the given dead messages and returns how many it
	// deleted.
	DiscardDead(ctx context.Context, ids ...uuid.UUID) (int, error)
}

// Stats is a snapshot of a table.
type Stats struct {
	// Pending counts messages waiting to be published, including scheduled
	// and retrying ones and those in flight.
	Pending int64
	// InFlight counts pending messages under an unexpired lease.
	InFlight int64
	// Dead counts dead-lettered messages.
	Dead int64
	// Published counts published messages kept for retention.
	Published int64
	// OldestPending is the age of the oldest pending message (0 if none): the
	// relay's lag.
	OldestPending time.Duration
}

// WriteListener is implemented by stores that can tell a relay in another
// process that messages were committed, such as PostgreSQL with LISTEN/NOTIFY.
// The relay uses it when present; it always falls back to polling too.
type WriteListener interface {
	// ListenForWrites calls wake (which never blocks) each time a writer
	// signals a commit, until ctx is done; then it returns ctx's error. It
	// reconnects by itself after connection failures, calling wake after each
	// reconnect since signals may have been missed. It returns another error
	// only when listening cannot work at all (then the relay just polls).
	ListenForWrites(ctx context.Context, wake func()) error
}
