package outboxevents_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/outboxevents"
)

// dispatcherWith returns a dispatcher on store with opts, a handler per
// name running fn, and an event for them.
func dispatcherWith(t *testing.T, store outbox.InboxStore[*memTx], opts []outboxevents.DispatcherOption,
	fn func(ctx context.Context, tx *memTx, e OrderPlaced) error, names ...string,
) (*outboxevents.Dispatcher[*memTx], outbox.Message) {
	t.Helper()
	reg := outboxevents.NewRegistry(outboxevents.Options{})
	outboxevents.MustRegister[OrderPlaced](reg, "orders.placed")
	d, err := outboxevents.NewDispatcher(reg, store, opts...)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range names {
		if err := outboxevents.Handle(d, name, fn); err != nil {
			t.Fatal(err)
		}
	}
	m, err := reg.Message(OrderPlaced{OrderID: "o-1"}, "o-1")
	if err != nil {
		t.Fatal(err)
	}
	m.ID = uuid.Must(uuid.NewV7())
	return d, *m
}

// trace is a middleware that notes each run it sees, under its name.
type trace struct {
	mu   sync.Mutex
	seen []string
}

func (tr *trace) middleware(name string) outboxevents.Middleware {
	return func(ctx context.Context, run outboxevents.Run, next func(context.Context) error) error {
		tr.note(name + " before " + run.Handler + " " + run.Type + " " + run.Event.(OrderPlaced).OrderID)
		err := next(ctx)
		tr.note(name + " after " + run.Handler)
		return err
	}
}

func (tr *trace) note(s string) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.seen = append(tr.seen, s)
}

func (tr *trace) String() string {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return strings.Join(tr.seen, "; ")
}

// Middleware wraps every run, the first given outermost, on the relay's
// path (Publish) and a broker's (Deliver) alike, and never an event the
// handler applied before.
func TestMiddlewareWrapsEachRunOnTheRelayAndTheBrokerPathAndNeverADuplicate(t *testing.T) {
	t.Parallel()
	for _, path := range []string{"Publish", "Deliver"} {
		t.Run(path, func(t *testing.T) {
			tr := &trace{}
			d, m := dispatcherWith(t, newMemInbox(), []outboxevents.DispatcherOption{outboxevents.Use(tr.middleware("outer"), tr.middleware("inner"))},
				func(context.Context, *memTx, OrderPlaced) error { tr.note("handler"); return nil }, "read-model")
			deliver := func() error {
				if path == "Publish" {
					return d.Publish(t.Context(), []outbox.Message{m})[0]
				}
				return d.Deliver(t.Context(), m)
			}
			for range 2 { // the second time, a redelivery the inbox skips
				if err := deliver(); err != nil {
					t.Fatalf("%s: %v", path, err)
				}
			}
			want := "outer before read-model orders.placed o-1; inner before read-model orders.placed o-1; handler; inner after read-model; outer after read-model"
			if got := tr.String(); got != want {
				t.Fatalf("runs seen through %s, delivered twice:\n got %s\nwant %s", path, got, want)
			}
		})
	}
}

// Recover makes a panic an ordinary failure: the handler's transaction is
// rolled back (no inbox record), so the next delivery runs it again.
func TestRecoverTurnsAPanicIntoARetryableFailureAndRollsTheHandlerBack(t *testing.T) {
	t.Parallel()
	panics := true
	applied := 0
	d, m := dispatcherWith(t, newMemInbox(), []outboxevents.DispatcherOption{outboxevents.Use(outboxevents.Recover())},
		func(context.Context, *memTx, OrderPlaced) error {
			if panics {
				panic("nil map (injected)")
			}
			applied++
			return nil
		}, "read-model")
	err := d.Deliver(t.Context(), m)
	if !errors.Is(err, outboxevents.ErrPanicked) || outbox.IsPermanent(err) || !strings.Contains(err.Error(), "nil map (injected)") || !strings.Contains(err.Error(), "middleware_test.go") {
		t.Fatalf("a panicking handler: %v; want a retryable error wrapping ErrPanicked with the panic's value and stack", err)
	}
	panics = false
	if err := d.Deliver(t.Context(), m); err != nil || applied != 1 {
		t.Fatalf("redelivery after the panic: %v, applied %d times; want applied once (the panicking run recorded nothing)", err, applied)
	}
}

