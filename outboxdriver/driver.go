// Package outboxdriver is the contract between the relay and a store: what a
// database package (outboxpg, outboxsqlite) implements so that an outbox.Relay
// can claim, settle and inspect the messages of its table. Applications do not
// call it; they use the outbox package. The storetest package is the
// conformance suite that proves an implementation keeps the contract.
//
// The stored message itself (Message, Status) is defined here so that the
// relay, every store and the application (through the aliases outbox.Message
// and outbox.Status) share one type without an import cycle.
package outboxdriver

import (
	"context"
	"errors"
	"time"

	"github.com/google/uuid"
)

// ErrNotFound means no message has the given id (or none in the state the
// operation needs, such as dead for a dead-letter retry). outbox.ErrNotFound is
// the same value.
var ErrNotFound = errors.New("outbox: message not found")

// ErrNotMigrated means the store's table does not exist, or exists at an
// older migration than this release needs. Errors that wrap it say which, and
// name the fix (`outbox migrate up`, or the store's Migrator). outbox.ErrNotMigrated
// is the same value.
var ErrNotMigrated = errors.New("outbox: table missing or not migrated")

// SchemaChecker is implemented by stores that can tell whether their table is
// ready for this release. A relay calls it before it starts, and stops with
// its error, rather than failing every claim for as long as it runs.
type SchemaChecker interface {
	// CheckSchema returns nil when the table exists with everything this
	// release uses, an error wrapping ErrNotMigrated when it is missing or
	// at an older migration, and any other error when it could not tell
	// (the database is unreachable, say).
	CheckSchema(ctx context.Context) error
}

// Status is where a stored message is in its life.
type Status string

// The statuses a stored message can have.
const (
	// StatusPending messages wait to be published (or are being published
	// under a lease).
	StatusPending Status = "pending"
	// StatusPublished messages were confirmed by the broker and are kept only
	// because the relay's Retention is above zero.
	StatusPublished Status = "published"
	// StatusDead messages failed permanently or ran out of attempts. They stay
	// until an operator retries or discards them.
	StatusDead Status = "dead"
)

// Message is one message to publish. Application code fills Topic, Key,
// Payload and Headers; the writer fills a zero ID and the store a zero CreatedAt;
// the relay owns the remaining fields.
type Message struct {
	// ID identifies the message everywhere (UUIDv7, so ids sort by creation
	// time). Consumers deduplicate on it.
	ID uuid.UUID
	// Topic routes the message: Kafka topic, AMQP routing key, NATS subject,
	// event type or handler name.
	Topic string
	// Key orders and partitions messages (an aggregate id, say). May be empty.
	Key string
	// Payload is the message body, opaque to the outbox.
	Payload []byte
	// Headers travel with the message (content type, correlation id, trace
	// context).
	Headers map[string]string
	// CreatedAt is when the message was written. When writing, zero means
	// now by the database's clock (PostgreSQL's now(); for SQLite, which runs
	// in the process, the host's clock), stamped by the store.
	CreatedAt time.Time

	// AvailableAt is the earliest time the relay may publish the message. When
	// writing, zero means now; a later time schedules the message.
	AvailableAt time.Time
	// ExpiresAt, when writing, is the time after which the message must not
	// be published: a relay that claims it later dead-letters it as
	// expired instead (outbox.ErrExpired). Zero means never, unless the
	// Writer has a default for the topic (WriterConfig.ExpireAfter). The
	// writer stores it in the Outbox-Expires-At header
	// (outbox.HeaderExpiresAt), which travels to consumers too; messages
	// read back from a store carry it there, not in this field.
	ExpiresAt time.Time
	// Attempts counts failed publish attempts so far.
	Attempts int
	// LastError is the error of the last failed attempt.
	LastError string
	// Status is the stored status.
	Status Status
	// PublishedAt is when the broker confirmed the message (kept rows only).
	PublishedAt time.Time
	// Overtaken counts, for a dead message of a key, the later messages
	// of its key that were published while it was dead, which only a
	// relay set to skip dead messages in key order does (the stores'
	// SkipDeadInKeyOrder). Retried, it is published after them: `outbox
	// dead retry` asks for --force. Admin.Get and Admin.ListDead fill it;
	// claimed messages carry 0.
	Overtaken int
}

// Store is the relay's access to an outbox table. Each database has its own
// implementation (outboxpg, outboxsqlite); all of them pass the conformance
// suite in the storetest package. Application code does not call a Store: it
// writes through a Writer and runs a Relay.
//
// Times that decide when a message is due (leases, backoff) are computed by the
// database's clock, never the caller's, so relays on machines with skewed
// clocks still agree.
type Store interface {
	// SettleAndClaim first records the outcomes in settle (if any) and then leases up
	// to claim.Limit due messages to claim.Token for claim.Lease (if
	// claim.Limit > 0). Where the database allows, both happen in one round
	// trip and one transaction: the per-batch statement count bounds the
	// relay's throughput. Outcomes only apply to messages still leased to
	// settle.Token; a message whose lease expired and was claimed again is left
	// to its new holder. An error wrapping ErrNotMigrated says that the
	// table itself is missing (dropped): a relay stopping then gives up
	// recording settle at once rather than when its lease ends, so wrap it
	// only then, not for a table at an older migration.
	SettleAndClaim(ctx context.Context, settle Settlement, claim Claim) ([]Message, error)

	// Release ends the leases of token on ids without counting an attempt, so
	// the messages are due again at once.
	Release(ctx context.Context, token uuid.UUID, ids []uuid.UUID) error

	// NextDue returns how long until the earliest pending message becomes
	// due by the database's clock (zero or negative: due now), and whether
	// any pending message exists. It is the relay's idle probe: one cheap
	// read-only query (e.g. min(available_at) - now()).
	NextDue(ctx context.Context) (time.Duration, bool, error)

	// PurgePublished deletes up to limit published messages published more
	// than olderThan ago by the database's clock (the cut-off is computed by
	// the database, never from the caller's clock), oldest first, and returns
	// how many it deleted. At most one caller at a time across all processes
	// does the work; the others return (0, nil) at once.
	PurgePublished(ctx context.Context, olderThan time.Duration, limit int) (int, error)

	// Name identifies the table (e.g. "public.outbox") in logs and for the
	// in-process wake-up signal.
	Name() string
}

