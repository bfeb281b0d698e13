package outbox

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sync"
	"time"
)

// Publisher sends a batch of messages to a broker, a webhook or handlers.
//
// Publish returns one error per message, in batch order: nil when the
// destination confirmed the message, an error made with Permanent when no retry
// can succeed (the relay dead-letters the message at once), any other error to
// retry later with backoff. A result slice of the wrong length counts as a
// retryable failure of the whole batch. Publish must respect ctx: the relay
// cancels it before the batch's lease expires.
//
// A publisher may be called by several relay workers at once. It must not
// change the messages it is given, nor the bytes of their payloads: the
// relay and the store keep them, and a store may write a message that was
// not published back as it was handed over (outboxpg's TransactionLeases).
//
// Close releases what the publisher holds: connections and clients it made
// itself. Its owner calls it once no relay uses it any more (the relay never
// closes a publisher). A publisher built on a client the caller passed in
// (outboxkafka.New, outboxnats.New) leaves that client open. Publish after
// Close fails every message retryably. Close may be called more than once.
//
// The broker packages construct publishers with the same three words:
//   - New(client, cfg) wraps a client the caller owns and never connects;
//   - Open(address, cfg) makes a client of its own without connecting, so a
//     relay can start while the broker is down: the first Publish connects;
//   - Dial(address, cfg) is Open, then checks within a timeout that the broker
//     answers, and fails if not.
//
// A package offers the ones that fit its client (outboxamqp has no New: its
// reconnection needs a connection of its own).
type Publisher interface {
	Publish(ctx context.Context, batch []Message) []error
	Close() error
}

// PublisherFunc adapts a function to the Publisher interface. It holds
// nothing, so its Close does nothing.
type PublisherFunc func(ctx context.Context, batch []Message) []error

// Publish calls f.
func (f PublisherFunc) Publish(ctx context.Context, batch []Message) []error { return f(ctx, batch) }

// Close does nothing and returns nil.
func (f PublisherFunc) Close() error { return nil }

// Handler processes one message in-process. It may open its own transaction
// (the "same database, different transaction" case). Returning an error made
// with Permanent dead-letters the message; any other error retries it.
type Handler func(ctx context.Context, m Message) error

// Handlers is a Publisher that calls the handler registered for each message's
// topic, one message at a time in batch order. A message whose topic has no
// handler fails permanently. After a handler fails (permanently or not), the
// later messages of the same non-empty key in the batch are not handled:
// they fail with an error marked HeldBack, so a key's messages are handled in
// order and the relay counts no attempt for them. Register handlers before
// the relay starts.
type Handlers struct {
	mu      sync.RWMutex
	byTopic map[string]Handler
}

// Handle registers h for topic, replacing any earlier handler.
func (hs *Handlers) Handle(topic string, h Handler) {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	if hs.byTopic == nil {
		hs.byTopic = map[string]Handler{}
	}
	hs.byTopic[topic] = h
}

// KeepsKeyOrder marks Handlers as a KeyOrderKeeper: it holds back a key's
// later messages after a failure.
func (hs *Handlers) KeepsKeyOrder() {}

// Publish runs the handlers; see Handlers.
func (hs *Handlers) Publish(ctx context.Context, batch []Message) []error {
	errs := make([]error, len(batch))
	failed := map[string]int{} // key -> index of its first failure
	for i := range batch {
		if first, ok := failed[batch[i].Key]; ok && batch[i].Key != "" {
			errs[i] = HeldBack(fmt.Errorf("not handled: message %s of the same key failed before it", batch[first].ID))
			continue
		}
		if err := ctx.Err(); err != nil {
			for j := i; j < len(batch); j++ {
				errs[j] = err
			}
			break
		}
		hs.mu.RLock()
		h := hs.byTopic[batch[i].Topic]
		hs.mu.RUnlock()
		if h == nil {
			errs[i] = Permanent(fmt.Errorf("no handler for topic %q", batch[i].Topic))
			continue
		}
		if errs[i] = callHandler(ctx, h, batch[i]); errs[i] != nil {
			failed[batch[i].Key] = i
		}
	}
	return errs
}

// Close does nothing and returns nil: handlers hold nothing of the
// publisher's.
func (hs *Handlers) Close() error { return nil }

// callHandler turns a handler's panic into a retryable error, so one bad
// message does not kill the relay.
func callHandler(ctx context.Context, h Handler, m Message) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("handler for topic %q panicked: %v", m.Topic, r)
		}
	}()
	return h(ctx, m)
}

// JSONLines is a Publisher that writes each message as one JSON object per line
// to a writer (os.Stdout when W is nil). It is for smoke tests, demos and
// piping into other tools; a message counts as published once its line is
// written.
type JSONLines struct {
	W  io.Writer
	mu sync.Mutex
}

type jsonLine struct {
	ID        string            `json:"id"`
	Topic     string            `json:"topic"`
	Key       string            `json:"key,omitempty"`
	Headers   map[string]string `json:"headers,omitempty"`
	Payload   json.RawMessage   `json:"payload,omitempty"`
	PayloadB  []byte            `json:"payload_base64,omitempty"`
	CreatedAt time.Time         `json:"created_at"`
	Attempts  int               `json:"attempts,omitempty"`
}

// Publish writes the batch; see JSONLines. A payload that is valid JSON is
// embedded as is; any other payload is written base64-encoded.
func (j *JSONLines) Publish(ctx context.Context, batch []Message) []error {
	errs := make([]error, len(batch))
	out := j.W
	if out == nil {
		out = os.Stdout
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	for i, m := range batch {
		line := jsonLine{ID: m.ID.String(), Topic: m.Topic, Key: m.Key, Headers: m.Headers, CreatedAt: m.CreatedAt, Attempts: m.Attempts}
		if json.Valid(m.Payload) {
			line.Payload = m.Payload
		} else {
			line.PayloadB = m.Payload
		}
		b, err := json.Marshal(line)
		if err != nil {
			errs[i] = Permanent(err)
			continue
		}
		if _, err := out.Write(append(b, '\n')); err != nil {
			errs[i] = err
		}
	}
	return errs
}

// Close returns nil; it leaves W open, since its owner opened it.
func (j *JSONLines) Close() error { return nil }
