package outbox

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
)

// Inserter stores messages inside a caller's transaction of type TTx (pgx.Tx,
// *sql.Tx). Each store package provides one per transaction type it supports.
type Inserter[TTx any] interface {
	// InsertTx inserts msgs in one round trip. It never commits or rolls back.
	InsertTx(ctx context.Context, tx TTx, msgs []*Message) error
	// Name identifies the table, as Store.Name does.
	Name() string
}

// TxRunner runs a function in a new transaction and commits it if the function
// returns nil, rolling back otherwise. Inserters that own a connection pool
// implement it so Writer.Transact can wake relays right after the commit.
type TxRunner[TTx any] interface {
	RunInTx(ctx context.Context, fn func(tx TTx) error) error
}

// WriterConfig configures a Writer. The zero value is ready to use.
type WriterConfig struct {
	// MaxPayloadBytes rejects larger payloads. 0 means
	// MaxPayloadBytesDefault (1 MiB); -1 means no limit.
	MaxPayloadBytes int
}

// Writer adds messages to the outbox inside the application's transactions.
// It is safe for concurrent use.
type Writer[TTx any] struct {
	inserter   Inserter[TTx]
	maxPayload int
	wake       *wakeTopic
}

// NewWriter returns a Writer that stores messages through inserter.
func NewWriter[TTx any](inserter Inserter[TTx], cfg WriterConfig) (*Writer[TTx], error) {
	if inserter == nil {
		return nil, &ConfigError{Field: "NewWriter inserter", Value: "nil", Fix: "pass a store, e.g. outboxpg.New(pool, outboxpg.Options{})"}
	}
	maxPayload := cfg.MaxPayloadBytes
	switch {
	case maxPayload == 0:
		maxPayload = MaxPayloadBytesDefault
	case maxPayload == -1:
		maxPayload = 0
	case maxPayload < 0:
		return nil, &ConfigError{Field: "WriterConfig.MaxPayloadBytes", Value: maxPayload, Fix: "use a positive byte count, 0 for the 1 MiB default, or -1 for no limit"}
	}
	return &Writer[TTx]{inserter: inserter, maxPayload: maxPayload, wake: wakeTopicFor(inserter.Name())}, nil
}

// Write validates msgs, fills in missing IDs (UUIDv7) and CreatedAt, and
// inserts them in tx with one round trip. Nothing is published unless tx
// commits. Write never commits or rolls back tx. If any message is invalid,
// nothing is inserted and the error is a *MessageError.
//
// A relay in another process learns of the messages by its wake-up mechanism
// (see the store's options); one in this process wakes at once if the
// transaction was run by Transact, or when Notify is called after the commit.
func (w *Writer[TTx]) Write(ctx context.Context, tx TTx, msgs ...*Message) error {
	if len(msgs) == 0 {
		return nil
	}
	now := time.Now().UTC()
	for i, m := range msgs {
		if m == nil {
			return fmt.Errorf("outbox: message %d of %d is nil", i, len(msgs))
		}
		if err := validateMessage(m, w.maxPayload); err != nil {
			return err
		}
	}
	for _, m := range msgs {
		if m.ID == uuid.Nil {
			id, err := uuid.NewV7()
			if err != nil {
				return fmt.Errorf("outbox: generate message id: %w", err)
			}
			m.ID = id
		}
		if m.CreatedAt.IsZero() {
			m.CreatedAt = now
		}
	}
	if err := w.inserter.InsertTx(ctx, tx, msgs); err != nil {
		return fmt.Errorf("outbox: write %d message(s) to %s: %w", len(msgs), w.inserter.Name(), err)
	}
	return nil
}

// Transact runs fn in a new transaction, commits it if fn returns nil, and then
// wakes the relays of this process that serve the same table: the message goes
// out without waiting for a poll and without any cost at commit. It returns
// fn's error (after rolling back), or the commit's.
func (w *Writer[TTx]) Transact(ctx context.Context, fn func(tx TTx) error) error {
	runner, ok := w.inserter.(TxRunner[TTx])
	if !ok {
		return errors.New("outbox: Transact needs a store built on a connection pool; write in your own transaction and call Notify after the commit")
	}
	if err := runner.RunInTx(ctx, fn); err != nil {
		return err
	}
	w.Notify()
	return nil
}

// Notify wakes the relays of this process that serve the writer's table. Call
// it after committing a transaction that wrote messages, when you manage the
// transaction yourself. It never blocks; calling it needlessly costs one idle
// probe at most.
func (w *Writer[TTx]) Notify() { w.wake.notify() }
