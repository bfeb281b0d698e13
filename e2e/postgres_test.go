package e2e_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/pgtest"
	"github.com/go-outbox/outbox/outboxpg"
)

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// pgOutbox is a migrated outbox table in a fresh PostgreSQL schema.
type pgOutbox struct {
	store  *outboxpg.Store
	w      *outbox.Writer[pgx.Tx]
	schema string
}

func newPGOutbox(t *testing.T) pgOutbox {
	t.Helper()
	pool := pgtest.Pool(t)
	opts := outboxpg.Options{Schema: pgtest.Schema(t)}
	m, err := outboxpg.NewMigrator(pool, opts)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Up(ctxFor(t, 30*time.Second)); err != nil {
		t.Fatal(err)
	}
	store, err := outboxpg.New(pool, opts)
	if err != nil {
		t.Fatal(err)
	}
	w, err := outbox.NewWriter(store, outbox.WriterConfig{})
	if err != nil {
		t.Fatal(err)
	}
	return pgOutbox{store: store, w: w, schema: opts.Schema}
}

// write commits msgs in one transaction and wakes the relays of the process.
func (o pgOutbox) write(ctx context.Context, msgs ...*outbox.Message) error {
	return o.w.Transact(ctx, func(ctx context.Context, tx pgx.Tx) error { return o.w.Write(ctx, tx, msgs...) })
}

// writeBatch commits batch in one transaction.
func (o pgOutbox) writeBatch(ctx context.Context, batch []outbox.Message) error {
	ptrs := make([]*outbox.Message, len(batch))
	for i := range batch {
		ptrs[i] = &batch[i]
	}
	return o.write(ctx, ptrs...)
}

// outcomes records what a publisher reported for each message.
type outcomes struct {
	next outbox.Publisher

	mu        sync.Mutex
	ok        map[uuid.UUID]bool
	failures  int
	permanent []error
	lastErr   error
}

func newOutcomes(next outbox.Publisher) *outcomes {
	return &outcomes{next: next, ok: map[uuid.UUID]bool{}}
}

func (o *outcomes) Publish(ctx context.Context, batch []outbox.Message) []error {
	errs := o.next.Publish(ctx, batch)
	o.mu.Lock()
	defer o.mu.Unlock()
	for i, err := range errs {
		switch {
		case err == nil:
			o.ok[batch[i].ID] = true
		case outbox.IsPermanent(err):
			o.permanent = append(o.permanent, err)
		default:
			o.failures++
			o.lastErr = err
		}
	}
	return errs
}

// Close closes the publisher the outcomes are counted for.
func (o *outcomes) Close() error { return o.next.Close() }

func (o *outcomes) counts() (ok, failures int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.ok), o.failures
}

// confirmed returns the ids the publisher reported published.
func (o *outcomes) confirmed() []uuid.UUID {
	o.mu.Lock()
	defer o.mu.Unlock()
	ids := make([]uuid.UUID, 0, len(o.ok))
	for id := range o.ok {
		ids = append(ids, id)
	}
	return ids
}

// requireNoPermanent fails the test if a broker outage produced a permanent
// outcome, and logs the last retryable one.
func (o *outcomes) requireNoPermanent(t *testing.T) {
	t.Helper()
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.permanent) > 0 {
		t.Fatalf("%d permanent outcomes, e.g. %v; a broker outage must be retryable", len(o.permanent), o.permanent[0])
	}
	t.Logf("a retryable failure of the outage: %v", o.lastErr)
}

// waitFor polls cond until it holds or the timeout passes.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
