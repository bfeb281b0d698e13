package outboxevents

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"

	"github.com/go-outbox/outbox"
)

// Recorder keeps the events an entity raised until the transaction that
// saves them has committed. Embed it in an aggregate and call Record; the
// entity knows nothing of the outbox. The zero value is ready; it is not safe
// for concurrent use (neither is the entity that embeds it).
type Recorder struct {
	events []any
}

// Record adds an event, a value of a registered type.
func (r *Recorder) Record(event any) { r.events = append(r.events, event) }

// RecordedEvents returns the events recorded and not yet cleared, oldest
// first.
func (r *Recorder) RecordedEvents() []any { return r.events }

// ClearEvents forgets the recorded events: Transact calls it once they are
// committed.
func (r *Recorder) ClearEvents() { r.events = nil }

// Source is an aggregate whose raised events Save writes: anything that
// embeds a Recorder.
type Source interface {
	RecordedEvents() []any
	ClearEvents()
}

// Keyed is an aggregate that gives its events a message key, such as its
// id: the outbox then keeps their order per key where the relay orders by
// key, and brokers partition by it.
type Keyed interface {
	EventKey() string
}

// Transact runs fn in a new transaction through w, then writes the events
// recorded by every source in the same transaction (see Save), commits, and
// only then clears the sources' events. The sources are those given, which
// the caller loaded before, and those fn passes to Track with the ctx it
// gets: an aggregate loaded in the transaction, under a lock, is tracked
// there. When fn, the write or the commit fails, the events stay recorded:
// running Transact again with the same aggregates writes them again, so a
// retried transaction loses none.
//
//	err := outboxevents.Transact(ctx, w, reg, func(ctx context.Context, tx pgx.Tx) error {
//		order, err := loadForUpdate(ctx, tx, id) // SELECT ... FOR UPDATE
//		if err != nil {
//			return err
//		}
//		order.Pay() // records OrderPaid
//		if err := outboxevents.Track(ctx, order); err != nil {
//			return err
//		}
//		return saveOrder(ctx, tx, order)
//	})
func Transact[TTx any](ctx context.Context, w *outbox.Writer[TTx], r *Registry, fn func(ctx context.Context, tx TTx) error, sources ...Source) error {
	tracked := &tracked{}
	tracked.add(sources...)
	ctx = context.WithValue(ctx, trackedKey{}, tracked)
	err := w.Transact(ctx, func(ctx context.Context, tx TTx) error {
		if err := fn(ctx, tx); err != nil {
			return err
		}
		return Save(ctx, w, tx, r, tracked.sources...)
	})
	if err != nil {
		return err
	}
	Clear(tracked.sources...)
	return nil
}

// Track adds sources to those whose events the Transact that gave ctx
// writes before its commit. A source given twice is saved once. It returns
// an error if ctx is not the one Transact gave its fn.
func Track(ctx context.Context, sources ...Source) error {
	t, ok := ctx.Value(trackedKey{}).(*tracked)
	if !ok {
		return errors.New("outboxevents.Track: ctx is not the context outboxevents.Transact gave its function; pass that one, or call Save in your own transaction")
	}
	t.add(sources...)
	return nil
}

type trackedKey struct{}

// tracked are the sources a Transact saves, each once.
type tracked struct {
	mu      sync.Mutex
	sources []Source
}

func (t *tracked) add(sources ...Source) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, src := range sources {
		if src != nil && !t.has(src) {
			t.sources = append(t.sources, src)
		}
	}
}

// has reports whether src is tracked already; t.mu is held.
func (t *tracked) has(src Source) bool {
	// Only a comparable value can be compared: a struct holding a slice
	// in an interface field is not, though its type is.
	if !reflect.ValueOf(src).Comparable() {
		return false
	}
	for _, s := range t.sources {
		if reflect.TypeOf(s) == reflect.TypeOf(src) && reflect.ValueOf(s).Comparable() && s == src {
			return true
		}
	}
	return false
}

// Save writes the events recorded by every source, in order, through w in
// tx: one Write, one round trip. Nothing is published unless tx commits.
// Save leaves the events recorded, so that a transaction that fails and is
// run again writes them again; call Clear once tx has committed (Transact
// does both). Saving a source twice before clearing it writes its events
// twice.
func Save[TTx any](ctx context.Context, w *outbox.Writer[TTx], tx TTx, r *Registry, sources ...Source) error {
	var msgs []*outbox.Message
	for _, src := range sources {
		key := ""
		if k, ok := src.(Keyed); ok {
			key = k.EventKey()
		}
		for _, event := range src.RecordedEvents() {
			m, err := r.Message(event, key)
			if err != nil {
				return fmt.Errorf("outboxevents: save: %w", err)
			}
			msgs = append(msgs, m)
		}
	}
	return w.Write(ctx, tx, msgs...)
}

// Clear forgets the events of every source. Call it after the transaction
// that saved them has committed, never before: the events of a transaction
// that is rolled back must stay recorded for its retry.
func Clear(sources ...Source) {
	for _, src := range sources {
		src.ClearEvents()
	}
}
