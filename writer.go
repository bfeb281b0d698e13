package outbox

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
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
	// BeforeWrite, if set, is called for every message of a Write, with its
	// context, before the message is validated: it may add headers taken
	// from the context, such as the caller's trace context
	// (outboxotel.InjectTraceContext does), so that a message's trace goes
	// on from the code that wrote it. m.Headers is the message's own copy
	// of the caller's map (nil if it had none), so adding to it leaves a map
	// the caller shares between messages alone.
	BeforeWrite func(ctx context.Context, m *Message)
	// ExpireAfter gives topics a default expiry: a message of such a topic
	// written without ExpiresAt (or an Outbox-Expires-At header) expires
	// this long after Write, by the writer's clock. Nil: no defaults.
	ExpireAfter map[string]time.Duration
	// MaxHeaderValueBytes rejects a message with a longer header value, in
	// bytes. 0 means MaxHeaderValueBytesDefault (8 KiB). Brokers and HTTP
	// servers limit headers far below payloads: raise it only as far as
	// every destination accepts.
	MaxHeaderValueBytes int
	// MaxHeaders rejects a message with more headers. 0 means
	// MaxHeadersDefault (64).
	MaxHeaders int
	// MaxPayloadBytes rejects larger payloads. 0 means
	// MaxPayloadBytesDefault (1 MiB); -1 means no limit.
	MaxPayloadBytes int
}

// limits validates c and returns the limits it sets.
func (c WriterConfig) limits() (messageLimits, error) {
	lim := defaultLimits
	switch {
	case c.MaxHeaderValueBytes < 0:
		return lim, &ConfigError{Field: "WriterConfig.MaxHeaderValueBytes", Value: c.MaxHeaderValueBytes,
			Fix: fmt.Sprintf("use a positive byte count, or 0 for the default %d (8 KiB)", MaxHeaderValueBytesDefault)}
	case c.MaxHeaders < 0:
		return lim, &ConfigError{Field: "WriterConfig.MaxHeaders", Value: c.MaxHeaders,
			Fix: fmt.Sprintf("use a positive count, or 0 for the default %d", MaxHeadersDefault)}
	case c.MaxPayloadBytes < -1:
		return lim, &ConfigError{Field: "WriterConfig.MaxPayloadBytes", Value: c.MaxPayloadBytes,
			Fix: "use a positive byte count, 0 for the 1 MiB default, or -1 for no limit"}
	}
	lim = messageLimits{
		headerValueBytes: cmp.Or(c.MaxHeaderValueBytes, lim.headerValueBytes),
		headers:          cmp.Or(c.MaxHeaders, lim.headers),
		payloadBytes:     cmp.Or(c.MaxPayloadBytes, lim.payloadBytes),
	}
	if lim.payloadBytes == -1 {
		lim.payloadBytes = 0 // no limit
	}
	return lim, nil
}

// Writer adds messages to the outbox inside the application's transactions.
// It is safe for concurrent use.
type Writer[TTx any] struct {
	inserter    Inserter[TTx]
	limits      messageLimits
	wake        *wakeTopic
	beforeWrite func(ctx context.Context, m *Message)
	expireAfter map[string]time.Duration
}

// NewWriter returns a Writer that stores messages through inserter.
func NewWriter[TTx any](inserter Inserter[TTx], cfg WriterConfig) (*Writer[TTx], error) {
	if inserter == nil {
		return nil, &ConfigError{Field: "NewWriter inserter", Value: "nil", Fix: "pass a store, e.g. outboxpg.New(pool, outboxpg.Options{})"}
	}
	limits, err := cfg.limits()
	if err != nil {
		return nil, err
	}
	for _, topic := range slices.Sorted(maps.Keys(cfg.ExpireAfter)) {
		if d := cfg.ExpireAfter[topic]; d <= 0 {
			return nil, &ConfigError{Field: fmt.Sprintf("WriterConfig.ExpireAfter[%q]", topic), Value: d,
				Fix: "use a positive duration, or leave the topic out for messages that never expire"}
		}
	}
	return &Writer[TTx]{
		inserter: inserter, limits: limits, wake: wakeTopicFor(inserter.Name()), beforeWrite: cfg.BeforeWrite,
		expireAfter: maps.Clone(cfg.ExpireAfter),
	}, nil
}

// Write validates msgs, fills in missing IDs (UUIDv7), and inserts them in tx
// with one round trip. A zero CreatedAt is left for the store to stamp with
// the database's clock (the caller's copy stays zero), so that every time the
// relay and `outbox status` compare comes from one clock. Nothing is published unless tx
// commits. Write never commits or rolls back tx. If any message is invalid,
// nothing is inserted and the error is a *MessageError: among others for a
// header over the WriterConfig limits, or with a reserved name, one that
// would steer a transport instead of travelling with the message (see
// ValidateHeaderName).
//
// A relay in another process learns of the messages by its wake-up mechanism
// (see the store's options); one in this process wakes at once if the
// transaction was run by Transact, or when Notify is called after the commit.
func (w *Writer[TTx]) Write(ctx context.Context, tx TTx, msgs ...*Message) error {
	if len(msgs) == 0 {
		return nil
	}
	now := time.Now()
	for i, m := range msgs {
		if m == nil {
			return fmt.Errorf("outbox: message %d of %d is nil", i, len(msgs))
		}
		if w.beforeWrite != nil {
			// The hook sees a copy of the headers: callers often share
			// one map between messages and goroutines, and what the hook
			// adds (a trace context, say) belongs to this message only.
			m.Headers = maps.Clone(m.Headers)
			w.beforeWrite(ctx, m)
		}
		if err := stampExpiry(m, w.expireAfter, now); err != nil {
			return err
		}
		if err := validateMessage(m, w.limits); err != nil {
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
	}
	if err := w.inserter.InsertTx(ctx, tx, msgs); err != nil {
		return fmt.Errorf("outbox: write %d message(s) to %s: %w", len(msgs), w.inserter.Name(), err)
	}
	noteWritten(ctx, w.inserter.Name(), msgs)
	return nil
}

// Transact runs fn in a new transaction, commits it if fn returns nil, and then
// wakes the relays of this process that serve the same table: the message goes
// out without waiting for a poll and without any cost at commit. It returns
// fn's error (after rolling back), or the commit's. fn gets ctx, as the
// Inbox's handlers and TransactAndPublish's fn do.
func (w *Writer[TTx]) Transact(ctx context.Context, fn func(ctx context.Context, tx TTx) error) error {
	runner, ok := w.inserter.(TxRunner[TTx])
	if !ok {
		return errors.New("outbox: Transact needs a store built on a connection pool; write in your own transaction and call Notify after the commit")
	}
	if err := runner.RunInTx(ctx, func(tx TTx) error { return fn(ctx, tx) }); err != nil {
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
