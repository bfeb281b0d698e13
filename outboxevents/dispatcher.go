package outboxevents

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/go-outbox/outbox"
)

// Dispatcher hands every event to each handler of its type, exactly once per
// handler, and is the relay's Publisher for events handled in process. See
// the package documentation.
type Dispatcher[TTx any] struct {
	reg    *Registry
	store  outbox.InboxStore[TTx]
	parked outbox.ParkStore    // the store, if it keeps parked messages
	keys   outbox.KeyParkStore // the store, if it holds keys behind them
	shares parkedShares        // the store, if it parks and finds a parked share by id
	skip   bool                // SkipParkedInKeyOrder
	// middleware wraps every handler run (Use).
	middleware []Middleware

	mu       sync.RWMutex
	handlers map[string][]*handler[TTx] // by event type name
	byName   map[string]*handler[TTx]
	observer outbox.InboxObserver
}

// Observe makes the inbox of every handler, added before or after, tell o of
// each event it handles (the consumer is the handler's name): for the
// outbox_inbox_* metrics of outboxotel. Call it before the relay starts.
func (d *Dispatcher[TTx]) Observe(o outbox.InboxObserver) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.observer = o
	for _, h := range d.byName {
		h.inbox.Observe(o)
	}
}

// handler is one named handler, of one or more event types: its inbox is
// named after it.
type handler[TTx any] struct {
	name  string
	inbox *outbox.Inbox[TTx]
	apply map[string]func(ctx context.Context, tx TTx, event any) error // by event type name
	// down is set while the handler's destination is unavailable.
	down availability
}

var _ outbox.Publisher = (*Dispatcher[any])(nil)

// NewDispatcher returns a dispatcher with no handlers, decoding with reg and
// recording what each handler applied in store (an inbox table in the
// database the handlers write to). When store keeps parked messages
// (outbox.ParkStore, as the outboxpg and outboxsqlite inbox tables do), a
// handler's permanent failure parks its share of the event there, and
// RetryParked runs it again when an operator asks. A parked share holds the
// rest of its key for its handler (see Publish), which needs store to be an
// outbox.KeyParkStore, as those tables are: a store that parks but is none
// is refused unless opts include SkipParkedInKeyOrder. A store that parks
// should also find a parked share by handler and event, with the tables'
// method GetParked(ctx, handler name, event id) (outbox.ParkedMessage,
// error), the error wrapping outbox.ErrNotFound when there is none: without
// it, a handler whose share of an event with no
// key (or of any event, with SkipParkedInKeyOrder) is parked is run on the
// event again when the relay retries it for another handler.
func NewDispatcher[TTx any](reg *Registry, store outbox.InboxStore[TTx], opts ...DispatcherOption) (*Dispatcher[TTx], error) {
	if reg == nil {
		return nil, &outbox.ConfigError{Field: "outboxevents.NewDispatcher registry", Value: "nil", Fix: "pass the Registry the events were written with"}
	}
	if store == nil {
		return nil, &outbox.ConfigError{Field: "outboxevents.NewDispatcher store", Value: "nil", Fix: "pass an inbox table, e.g. outboxpg.NewInboxTable or outboxsqlite.NewInboxTable"}
	}
	var o dispatcherOptions
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	parked, _ := store.(outbox.ParkStore)
	keys, _ := store.(outbox.KeyParkStore)
	if parked != nil && keys == nil && !o.skip {
		return nil, &outbox.ConfigError{Field: "outboxevents.NewDispatcher store", Value: fmt.Sprintf("%T (parks shares, cannot hold their keys)", store),
			Fix: "use an inbox table that is an outbox.KeyParkStore (outboxpg, outboxsqlite), or pass outboxevents.SkipParkedInKeyOrder() to let a handler apply a key's later events past its parked share"}
	}
	var shares parkedShares
	if parked != nil {
		shares, _ = store.(parkedShares)
	}
	return &Dispatcher[TTx]{reg: reg, store: store, parked: parked, keys: keys, shares: shares, skip: o.skip, middleware: o.middleware, handlers: map[string][]*handler[TTx]{}, byName: map[string]*handler[TTx]{}}, nil
}

