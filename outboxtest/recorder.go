package outboxtest

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"

	"github.com/go-outbox/outbox"
	"github.com/google/uuid"
)

// Recorder is a Publisher that keeps what it is asked to publish, for a
// relay in a test (see Drain). It is safe for concurrent use; the zero value
// confirms every message.
//
// Like the in-process outbox.Handlers, it keeps key order: after a message
// of a key fails, the later messages of that key in the same batch are held
// back (outbox.HeldBack), not tried.
type Recorder struct {
	// Fail, if set, decides each attempt: attempt counts this Recorder's
	// attempts of m, from 1. Return nil to confirm m, an error made with
	// outbox.Permanent to have it dead-lettered, outbox.Unavailable to say
	// the destination is down, any other error to have it retried.
	// Set it before the relay starts.
	Fail func(m outbox.Message, attempt int) error

	mu        sync.Mutex
	attempts  map[uuid.UUID]int
	published []outbox.Message
}

// KeepsKeyOrder marks the Recorder as an outbox.KeyOrderKeeper.
func (r *Recorder) KeepsKeyOrder() {}

// Publish records the batch: one outcome per message, as Fail decides.
func (r *Recorder) Publish(ctx context.Context, batch []outbox.Message) []error {
	errs := make([]error, len(batch))
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.attempts == nil {
		r.attempts = map[uuid.UUID]int{}
	}
	failed := map[string]uuid.UUID{} // key -> its message that failed in this batch
	for i, m := range batch {
		if first, ok := failed[m.Key]; ok && m.Key != "" {
			errs[i] = outbox.HeldBack(fmt.Errorf("outboxtest: held back behind message %s of key %q, which failed", first, m.Key))
			continue
		}
		if err := ctx.Err(); err != nil {
			errs[i] = err
			continue
		}
		r.attempts[m.ID]++
		if r.Fail != nil {
			errs[i] = r.Fail(m, r.attempts[m.ID])
		}
		if errs[i] != nil {
			failed[m.Key] = m.ID
			continue
		}
		// The relay keeps the messages it hands over: a test must not see
		// them change.
		m.Headers = maps.Clone(m.Headers)
		m.Payload = slices.Clone(m.Payload)
		r.published = append(r.published, m)
	}
	return errs
}

// Close does nothing: a Recorder holds no connection.
func (r *Recorder) Close() error { return nil }

// Attempts returns how often the Recorder was asked to publish the message
// with id, failures included.
func (r *Recorder) Attempts(id uuid.UUID) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.attempts[id]
}

// Published returns the messages confirmed so far, in the order they were
// confirmed, duplicates included.
func (r *Recorder) Published() []outbox.Message {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.published)
}
