package consume

import (
	"errors"
	"fmt"
	"sync"
	"time"
)

// ErrNotStarted is what Readiness.Ready returns before the adapter's
// Consume started.
var ErrNotStarted = errors.New("not started: Consume has not been called")

// Readiness is what an adapter's Readiness reports: nil while the adapter is
// connected and consuming, else why not and since when. The adapters set it
// where they log the failures of docs/consumers.md, so that readiness and
// the logs tell the same story. Its methods do nothing on a nil Readiness
// (the application set none).
type Readiness struct {
	mu      sync.Mutex
	adapter string    // "outboxamqp", for the errors
	name    string    // the consumer's name
	reason  error     // why it is not consuming; nil while it is
	since   time.Time // of the last change between consuming and not
	started bool
	stopped bool
}

// Start says Consume began for consumer name: it is not consuming yet, and
// why is reason (connecting, say).
func (r *Readiness) Start(adapter, name string, reason error) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.adapter, r.name, r.reason, r.since, r.started, r.stopped = adapter, name, reason, time.Now(), true, false
}

// Consuming says the adapter consumes now.
func (r *Readiness) Consuming() {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.reason != nil {
		r.reason, r.since = nil, time.Now()
	}
}

// Failed says the adapter does not consume, because of reason. The time of
// the first failure since it last consumed is kept: a failure that lasts
// reads "since" its start whatever else goes wrong meanwhile.
func (r *Readiness) Failed(reason error) {
	if r == nil || reason == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.reason == nil {
		r.since = time.Now()
	}
	r.reason = reason
}

// Stop says Consume returned, with err if it returned one.
func (r *Readiness) Stop(err error) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if err == nil {
		err = errors.New("its context ended")
	}
	r.reason, r.since, r.stopped = err, time.Now(), true
}

// Ready returns nil while the adapter consumes, else an error that says why
// not and since when.
func (r *Readiness) Ready() error {
	if r == nil {
		return ErrNotStarted
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case !r.started:
		return ErrNotStarted
	case r.stopped:
		return fmt.Errorf("%s: consumer %s stopped at %s: Consume returned: %w", r.adapter, r.name, r.since.Format(time.RFC3339), r.reason)
	case r.reason != nil:
		return fmt.Errorf("%s: consumer %s not consuming since %s (%s): %w", r.adapter, r.name, r.since.Format(time.RFC3339),
			time.Since(r.since).Round(time.Second), r.reason)
	}
	return nil
}
