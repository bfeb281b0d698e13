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
	// parked (the last time, when it was parked again after a retry).
	Attempts int
	// Consumer is the consumer that parked it: the adapter's consumer name
	// (outboxamqp.ConsumerConfig.Name, outboxnats.ConsumerConfig.Durable,
	// outboxkafka.ConsumerConfig.Group).
	Consumer string
	// Error is the handler's last error.
	Error string
	// ParkedAt is when it was (last) parked.
	ParkedAt time.Time
	// RetryRequested is true from an operator's request to retry it until a
	// consumer process takes it.
	RetryRequested bool
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
// fails again, the message is parked again with the new error. A message
// taken by a process that stops before it is done stays parked, its request
// cleared: request its retry again.
type ParkStore interface {
	// Park keeps m as parked by consumer after attempts failed attempts,
	// the last with the error reason. Parking a message the consumer
	// already parked replaces its error, attempts and time, and clears a
	// retry request.
	Park(ctx context.Context, consumer string, m Message, attempts int, reason string) error
	// TakeRetries returns up to limit of consumer's parked messages whose
	// retry was requested, oldest parked first, and clears their request in
	// the same statement: two processes never take the same request.
	TakeRetries(ctx context.Context, consumer string, limit int) ([]Message, error)
	// Unpark forgets consumer's parked message id, once handled. It is not
	// an error if there is none.
	Unpark(ctx context.Context, consumer string, id uuid.UUID) error
}
