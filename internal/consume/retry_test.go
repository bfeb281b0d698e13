package consume_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/google/uuid"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/consume"
)

// logBuffer is a log's text, safe for concurrent writers.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// gatedHandler holds the retry of one message in its handler until the test
// lets it end, with end's error; it applies the others.
type gatedHandler struct {
	id      uuid.UUID
	entered chan struct{}
	end     chan error
	log     appliedLog
}

func newGatedHandler(id uuid.UUID) *gatedHandler {
	return &gatedHandler{id: id, entered: make(chan struct{}, 1), end: make(chan error), log: appliedLog{poison: map[uuid.UUID]bool{id: true}}}
}

func (g *gatedHandler) handle(ctx context.Context, m outbox.Message) error {
	if m.ID == g.id && !g.log.isPoison(m.ID) {
		g.entered <- struct{}{}
		if err := <-g.end; err != nil {
			return err
		}
	}
	return g.log.handle(ctx, m)
}

func (a *appliedLog) isPoison(id uuid.UUID) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.poison[id]
}

// discardedInItsHandler parks m1 with m2 behind it, retries m1, and while
// m1 is in its handler, discards it as `discard --taken` does; the handler
// then ends with end. It returns the store and the log once m2, whose key
// the discard passed on, was applied.
func discardedInItsHandler(t *testing.T, end error) (m1, m2 outbox.Message, store *memParked, applied []uuid.UUID, logged string) {
	t.Helper()
	m1, m2 = message("order-1"), message("order-1")
	g := newGatedHandler(m1.ID)
	store = &memParked{}
	cfg := parkedConfig(store)
	var logs logBuffer
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	deliver(t, cfg, g.handle, m1, m2)
	g.log.heal(m1.ID)
	store.requestRetry("billing", m1.ID)
	stop := consume.StartRetrying(t.Context(), cfg, g.handle)
	defer stop()
	<-g.entered
	store.discard("billing", m1.ID)
	g.end <- end
	eventually(t, "m2 applied once the head before it was discarded", func() bool { return slices.Contains(g.log.got(), m2.ID) })
	stop()
	return m1, m2, store, g.log.got(), logs.String()
}

// An operator who forces the discard of a message in its handler chose to
// drop it: if the handler then fails, the message is not parked again (as
// a new head that would hold its key a second time).
func TestARetriedMessageDiscardedInItsHandlerIsNotParkedAgainWhenItFails(t *testing.T) {
	t.Parallel()
	m1, _, store, _, logged := discardedInItsHandler(t, outbox.Permanent(errors.New("still no such customer")))
	if ids, _, _ := store.state(); len(ids) != 0 {
		t.Fatalf("parked %v after %s, discarded in its handler, failed again; want nothing parked", ids, m1.ID)
	}
	if !loggedDiscard(logged, m1.ID) {
		t.Fatalf("log after %s, discarded in its handler, failed again:\n%s\nwant a line saying it was discarded", m1.ID, logged)
	}
}

// A message discarded while its handler applies it was applied anyway: the
// process says so, since its key went on without it.
func TestARetriedMessageDiscardedInItsHandlerAndAppliedIsReported(t *testing.T) {
	t.Parallel()
	m1, m2, store, applied, logged := discardedInItsHandler(t, nil)
	if !slices.Equal(applied, []uuid.UUID{m1.ID, m2.ID}) {
		t.Fatalf("applied %v; want %s then %s", applied, m1.ID, m2.ID)
	}
	if ids, _, _ := store.state(); len(ids) != 0 {
		t.Fatalf("parked %v once both were applied; want nothing", ids)
	}
	if !loggedDiscard(logged, m1.ID) {
		t.Fatalf("log after %s, discarded in its handler, was applied:\n%s\nwant a line saying it was discarded and applied nonetheless", m1.ID, logged)
	}
}

// loggedDiscard reports whether logged has a line that says id was
// discarded while its handler ran.
func loggedDiscard(logged string, id uuid.UUID) bool {
	for line := range strings.Lines(logged) {
		if strings.Contains(line, "discarded while its handler ran") && strings.Contains(line, "message_id="+id.String()) {
			return true
		}
	}
	return false
}

// A process that stops while a retried message is in its handler hands it
// back: its retry is requested again, for the next process to take,
// instead of it staying taken until an operator forces it.
func TestAProcessStoppingDuringARetryHandsTheMessageBack(t *testing.T) {
	t.Parallel()
	m1 := message("order-1")
	store := &memParked{}
	cfg := parkedConfig(store)
	if err := store.Park(t.Context(), "billing", m1, 5, "no such customer"); err != nil {
		t.Fatal(err)
	}
	store.requestRetry("billing", m1.ID)
	entered := make(chan struct{})
	handler := func(ctx context.Context, m outbox.Message) error {
		close(entered)
		<-ctx.Done()
		return ctx.Err()
	}
	stop := consume.StartRetrying(t.Context(), cfg, handler)
	<-entered
	stop()
	if ids, _, _ := store.state(); !slices.Equal(ids, []uuid.UUID{m1.ID}) {
		t.Fatalf("parked %v once the process stopped during the retry of %s; want it still parked", ids, m1.ID)
	}
	if got, _ := store.TakeRetries(t.Context(), "billing", 10); len(got) != 1 || got[0].ID != m1.ID {
		t.Fatalf("retries a next process takes once the process stopped during the retry of %s: %v; want %s again", m1.ID, got, m1.ID)
	}
}
