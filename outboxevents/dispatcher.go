package outboxevents

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"

	"github.com/google/uuid"

	"github.com/go-outbox/outbox"
)

// Dispatcher hands every event to each handler of its type, exactly once per
// handler, and is the relay's Publisher for events handled in process. See
// the package documentation.
type Dispatcher[TTx any] struct {
	reg   *Registry
	store outbox.InboxStore[TTx]

	mu       sync.RWMutex
	handlers map[string][]*handler[TTx] // by event type name
	names    map[string]bool
	observer outbox.InboxObserver
}

// Observe makes the inbox of every handler, added before or after, tell o of
// each event it handles (the consumer is the handler's name): for the
// outbox_inbox_* metrics of outboxotel. Call it before the relay starts.
func (d *Dispatcher[TTx]) Observe(o outbox.InboxObserver) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.observer = o
	for _, hs := range d.handlers {
		for _, h := range hs {
			h.inbox.Observe(o)
		}
	}
}

// handler is one registered handler: its inbox is named after it.
type handler[TTx any] struct {
	name  string
	inbox *outbox.Inbox[TTx]
	apply func(ctx context.Context, tx TTx, event any) error
}

var _ outbox.Publisher = (*Dispatcher[any])(nil)

// NewDispatcher returns a dispatcher with no handlers, decoding with reg and
// recording what each handler applied in store (an inbox table in the
// database the handlers write to).
func NewDispatcher[TTx any](reg *Registry, store outbox.InboxStore[TTx]) (*Dispatcher[TTx], error) {
	if reg == nil {
		return nil, &outbox.ConfigError{Field: "outboxevents.NewDispatcher registry", Value: "nil", Fix: "pass the Registry the events were written with"}
	}
	if store == nil {
		return nil, &outbox.ConfigError{Field: "outboxevents.NewDispatcher store", Value: "nil", Fix: "pass an inbox table, e.g. outboxpg.NewInboxTable or outboxsqlite.NewInboxTable"}
	}
	return &Dispatcher[TTx]{reg: reg, store: store, handlers: map[string][]*handler[TTx]{}, names: map[string]bool{}}, nil
}

// Handle adds a handler named name for events of type E, which must be
// registered. The name is the handler's identity in the inbox: keep it
// across releases, or the handler applies every event again. Handlers of
// one type run in the order they were added.
func Handle[E any, TTx any](d *Dispatcher[TTx], name string, fn func(ctx context.Context, tx TTx, event E) error) error {
	typ := reflect.TypeFor[E]()
	if fn == nil {
		return &outbox.ConfigError{Field: "outboxevents.Handle fn", Value: "nil", Fix: "pass the handler function"}
	}
	var zero E
	typeName, err := d.reg.Name(zero)
	if err != nil {
		return fmt.Errorf("outboxevents: handler %q for %v: %w", name, typ, err)
	}
	inbox, err := outbox.NewInbox(d.store, name)
	if err != nil {
		return fmt.Errorf("outboxevents: handler %q for %s: %w", name, typeName, err)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.names[name] {
		return &outbox.ConfigError{Field: "outboxevents.Handle name", Value: name, Fix: "give every handler its own name: the name keys what the handler applied"}
	}
	d.names[name] = true
	if d.observer != nil {
		inbox.Observe(d.observer)
	}
	d.handlers[typeName] = append(d.handlers[typeName], &handler[TTx]{
		name:  name,
		inbox: inbox,
		apply: func(ctx context.Context, tx TTx, event any) error { return fn(ctx, tx, event.(E)) },
	})
	return nil
}

// Publish applies each message of the batch with every handler of its type,
// one message after the other. A message's result is nil when every handler
// has applied it (now or before), a permanent error when its type is unknown
// or its body undecodable, and otherwise retryable: the handlers' errors
// (the retry runs only the handlers that have not applied it), or
// ErrNewerVersion for an event written by a newer release, which a retry
// after this process is upgraded decodes. After an event fails (retryably),
// the batch's later events of its key are not dispatched: they are held
// back (outbox.HeldBack), so a key's events are applied in order.
func (d *Dispatcher[TTx]) Publish(ctx context.Context, batch []outbox.Message) []error {
	errs := make([]error, len(batch))
	failed := map[string]uuid.UUID{} // key -> its message that failed
	for i := range batch {
		m := &batch[i]
		if first, ok := failed[m.Key]; ok && m.Key != "" {
			errs[i] = outbox.HeldBack(fmt.Errorf("outboxevents: event %s not dispatched: event %s of the same key failed before it", m.ID, first))
			continue
		}
		if err := ctx.Err(); err != nil {
			errs[i] = err
			continue
		}
		errs[i] = d.dispatch(ctx, *m)
		if errs[i] != nil && !outbox.IsPermanent(errs[i]) {
			failed[m.Key] = m.ID
		}
	}
	return errs
}

// KeepsKeyOrder marks the dispatcher as an outbox.KeyOrderKeeper: after an
// event fails, the batch's later events of its key are held back.
func (d *Dispatcher[TTx]) KeepsKeyOrder() {}

func (d *Dispatcher[TTx]) dispatch(ctx context.Context, m outbox.Message) error {
	event, name, err := d.reg.Decode(m)
	if errors.Is(err, ErrNewerVersion) {
		return err
	}
	if err != nil {
		return outbox.Permanent(err)
	}
	d.mu.RLock()
	handlers := d.handlers[name]
	d.mu.RUnlock()
	var failed []error
	for _, h := range handlers {
		_, err := h.inbox.Handle(ctx, m.ID, func(ctx context.Context, tx TTx) error { return h.apply(ctx, tx, event) })
		if err != nil {
			// The others still run: each applies once, whatever the
			// others do, and the retry runs only those that failed.
			failed = append(failed, fmt.Errorf("handler %q: %w", h.name, err))
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("outboxevents: event %s (%s): %w", m.ID, name, errors.Join(failed...))
	}
	return nil
}

// Close does nothing: the dispatcher holds no connection.
func (d *Dispatcher[TTx]) Close() error { return nil }