// Handle adds a handler named name for events of type E, which must be
// registered. The name is the handler's identity in the inbox: keep it
// across releases, or the handler applies every event again. One name may
// handle several types, a function each (Handle once per type): it is one
// handler then, with one inbox record per event, and its parked share of a
// key holds the key's later events of all its types, so an aggregate's
// events (OrderPlaced, then OrderPaid) reach it in order. Handlers of one
// type run in the order they were added.
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
	d.mu.Lock()
	defer d.mu.Unlock()
	h := d.byName[name]
	if h == nil {
		inbox, err := outbox.NewInbox(d.store, name)
		if err != nil {
			return fmt.Errorf("outboxevents: handler %q for %s: %w", name, typeName, err)
		}
		if d.observer != nil {
			inbox.Observe(d.observer)
		}
		h = &handler[TTx]{name: name, inbox: inbox, apply: map[string]func(context.Context, TTx, any) error{}}
		d.byName[name] = h
	}
	if h.apply[typeName] != nil {
		return &outbox.ConfigError{Field: "outboxevents.Handle name", Value: name,
			Fix: fmt.Sprintf("handler %q handles %s already: give each handler of a type its own name (the name keys what the handler applied)", name, typeName)}
	}
	h.apply[typeName] = func(ctx context.Context, tx TTx, event any) error { return fn(ctx, tx, event.(E)) }
	d.handlers[typeName] = append(d.handlers[typeName], h)
	return nil
}

// Publish applies each message of the batch with every handler of its type,
// one message after the other. Each handler decides for its own share of
// the event only (see the package documentation, Handlers). A message's
// result is:
//   - nil when every handler has applied it (now or before) or had its
//     share parked, or parked as waiting behind its parked share of the
//     event's key;
//   - a permanent error when its type is unknown or its body undecodable,
//     or when a handler failed permanently and the inbox table keeps no
//     parked messages;
//   - a retryable error when a handler failed otherwise (the retry runs
//     only the handlers that have not applied it), or ErrNewerVersion for
//     an event written by a newer release, which a retry after this process
//     is upgraded decodes;
//   - held back (outbox.HeldBack, with outbox.RetryAfter) when the only
//     failures were handlers whose destination is unavailable: no attempt
//     counts and the relay does not pause, so the other handlers' events go
//     on meanwhile.
//
// After an event fails (retryably), the batch's later events of its key are
// not dispatched: they are held back, so a key's events are applied in
// order.
//
// A handler whose share of the event is parked already is not run on it:
// only RetryParked runs a parked share, even when the relay hands the event
// again because another handler failed.
//
// A handler's parked share holds the rest of its key for that handler: a
// later event of the key is not run by it but parked as waiting behind the
// parked share (the handler's other keys, and the other handlers, go on),
// and RetryParked applies the waiting shares in order once the parked one is
// retried with success. With SkipParkedInKeyOrder the handler applies them
// as they come instead, and each one it applies is counted on its parked
// shares of the key (outbox.ParkedMessage.Overtaken; a parked share never
// counts its own event, which the handler is not run on), so that `outbox
// inbox parked retry` asks for --force before applying one after its
// successors.
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
		if errs[i] != nil {
			failed[m.Key] = m.ID
		}
	}
	return errs
}

// Deliver applies one message a broker consumer received with every
// handler of its type, as Publish does for each message of a batch: pass it
// as the handler of a consumer adapter, which then runs typed handlers,
// each with its own inbox record, and gives up on an event as it gives up
// on any message. The adapter's name (ConsumerConfig.Name, Durable or
// Group) must differ from every handler's: both park under their names in
// the inbox table. Deliver refuses a clash with an unavailable error naming
// the fix, so the adapter waits and parks nothing until it is renamed.
//
//	err := outboxamqp.Consume(ctx, url, outboxamqp.ConsumerConfig{Queue: "billing", Name: "billing"}, d.Deliver)
//
// Its result means for the adapter what Publish's means for the relay:
//   - nil once every handler applied the event (now or before) or had its
//     share parked in the dispatcher's inbox table (the adapter
//     acknowledges it; run RetryParked in the process to take the retries
//     an operator requests for a handler's parked share);
//   - a permanent error for an unknown type, an undecodable body, or a
//     handler's permanent failure when the inbox table keeps no parked
//     messages: the adapter parks the message at once (its Parked store,
//     under its consumer Name, or the broker's dead letters);
//   - an ordinary error when a handler failed, or ErrNewerVersion: the
//     adapter retries the message in place (its key waits), running only
//     the handlers that have not applied it, and parks it after MaxDeliver
//     attempts; an operator's retry of it runs those handlers again;
//   - held back (outbox.HeldBack) when the only failures were handlers
//     whose destination is unavailable (outbox.Unavailable): the adapter
//     retries it in place after the pause it carries, counting no attempt,
//     so an outage of any length parks nothing.
func (d *Dispatcher[TTx]) Deliver(ctx context.Context, m outbox.Message) error {
	return d.dispatch(ctx, m)
}

// KeepsKeyOrder marks the dispatcher as an outbox.KeyOrderKeeper: after an
// event fails, the batch's later events of its key are held back.
func (d *Dispatcher[TTx]) KeepsKeyOrder() {}

