package outbox

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/google/uuid"
)

// InboxRetentionDefault is how long inbox tables are meant to remember a
// processed message id by default: far longer than any broker redelivers.
const InboxRetentionDefault = 14 * 24 * time.Hour

// MaxConsumerLength is the longest consumer name an Inbox accepts, in bytes.
const MaxConsumerLength = 200

// InboxStore is a table of processed message ids in the consumer's own
// database (outboxpg.InboxTable, outboxsqlite.InboxTable).
type InboxStore[TTx any] interface {
	TxRunner[TTx]
	// MarkProcessed records, inside tx, that consumer processed id, and
	// reports whether it is the first record of it. While another open
	// transaction holds a record of the same id, it waits for that
	// transaction to end: then it reports false if the other committed.
	MarkProcessed(ctx context.Context, tx TTx, consumer string, id uuid.UUID) (bool, error)
}

// Inbox makes a consumer apply each message once, however often the broker
// delivers it. Handle runs the handler in one transaction with a record of
// the message's id: the handler's changes, the record, and any messages the
// handler writes to an outbox in tx commit together or not at all.
// Acknowledge a delivery to the broker only after Handle returned nil.
type Inbox[TTx any] struct {
	store    InboxStore[TTx]
	consumer string
	observer InboxObserver
	relays   map[string]*Relay // by table, for PublishOutgoing
}

// Observe makes the inbox tell o of every message it handles. Call it before
// the first Handle.
func (in *Inbox[TTx]) Observe(o InboxObserver) { in.observer = o }

// NewInbox returns the inbox of one consumer. Consumers with different names
// process the same message independently, each once. It returns a
// *ConfigError if consumer is empty or longer than MaxConsumerLength.
func NewInbox[TTx any](store InboxStore[TTx], consumer string) (*Inbox[TTx], error) {
	if store == nil {
		return nil, &ConfigError{Field: "NewInbox store", Value: "nil", Fix: "pass an inbox table, e.g. outboxpg.NewInboxTable(pool, outboxpg.InboxOptions{})"}
	}
	if consumer == "" || len(consumer) > MaxConsumerLength {
		return nil, &ConfigError{Field: "NewInbox consumer", Value: fmt.Sprintf("%q", consumer),
			Fix: fmt.Sprintf("name the consumer (1 to %d bytes), e.g. \"billing\"; it must stay the same across restarts", MaxConsumerLength)}
	}
	return &Inbox[TTx]{store: store, consumer: consumer}, nil
}

// Apply returns a function that applies each message once through the
// inbox: fn runs in the inbox's transaction, with the record of the message
// id, and a message applied before is skipped (nil). It is the handler of
// the consumer adapters (outboxhttp.NewHandler, outboxnats.Consume).
func (in *Inbox[TTx]) Apply(fn func(ctx context.Context, tx TTx, m Message) error) func(context.Context, Message) error {
	return func(ctx context.Context, m Message) error {
		_, err := in.Handle(ctx, m.ID, func(ctx context.Context, tx TTx) error { return fn(ctx, tx, m) })
		return err
	}
}

// recordOutgoing tells the inbox table, if it keeps them, which messages
// the handler of id wrote to an outbox: its record then outlives them (see
// OutgoingRecorder).
func (in *Inbox[TTx]) recordOutgoing(ctx context.Context, tx TTx, id uuid.UUID, wrote *written) error {
	rec, ok := in.store.(OutgoingRecorder[TTx])
	if !ok {
		return nil
	}
	wrote.mu.Lock()
	defer wrote.mu.Unlock()
	// In the order of the tables' names, not the map's: the same handler
	// then makes the same statements, run after run.
	for _, table := range slices.Sorted(maps.Keys(wrote.byTable)) {
		if err := rec.RecordOutgoing(ctx, tx, in.consumer, id, table, wrote.byTable[table]); err != nil {
			return err
		}
	}
	return nil
}

// Handle applies the message with the given id once. In a new transaction it
// records the id and, if this is the first record, runs fn in the same
// transaction and commits; applied reports whether fn ran and committed.
// For a message processed before, fn does not run and Handle returns
// (false, nil): acknowledge the duplicate. If fn or the commit fails,
// nothing is recorded and Handle returns the error: do not acknowledge, so
// the broker delivers the message again. Messages fn writes through a
// Writer with the context it is given are noted in the record, when the
// inbox table keeps them (OutgoingRecorder): the record is then kept until
// they are published, and its retention counts from then. After the commit,
// the relays of this process that serve those outbox tables are woken, as
// Writer.Transact does, so the messages go out without waiting for a poll.
func (in *Inbox[TTx]) Handle(ctx context.Context, id uuid.UUID, fn func(ctx context.Context, tx TTx) error) (applied bool, err error) {
	if in.observer != nil {
		defer func() { in.observer.Handled(ctx, in.consumer, applied, err) }()
	}
	if id == uuid.Nil {
		return false, fmt.Errorf("outbox: inbox %s: message id is the nil UUID; pass the id the relay published the message with", in.consumer)
	}
	var wrote *written
	err = in.store.RunInTx(ctx, func(tx TTx) error {
		first, err := in.store.MarkProcessed(ctx, tx, in.consumer, id)
		if err != nil || !first {
			return err
		}
		var fnCtx context.Context
		fnCtx, wrote = withWritten(ctx)
		if err := fn(fnCtx, tx); err != nil {
			return err
		}
		if err := in.recordOutgoing(ctx, tx, id, wrote); err != nil {
			return err
		}
		applied = true
		return nil
	})
	if err != nil {
		return false, err
	}
	if applied {
		wakeWritten(wrote)
	}
	in.publishOutgoing(ctx, id, applied, wrote)
	return applied, nil
}