// Timeout ends a handler's context, and its error says which handler ran
// too long; a shutdown is not reported as a timeout.
func TestTimeoutEndsARunThatTakesTooLongAndSaysSo(t *testing.T) {
	t.Parallel()
	d, m := dispatcherWith(t, newMemInbox(), []outboxevents.DispatcherOption{outboxevents.Use(outboxevents.Timeout(10 * time.Millisecond))},
		func(ctx context.Context, _ *memTx, _ OrderPlaced) error {
			<-ctx.Done()
			return ctx.Err()
		}, "slow-mail")
	err := d.Deliver(t.Context(), m)
	if !errors.Is(err, context.DeadlineExceeded) || outbox.IsPermanent(err) || !strings.Contains(err.Error(), `handler "slow-mail" ran longer than its timeout, 10ms`) {
		t.Fatalf("a handler past its timeout: %v; want a retryable error naming the handler and its timeout", err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := d.Deliver(ctx, m); err == nil || strings.Contains(err.Error(), "timeout") {
		t.Fatalf("a handler stopped by a shutdown: %v; want its cancellation, not a timeout", err)
	}
}

// PermanentOn parks a handler's share at once on the errors it names, and
// leaves the others retryable.
func TestPermanentOnParksTheShareAtOnceOnTheNamedErrorsOnly(t *testing.T) {
	t.Parallel()
	errInvalid := errors.New("invalid address")
	store := newMemInbox()
	var fail error
	d, m := dispatcherWith(t, store, []outboxevents.DispatcherOption{outboxevents.Use(outboxevents.PermanentOn(errInvalid))},
		func(context.Context, *memTx, OrderPlaced) error { return fail }, "welcome-mail")
	fail = errors.New("smtp busy")
	if err := d.Deliver(t.Context(), m); err == nil || outbox.IsPermanent(err) {
		t.Fatalf("an error PermanentOn does not name: %v; want it retryable", err)
	}
	fail = errors.Join(errors.New("customer 7"), errInvalid)
	if err := d.Deliver(t.Context(), m); err != nil {
		t.Fatalf("an error PermanentOn names: %v; want the share parked and the event done (nil)", err)
	}
	if _, ok := store.parkedBy("welcome-mail", m.ID); !ok {
		t.Fatal("the share that failed with a named error is not parked")
	}
}

// Log writes each run with the handler, the event and the outcome.
func TestLogWritesEachRunsHandlerEventAndOutcome(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	var fail error
	d, m := dispatcherWith(t, newMemInbox(), []outboxevents.DispatcherOption{outboxevents.Use(outboxevents.Log(logger))},
		func(context.Context, *memTx, OrderPlaced) error { return fail }, "read-model")
	fail = errors.New("db locked (injected)")
	_ = d.Deliver(t.Context(), m)
	fail = nil
	if err := d.Deliver(t.Context(), m); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 ||
		!strings.Contains(lines[0], "level=WARN") || !strings.Contains(lines[0], "db locked (injected)") ||
		!strings.Contains(lines[1], "level=DEBUG") || !strings.Contains(lines[1], "applied") {
		t.Fatalf("log of a failed then applied run:\n%s\nwant a WARN line with the error, then a DEBUG line", buf.String())
	}
	for _, l := range lines {
		for _, want := range []string{"handler=read-model", "type=orders.placed", "event_id=" + m.ID.String(), "key=o-1", "took="} {
			if !strings.Contains(l, want) {
				t.Errorf("log line %q lacks %q", l, want)
			}
		}
	}
}
