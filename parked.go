package outbox

import (
	"context"
	"time"

	"github.com/google/uuid"
)

// ParkedMessage is a message a consumer gave up on, kept in its own database
// (a ParkStore) until an operator retries or discards it.
type ParkedMessage struct {
	Message
	// Attempts is how many times the handler failed on it before it was
	// parked (the last time, when it was parked again after a retry); 0
	// for a message parked only to wait (Waiting).
	Attempts int
	// Behind is, for a waiting message (Waiting), the parked message of
	// its key it waits behind: the key's first parked message. It is
	// uuid.Nil when the message does not wait, or is itself its key's
	// first (those before it were retried or discarded, and it is being,
	// or is about to be, applied).
	Behind uuid.UUID
	// Consumer is the consumer that parked it: the adapter's consumer name
	// (outboxamqp.ConsumerConfig.Name, outboxnats.ConsumerConfig.Durable,
	// outboxkafka.ConsumerConfig.Group).
	Consumer string
	// Error is the handler's last error, or for a waiting message
	// "waiting behind parked message <id> of key <key>".
	Error string
	// Overtaken counts the later messages of its key that the consumer
	// applied after this one was parked, which only a consumer that skips
	// parked messages in key order does (SkipParkedInKeyOrder). Retrying
	// it applies it after them: `outbox inbox parked retry` asks for
	// --force.
	Overtaken int
	// ParkedAt is when it was (last) parked.
	ParkedAt time.Time
	// RetryRequested is true from an operator's request to retry it until a
	// consumer process takes it.
	RetryRequested bool
	// TakenAt is when a consumer process took it for a retry (TakeRetries,
	// TakeNextWaiting): it is in that process's handler until the process
	// unparks it or parks it again, no process takes it again, and an
	// operator's retry or discard leaves it alone meanwhile. It is the zero
	// time when no process has it. It also marks the take: the inbox
	// tables' end of a retry names it, and acts only on its own take. A
	// process that stops, or fails to record the end, hands the message
	// back; one that is killed leaves it taken, and `outbox inbox parked
	// retry --taken` (or discard --taken) takes it back.
	TakenAt time.Time
	// Waiting is true for a message the handler never ran on: it was
	// parked because an earlier message of its key was (key order, see
	// KeyParkStore). It is applied, in arrival order, once the messages
	// ahead of it are retried with success or discarded.
	Waiting bool
}

// ParkStore keeps the messages a consumer parks, in the consumer's own
// database, so that they can be listed and retried the same way whatever
// the broker (`outbox inbox parked`). The inbox tables implement it
// (outboxpg.InboxTable, outboxsqlite.InboxTable); set it as the Parked
// field of a consumer adapter's config.
//
// A retry goes through the consumer that parked the message: an operator
// requests it (the tables' RequestRetry), a running consumer process of that
// name takes it (TakeRetries) and hands it to its handler again, with a new
// round of attempts. If the handler succeeds the message is unparked; if it
// fails again, the message is parked again with the new error, in place.
// Between the take and that end the message is taken
// (ParkedMessage.TakenAt): the tables' retry and discard leave it alone, so
// that it is handed out once and its key does not go on while it is in a
// handler. A process takes one at a time. A process that stops meanwhile,
// or fails to unpark or park it again, hands it back (its retry is
// requested again) when the store can; one that is killed leaves it taken,
// and `outbox inbox parked retry --taken` takes it back.
type ParkStore interface {
	// Park keeps m as parked by consumer after attempts failed attempts,
	// the last with the error reason. Parking a message the consumer
	// already parked replaces its error, attempts and time, and clears a
	// retry request.
	Park(ctx context.Context, consumer string, m Message, attempts int, reason string) error
	// TakeRetries returns up to limit of consumer's parked messages whose
	// retry was requested and that no process has taken, oldest parked
	// first, and clears their request in the same statement, marking them
	// taken: two processes never take the same request. Each is taken
	// until it is unparked or parked again, so a caller takes no more than
	// it is about to handle (the consumers take one at a time).
	// A waiting message (KeyParkStore) is taken only once it is the first
	// of its key.
	TakeRetries(ctx context.Context, consumer string, limit int) ([]Message, error)
	// Unpark forgets consumer's parked message id, once handled. It is not
	// an error if there is none. If the message was its key's first, the
	// key's next waiting message (KeyParkStore) has its retry requested in
	// the same transaction, so a consumer that stops before taking it does
	// not stall the key.
	Unpark(ctx context.Context, consumer string, id uuid.UUID) error
}

// KeyParkStore is a ParkStore that keeps key order across a parked message:
// a consumer (not set to SkipParkedInKeyOrder) parks the later messages of
// a key that has a parked message too, as waiting behind it, instead of
// applying them; once the first is retried with success or discarded, the
// waiting ones are applied in the order they arrived. The inbox tables
// implement it.
//
// A key is held for one consumer: the first parked message of the key (in
// arrival order) is its head, the others wait. Messages with no key are
// never held.
type KeyParkStore interface {
	ParkStore
	// CountOvertaken adds one to Overtaken of every message of key that
	// consumer parked: a later message of the key was just applied. A
	// consumer that skips parked messages calls it after each message of
	// a key it applied.
	CountOvertaken(ctx context.Context, consumer, key string) error
	// ParkBehind parks m as waiting if consumer has a parked message of
	// m.Key, and returns the key's head (m.ID itself when m is already
	// its head); it returns uuid.Nil and parks nothing when the key has
	// no parked message. Finding the head and parking m are one step, so
	// that a concurrent unpark of the key's last message either comes
	// first (m is not held) or sees m (and applies it).
	ParkBehind(ctx context.Context, consumer string, m Message) (head uuid.UUID, err error)
	// TakeNextWaiting returns consumer's first parked message of key if
	// it waits, no process has taken it, and its retry is requested (the unpark or discard of the
	// message before it requested it), and clears that request, marking
	// it taken; ok is false otherwise. TakeRetries and TakeNextWaiting take a request only
	// by clearing it, so one of them hands the message out. The caller applies it and
	// unparks it, or parks it again (it then no longer waits: it is the
	// key's new head).
	TakeNextWaiting(ctx context.Context, consumer, key string) (m Message, ok bool, err error)
}