// Claim asks a Store to lease due messages.
//
// In key order (a store's OrderByKey option) a claim takes a key's message
// only as the start of a run: the head of the key (its oldest pending
// message) when it is due and not leased, and then the key's consecutive
// due messages after it, in insert order, up to the batch's share of the
// key. The claim returns each key's run in insert order, so a publisher that
// keeps the batch's order within a key publishes the key in order; the rest
// of a run behind a message that failed goes back with Settlement.Release.
// No two claims hold messages of one key at once.
type Claim struct {
	// Limit is the most messages to lease; 0 claims nothing.
	Limit int
	// Lease is how long the messages stay leased.
	Lease time.Duration
	// Token identifies the lease holder; outcomes and releases must carry it.
	Token uuid.UUID
}

// KeyOrderClaimer is implemented by stores that can tell whether their
// claims keep key order (the stores' OrderByKey option). The relay sends a
// batch whose keys repeat in waves, one message of a key per round trip,
// only to keep the order such claims promise: a store that reports false
// gets its batches published whole. A store that does not implement it is
// taken to order by key, the safe guess.
type KeyOrderClaimer interface {
	ClaimsInKeyOrder() bool
}

// KeyWalkLimit bounds the keys that one claim in key order (a store's
// OrderByKey option) visits to find the head of each, the oldest pending
// message of its key: the claim walks the key index from key to key, in key
// order, for at most this many keys with pending messages, so its cost does
// not grow with the number of keys. Messages without a key, and the heads
// of keys beyond the walk, are found among the oldest and the newest due
// messages (KeyWindow of each). Every store uses these bounds, so a table
// behaves alike whichever store claims from it.
const KeyWalkLimit = 1024

// KeyWindow is how many of the oldest due messages, and how many of the
// newest, a claim in key order looks at besides its walk of the keys: the
// messages without a key and the heads among them are claimed with the
// walk's heads, so a message without a key, or of a key the walk has not
// reached, is not left to wait for the whole backlog of the other keys.
const KeyWindow = 100

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
	// Release lists messages handed back untried, such as the rest of a
	// key's run after one of its messages failed: their leases end and
	// nothing else changes (no attempt, no error, the same place in the
	// queue), as Store.Release does, but within the exchange.
	Release []uuid.UUID
}

// Empty reports whether the settlement records nothing.
func (s *Settlement) Empty() bool {
	return s.Len() == 0
}

// Len counts the outcomes the settlement records.
func (s *Settlement) Len() int {
	return len(s.Published) + len(s.Retry) + len(s.Dead) + len(s.Release)
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
	// count reset, and returns how many it changed. With no ids it changes
	// nothing: an empty list built by a filter that matched nothing must not
	// mean "all" (that is RetryAllDead).
	RetryDead(ctx context.Context, ids ...uuid.UUID) (int, error)
	// RetryAllDead makes every dead message pending again, as RetryDead does
	// for chosen ones, and returns how many it changed.
	RetryAllDead(ctx context.Context) (int, error)
	// DiscardDead deletes the given dead messages and returns how many it
	// deleted.
	DiscardDead(ctx context.Context, ids ...uuid.UUID) (int, error)
}

// KeyOrderRetrier is implemented by an Admin that can retry dead messages
// only where that keeps their keys' order. A dead message that later
// messages of its key overtook (Message.Overtaken > 0, counted by a relay
// that skips dead messages in key order) would be published after them.
// Checking the counts with Get or ListDead and then calling RetryDead
// leaves a gap in which a relay can overtake a message it retries; here
// the check and the retry are one step. `outbox dead retry` without
// --force, and the console, use it when the store has it.
type KeyOrderRetrier interface {
	// RetryDeadUnlessOvertaken retries the dead messages ids (every dead
	// message if all), as RetryDead and RetryAllDead do, unless any of
	// them is overtaken: then it retries none of them, so that the
	// operator decides on the request as a whole, and returns the
	// overtaken ones, with their counts, to name them. With no ids and
	// not all it changes nothing. On a table without the count (before
	// the store's migration that adds it) nothing is overtaken.
	RetryDeadUnlessOvertaken(ctx context.Context, ids []uuid.UUID, all bool) (retried int, overtaken []Message, err error)
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
	// PublishedLastMinute counts the kept published messages published in
	// the last minute by the database's clock: the recent publishing rate,
	// where retention keeps published rows (zero otherwise).
	PublishedLastMinute int64
	// OldestPending is the age of the oldest pending message (0 if none): the
	// relay's lag.
	OldestPending time.Duration
	// BehindDead counts pending messages that wait, in key order, behind a
	// dead message of their key: they go on once it is retried or
	// discarded. Stores count them whatever their own mode, so that any
	// store of the table (`outbox status`) shows them; relays that skip
	// dead messages do not wait for them.
	BehindDead int64
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