func (d *Dispatcher[TTx]) dispatch(ctx context.Context, m outbox.Message) error {
	if err := d.checkConsumerName(ctx); err != nil {
		return err
	}
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
	// Each handler's outcome is its own: the others still run, each
	// applies once whatever the others do, and a retry runs only those
	// that have not applied the event (their inbox record skips the rest).
	var permanent, failed, unavailable []error
	var wait time.Duration
	for _, h := range handlers {
		if left := h.down.left(time.Now()); left > 0 {
			unavailable = append(unavailable, fmt.Errorf("handler %q not run: its destination was unavailable, tried again in %v", h.name, left))
			wait = max(wait, left)
			continue
		}
		left, err := d.leftToRetryParked(ctx, h, m)
		if err != nil {
			failed = append(failed, fmt.Errorf("handler %q not run: %w", h.name, err))
			continue
		}
		if left {
			continue
		}
		err = d.run(ctx, h, Run{Handler: h.name, Type: name, Event: event, Message: m})
		switch {
		case err == nil:
			h.down.up()
			if err := d.overtook(ctx, h, m); err != nil {
				failed = append(failed, fmt.Errorf("handler %q: %w", h.name, err))
			}
		case outbox.IsPermanent(err) && d.parked != nil:
			if perr := d.parked.Park(ctx, h.name, m, m.Attempts+1, err.Error()); perr != nil {
				// Retried: the handler fails again, and its share is
				// parked then.
				failed = append(failed, fmt.Errorf("handler %q failed for good (%v), and parking its share failed: %v", h.name, err, perr))
			}
		case outbox.IsPermanent(err):
			permanent = append(permanent, fmt.Errorf("handler %q: %w", h.name, err))
		case outbox.IsUnavailable(err):
			// %v, not %w: the mark would make the relay pause the
			// worker, and so every other handler, for one destination.
			unavailable = append(unavailable, fmt.Errorf("handler %q: %v", h.name, err))
			wait = max(wait, h.down.down(time.Now()))
		default:
			failed = append(failed, fmt.Errorf("handler %q: %w", h.name, err))
		}
	}
	wrap := func(errs ...[]error) error {
		return fmt.Errorf("outboxevents: event %s (%s): %w", m.ID, name, errors.Join(slices.Concat(errs...)...))
	}
	switch {
	case len(permanent) > 0:
		return outbox.Permanent(wrap(permanent, failed, unavailable))
	case len(failed) > 0:
		return wrap(failed, unavailable)
	case len(unavailable) > 0:
		return outbox.HeldBack(outbox.RetryAfter(wrap(unavailable), wait))
	}
	return nil
}

// checkConsumerName refuses to run under a consumer adapter whose name is
// a handler's: the adapter's parked messages and the handler's parked
// shares would share one name in the inbox table, and each retry loop would
// take the other's rows (a share retried by the adapter is skipped and
// unparked, never applied; a message retried by the handler's loop reaches
// that handler alone). Unavailable, so that the adapter waits in place,
// parking nothing and losing nothing, until the name is changed.
func (d *Dispatcher[TTx]) checkConsumerName(ctx context.Context) error {
	consumer, ok := outbox.ConsumerName(ctx)
	if !ok {
		return nil
	}
	d.mu.RLock()
	clash := d.byName[consumer] != nil
	d.mu.RUnlock()
	if !clash {
		return nil
	}
	return outbox.Unavailable(&outbox.ConfigError{Field: "consumer adapter name", Value: consumer,
		Fix: fmt.Sprintf("give the adapter (ConsumerConfig.Name, Durable or Group) a name no handler has: handler %q parks its shares under that name in the same inbox table", consumer)})
}

// run applies run.Event with h through h's inbox, in h's transaction,
// through the dispatcher's middleware. The handler finds the message in its
// context (MessageOf).
func (d *Dispatcher[TTx]) run(ctx context.Context, h *handler[TTx], run Run) error {
	d.mu.RLock()
	apply := h.apply[run.Type]
	d.mu.RUnlock()
	if apply == nil {
		return outbox.Permanent(fmt.Errorf("outboxevents: handler %q does not handle %s events", h.name, run.Type))
	}
	_, err := h.inbox.Handle(ctx, run.Message.ID, func(ctx context.Context, tx TTx) error {
		ctx = context.WithValue(ctx, messageKey{}, run.Message)
		return chain(d.middleware, run, func(ctx context.Context) error { return apply(ctx, tx, run.Event) })(ctx)
	})
	return err
}

type messageKey struct{}

// MessageOf returns the message whose event the handler called with ctx
// applies: its id, key, headers (trace context) and attempts. It reports
// false for a context no Dispatcher gave.
func MessageOf(ctx context.Context) (outbox.Message, bool) {
	m, ok := ctx.Value(messageKey{}).(outbox.Message)
	return m, ok
}

// Close does nothing: the dispatcher holds no connection.
func (d *Dispatcher[TTx]) Close() error { return nil }
