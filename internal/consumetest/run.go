// Package consumetest runs a consumer adapter's Consume in the background
// of a test and records what its handler was given, so that the Redis, SQS
// and Pub/Sub consumer tests wait on and check one harness: each adapter's
// tests only say how to start their Consume.
package consumetest

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/relaytest"
)

// Options are what differs between the adapters' tests.
type Options struct {
	// Fail, if set, gives each attempt's outcome from the message and its
	// attempt number in this process (nil: success).
	Fail func(ctx context.Context, m outbox.Message, try int) error
	// Name is the consume function's name in failure messages: "Consume"
	// when empty.
	Name string
	// StopWithin is how long Consume may take to return once its context
	// ended: 10s when zero.
	StopWithin time.Duration
	// WaitWithin is how long WaitFor waits: 20s when zero.
	WaitWithin time.Duration
}

// Run is a Consume under way: what its handler was given, its logs, and its
// result once it returned.
type Run struct {
	// Logs holds every record Consume logged.
	Logs *relaytest.LogCapture

	cancel context.CancelFunc
	done   chan error
	o      Options

	mu      sync.Mutex
	tries   map[uuid.UUID]int
	handled []outbox.Message // in the order the handler succeeded
}

// Start sets *logger (the adapter's config field) to a logger that writes
// to Logs and to the test's log, then runs consume in the background with a
// handler that records each attempt. consume must read its config when it
// is called, so that it sees the logger. The test's cleanup stops it and
// fails the test if Consume returned an error after its context ended.
func Start(t testing.TB, logger **slog.Logger, o Options, consume func(ctx context.Context, fn func(context.Context, outbox.Message) error) error) *Run {
	t.Helper()
	if o.Name == "" {
		o.Name = "Consume"
	}
	if o.StopWithin == 0 {
		o.StopWithin = 10 * time.Second
	}
	if o.WaitWithin == 0 {
		o.WaitWithin = 20 * time.Second
	}
	r := &Run{Logs: &relaytest.LogCapture{}, done: make(chan error, 1), o: o, tries: map[uuid.UUID]int{}}
	*logger = slog.New(teeHandler{r.Logs, relaytest.TestLogger(t).Handler()})
	var ctx context.Context
	ctx, r.cancel = context.WithCancel(context.Background())
	go func() { r.done <- consume(ctx, r.handle) }()
	t.Cleanup(func() {
		if err := r.Stop(t); err != nil {
			t.Errorf("%s returned %v after its context ended; want nil", o.Name, err)
		}
	})
	return r
}

// handle is the handler Consume runs: it counts the attempt, asks Fail for
// its outcome and records a success.
func (r *Run) handle(ctx context.Context, m outbox.Message) error {
	r.mu.Lock()
	r.tries[m.ID]++
	try := r.tries[m.ID]
	r.mu.Unlock()
	if r.o.Fail != nil {
		if err := r.o.Fail(ctx, m, try); err != nil {
			return err
		}
	}
	r.mu.Lock()
	r.handled = append(r.handled, m)
	r.mu.Unlock()
	return nil
}

// CountLogs is how many records at level or above hold every one of words.
func (r *Run) CountLogs(level slog.Level, words ...string) int {
	n := 0
next:
	for line := range strings.SplitSeq(r.Logs.String(), "\n") {
		lv, _, _ := strings.Cut(line, " ")
		var l slog.Level
		if l.UnmarshalText([]byte(lv)) != nil || l < level {
			continue
		}
		for _, w := range words {
			if !strings.Contains(line, w) {
				continue next
			}
		}
		n++
	}
	return n
}

// Done receives Consume's result once it returned. A test that takes the
// result sends one back, for Stop and WaitFor.
func (r *Run) Done() chan error { return r.done }

// Handled are the messages the handler succeeded with, in that order.
func (r *Run) Handled() []outbox.Message {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.handled)
}

// HandledCount is how many times the handler succeeded with id.
func (r *Run) HandledCount(id uuid.UUID) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, m := range r.handled {
		if m.ID == id {
			n++
		}
	}
	return n
}

// HandledIDs are the ids the handler succeeded with, in that order.
func (r *Run) HandledIDs() []uuid.UUID {
	r.mu.Lock()
	defer r.mu.Unlock()
	ids := make([]uuid.UUID, len(r.handled))
	for i, m := range r.handled {
		ids[i] = m.ID
	}
	return ids
}

// HandledMessage is the message the handler succeeded with for id.
func (r *Run) HandledMessage(id uuid.UUID) outbox.Message {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, m := range r.handled {
		if m.ID == id {
			return m
		}
	}
	return outbox.Message{}
}

// Stop ends Consume's context and returns its result.
func (r *Run) Stop(t testing.TB) error {
	t.Helper()
	r.cancel()
	select {
	case err := <-r.done:
		r.done <- err // for the next stop
		return err
	case <-time.After(r.o.StopWithin):
		t.Fatalf("%s did not return within %s after its context ended", r.o.Name, r.o.StopWithin)
		return nil
	}
}

// TriesOf is how many times the handler was given id.
func (r *Run) TriesOf(id uuid.UUID) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.tries[id]
}

// WaitFor polls cond until it holds, failing the test if Consume returns
// first or WaitWithin passes.
func (r *Run) WaitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.After(r.o.WaitWithin)
	for !cond() {
		select {
		case err := <-r.done:
			r.done <- err
			t.Fatalf("%s returned %v while its context lives, before %s; logs:\n%s", r.o.Name, err, what, r.Logs)
		case <-deadline:
			t.Fatalf("timed out after %s waiting for %s; logs:\n%s", r.o.WaitWithin, what, r.Logs)
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// WaitHandled waits until the handler succeeded with each of ms.
func (r *Run) WaitHandled(t testing.TB, ms ...outbox.Message) {
	t.Helper()
	for _, m := range ms {
		r.WaitFor(t, "message "+m.ID.String()+" handled", func() bool { return r.HandledCount(m.ID) > 0 })
	}
}

// teeHandler hands every record to both handlers.
type teeHandler struct{ a, b slog.Handler }

func (h teeHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h teeHandler) Handle(ctx context.Context, r slog.Record) error {
	_ = h.a.Handle(ctx, r.Clone())
	return h.b.Handle(ctx, r)
}
func (h teeHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return teeHandler{h.a.WithAttrs(attrs), h.b.WithAttrs(attrs)}
}
func (h teeHandler) WithGroup(name string) slog.Handler {
	return teeHandler{h.a.WithGroup(name), h.b.WithGroup(name)}
}

// WithoutCtx adapts an outcome function that needs no context to
// Options.Fail; nil stays nil.
func WithoutCtx(fail func(m outbox.Message, try int) error) func(ctx context.Context, m outbox.Message, try int) error {
	if fail == nil {
		return nil
	}
	return func(_ context.Context, m outbox.Message, try int) error { return fail(m, try) }
}
