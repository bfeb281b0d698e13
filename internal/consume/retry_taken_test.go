package consume_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/consume"
)

// flakyEnd is a memParked whose end of a retry (UnparkRetried, ParkRetried)
// fails the first time, as a brief database error does.
type flakyEnd struct {
	*memParked
	mu     sync.Mutex
	failed bool
}

func (f *flakyEnd) failOnce() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failed {
		return nil
	}
	f.failed = true
	return errors.New("connection reset by peer")
}

func (f *flakyEnd) UnparkRetried(ctx context.Context, consumer string, id uuid.UUID, taken time.Time) (bool, error) {
	if err := f.failOnce(); err != nil {
		return false, err
	}
	return f.memParked.UnparkRetried(ctx, consumer, id, taken)
}

func (f *flakyEnd) ParkRetried(ctx context.Context, consumer string, m outbox.Message, taken time.Time, attempts int, reason string) (bool, error) {
	if err := f.failOnce(); err != nil {
		return false, err
	}
	return f.memParked.ParkRetried(ctx, consumer, m, taken, attempts, reason)
}

// A running process whose unpark of a retried, applied message fails once
// hands the message back: it is retried again and its key goes on, rather
// than staying taken, and its key stalled, until an operator forces it.
func TestARetriedMessageWhoseUnparkFailsOnceIsHandedBackAndItsKeyGoesOn(t *testing.T) {
	t.Parallel()
	m1, m2 := message("order-1"), message("order-1")
	log := &appliedLog{poison: map[uuid.UUID]bool{m1.ID: true}}
	store := &flakyEnd{memParked: &memParked{}}
	cfg := parkedConfig(store)
	deliver(t, cfg, log.handle, m1, m2)
	log.heal(m1.ID)
	store.requestRetry("billing", m1.ID)
	stop := consume.StartRetrying(t.Context(), cfg, log.handle)
	defer stop()
	eventually(t, "order-1 unparked, and m2 behind m1 applied, after the unpark of m1 failed once", func() bool {
		ids, _, _ := store.state()
		return len(ids) == 0 && slices.Contains(log.got(), m2.ID)
	})
}

// A running process whose parking again of a retried message that failed
// again fails once hands it back: it is retried again and, failing, parked
// again, not left taken.
func TestARetriedMessageWhoseParkingAgainFailsOnceIsHandedBack(t *testing.T) {
	t.Parallel()
	m1 := message("order-1")
	log := &appliedLog{poison: map[uuid.UUID]bool{m1.ID: true}}
	store := &flakyEnd{memParked: &memParked{}}
	cfg := parkedConfig(store)
	deliver(t, cfg, log.handle, m1)
	store.requestRetry("billing", m1.ID)
	stop := consume.StartRetrying(t.Context(), cfg, log.handle)
	defer stop()
	eventually(t, "m1 parked again, not taken, after parking it again failed once", func() bool {
		r := store.row("billing", m1.ID)
		return store.failedOnce() && r != nil && r.taken.IsZero() && !r.retry
	})
}

func (f *flakyEnd) failedOnce() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.failed
}

// A process takes one requested retry at a time: the others stay requested,
// not taken, while a handler has the first, so a process killed meanwhile
// leaves only that one taken.
func TestAProcessTakesOneRequestedRetryAtATime(t *testing.T) {
	t.Parallel()
	m1, m2 := message("order-1"), message("order-2")
	g := newGatedHandler(m1.ID)
	g.log.poison[m2.ID] = true
	store := &memParked{}
	cfg := parkedConfig(store)
	// One at a time: m1 parked first, so taken first.
	deliver(t, cfg, g.handle, m1)
	deliver(t, cfg, g.handle, m2)
	g.log.heal(m1.ID)
	g.log.heal(m2.ID)
	store.requestRetry("billing", m1.ID)
	store.requestRetry("billing", m2.ID)
	stop := consume.StartRetrying(t.Context(), cfg, g.handle)
	defer stop()
	<-g.entered
	r := store.row("billing", m2.ID)
	g.end <- nil
	if r == nil || !r.taken.IsZero() || !r.retry {
		t.Fatalf("message %s while the retry of %s was in its handler: %+v; want its retry still requested, not taken", m2.ID, m1.ID, r)
	}
	eventually(t, "both retried and unparked", func() bool { ids, _, _ := store.state(); return len(ids) == 0 })
}

// brokenEnd is a store whose unpark of a retried message always fails (a
// role without DELETE on the parked table, say).
type brokenEnd struct{ *memParked }

func (b *brokenEnd) UnparkRetried(context.Context, string, uuid.UUID, time.Time) (bool, error) {
	return false, errors.New("permission denied for table inbox_parked")
}

// A retried message whose end is never recorded is handed back each time,
// and taken again at the next poll, not at once: else the process would run
// its handler and write its logs in a loop as fast as the database answers.
func TestARetriedMessageHandedBackIsTakenAgainAtTheNextPollNotAtOnce(t *testing.T) {
	t.Parallel()
	m1 := message("order-1")
	store := &brokenEnd{memParked: &memParked{}}
	cfg := parkedConfig(store)
	cfg.RetryPoll = time.Hour
	if err := store.Park(t.Context(), "billing", m1, 5, "no such customer"); err != nil {
		t.Fatal(err)
	}
	store.requestRetry("billing", m1.ID)
	var runs atomic.Int64
	stop := consume.StartRetrying(t.Context(), cfg, func(context.Context, outbox.Message) error { runs.Add(1); return nil })
	eventually(t, "m1 run once and handed back, its retry requested again", func() bool {
		r := store.row("billing", m1.ID)
		return runs.Load() > 0 && r != nil && r.retry && r.taken.IsZero()
	})
	stop()
	if n := runs.Load(); n != 1 {
		t.Fatalf("the handler ran %d times before the next poll (an hour away); want once, the message taken again at the next poll", n)
	}
}
