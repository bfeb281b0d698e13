package outboxevents

import (
	"context"
	"fmt"

	"github.com/go-outbox/outbox"
)

// Recorder keeps the events an entity raised until they are saved. Embed it
// in an aggregate and call Record; the entity knows nothing of the outbox.
// The zero value is ready; it is not safe for concurrent use (neither is the
// entity that embeds it).
type Recorder struct {
	events []any
}

// Record adds an event, a value of a registered type.
func (r *Recorder) Record(event any) { r.events = append(r.events, event) }

// TakeEvents returns the recorded events, oldest first, and forgets them.
func (r *Recorder) TakeEvents() []any {
	events := r.events
	r.events = nil
	return events
}

// Source is an aggregate whose raised events Save writes: anything that
// embeds a Recorder.
type Source interface {
	TakeEvents() []any
}

// Keyed is an aggregate that gives its events a message key, such as its
// id: the outbox then keeps their order per key where the relay orders by
// key, and brokers partition by it.
type Keyed interface {
	EventKey() string
}

// Save writes the events taken from every source, in order, through w in
// tx: one Write, one round trip. Nothing is published unless tx commits. The
// events are taken from the sources even if Save fails; a failed
// transaction is normally retried from the start, which raises them again.
func Save[TTx any](ctx context.Context, w *outbox.Writer[TTx], tx TTx, r *Registry, sources ...Source) error {
	var msgs []*outbox.Message
	for _, src := range sources {
		key := ""
		if k, ok := src.(Keyed); ok {
			key = k.EventKey()
		}
		for _, event := range src.TakeEvents() {
			m, err := r.Message(event, key)
			if err != nil {
				return fmt.Errorf("outboxevents: save: %w", err)
			}
			msgs = append(msgs, m)
		}
	}
	return w.Write(ctx, tx, msgs...)
}
