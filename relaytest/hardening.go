package relaytest

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/outboxdriver"
)

// The cases below each guard a defect a review found in the relay: how long
// it may publish under a lease, whether idle workers find work while another
// is busy, what Run and Shutdown wait for, and that failures to record
// outcomes are neither silent nor given up after one try.

// testPublishDeadlineFromLease delays the store's answer to the first claim
// by a share of the lease: the lease started when the claim was sent, so the
// publisher's deadline must come before claim start + lease, however late
// the answer came. A claim answered after nine tenths of its lease is not
// published at all: its messages are released and published by a later claim.
func testPublishDeadlineFromLease(t *testing.T, h Harness, lateShare float64) {
	ctx := context.Background()
	m := newMessage("late", 1)
	if err := h.Write(ctx, true, m); err != nil {
		t.Fatal(err)
	}
	const lease = 2 * time.Second
	slow := &slowFirstClaim{Store: h.Store, delay: time.Duration(lateShare * float64(lease)), started: map[uuid.UUID]time.Time{}}
	rec := NewRecorder()
	var (
		mu       sync.Mutex
		overruns []string
		// publishedLate: the publisher was handed the batch of the claim
		// answered late.
		publishedLate bool
	)
	pub := outbox.PublisherFunc(func(ctx context.Context, batch []outbox.Message) []error {
		deadline, ok := ctx.Deadline()
		start := slow.claimStart(batch[0].ID)
		mu.Lock()
		if !ok || deadline.After(start.Add(lease)) {
			overruns = append(overruns, deadline.Sub(start).String())
		}
		if start.Equal(slow.lateStart()) {
			publishedLate = true
		}
		mu.Unlock()
		return rec.Publish(ctx, batch)
	})
	StartRelay(t, slow, pub, outbox.Config{Workers: 1, LeaseDuration: lease, PollInterval: 50 * time.Millisecond, ActivePollInterval: 5 * time.Millisecond})
	rec.WaitFor(t, 20*time.Second, "the message published", func() bool { return rec.Count(m.ID) > 0 })
	mu.Lock()
	defer mu.Unlock()
	if len(overruns) > 0 {
		t.Fatalf("publishing was allowed to run until %v after the claim was sent, past the %v lease: another relay could claim and publish the message meanwhile", overruns, lease)
	}
	if n := rec.Count(m.ID); n != 1 {
		t.Fatalf("message %s published %d times, want once", m.ID, n)
	}
	tooLate := lateShare >= 0.9 // publishTimeout: nine tenths of the lease
	switch {
	case tooLate && publishedLate:
		t.Fatalf("message %s was handed to the publisher from the claim answered %v into its %v lease (past nine tenths): it must be released unpublished and published by a later claim", m.ID, slow.delay, lease)
	case !tooLate && !publishedLate:
		t.Fatalf("message %s was not published from the claim answered %v into its %v lease, though nine tenths of the lease were not over: the deadline was not tested", m.ID, slow.delay, lease)
	}
}

// slowFirstClaim answers the first claim that returns messages late, and
// remembers when each message's latest claim was sent.
type slowFirstClaim struct {
	outboxdriver.Store
	delay time.Duration
	once  sync.Once

	mu      sync.Mutex
	late    time.Time // when the claim answered late was sent
	started map[uuid.UUID]time.Time
}

func (s *slowFirstClaim) SettleAndClaim(ctx context.Context, settle outboxdriver.Settlement, claim outboxdriver.Claim) ([]outbox.Message, error) {
	start := time.Now()
	batch, err := s.Store.SettleAndClaim(ctx, settle, claim)
	if err != nil || len(batch) == 0 {
		return batch, err
	}
	s.mu.Lock()
	for _, m := range batch {
		s.started[m.ID] = start
	}
	s.mu.Unlock()
	s.once.Do(func() {
		s.mu.Lock()
		s.late = start
		s.mu.Unlock()
		time.Sleep(s.delay) // a slow database or network
	})
	return batch, nil
}

// lateStart returns when the claim answered late was sent.
func (s *slowFirstClaim) lateStart() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.late
}

func (s *slowFirstClaim) claimStart(id uuid.UUID) time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.started[id]
}

// testIdleWorkersPollWhileOneIsBusy keeps one worker publishing a batch that
// does not finish, then writes a message without waking the relay: the idle
// worker must find it by polling.
func testIdleWorkersPollWhileOneIsBusy(t *testing.T, h Harness) {
	ctx := context.Background()
	stuck, later := newMessage("stuck", 1), newMessage("later", 2)
	if err := h.Write(ctx, true, stuck); err != nil {
		t.Fatal(err)
	}
	entered, release := make(chan struct{}), make(chan struct{})
	var enteredOnce sync.Once
	rec := NewRecorder()
	pub := outbox.PublisherFunc(func(ctx context.Context, batch []outbox.Message) []error {
		if batch[0].Topic == "stuck" {
			enteredOnce.Do(func() { close(entered) })
			select {
			case <-release:
			case <-ctx.Done():
			}
		}
		return rec.Publish(ctx, batch)
	})
	t.Cleanup(func() { close(release) })
	StartRelay(t, h.Store, pub, outbox.Config{Workers: 2, DisableListen: true, PollInterval: 50 * time.Millisecond, ActivePollInterval: 5 * time.Millisecond})
	<-entered
	if err := h.Write(ctx, true, later); err != nil { // no Notify: found only by polling
		t.Fatal(err)
	}
	rec.WaitFor(t, 5*time.Second, "the idle worker to publish a message written while the other worker is busy", func() bool { return rec.Count(later.ID) == 1 })
}

// testRunWaitsForItsGoroutines gives the relay a listener that takes a while
// to close: Run must not return before it has.
func testRunWaitsForItsGoroutines(t *testing.T, h Harness) {
	l := &slowListener{Store: h.Store, listening: make(chan struct{})}
	relay, err := outbox.NewRelay(l, NewRecorder(), outbox.Config{Logger: TestLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- relay.Run(ctx) }()
	<-l.listening
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	if !l.returned.Load() {
		t.Fatal("Run returned while the relay's listener was still running")
	}
}

// slowListener is a store whose write listener takes 100 ms to close.
type slowListener struct {
	outboxdriver.Store
	listening chan struct{}
	returned  atomic.Bool
}

func (l *slowListener) ListenForWrites(ctx context.Context, wake func()) error {
	close(l.listening)
	<-ctx.Done()
	time.Sleep(100 * time.Millisecond) // closing a connection
	l.returned.Store(true)
	return ctx.Err()
}

// testShutdownReturnsAtItsDeadlineWhileTheStoreHangs stops the database from
// answering while a batch is published, then shuts down with a short
// deadline: Shutdown must return at the deadline, not when the store call
// times out.
func testShutdownReturnsAtItsDeadlineWhileTheStoreHangs(t *testing.T, h Harness) {
	ctx := context.Background()
	m := newMessage("hang", 1)
	if err := h.Write(ctx, true, m); err != nil {
		t.Fatal(err)
	}
	store := &hangingStore{Store: h.Store, up: make(chan struct{})}
	entered, release := make(chan struct{}), make(chan struct{})
	rec := NewRecorder()
	pub := outbox.PublisherFunc(func(ctx context.Context, batch []outbox.Message) []error {
		close(entered)
		<-release
		return rec.Publish(ctx, batch)
	})
	relay, err := outbox.NewRelay(store, pub, outbox.Config{Workers: 1, Logger: TestLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	runDone := make(chan error, 1)
	go func() { runDone <- relay.Run(ctx) }()
	defer func() {
		close(store.up)
		if err := <-runDone; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	<-entered
	store.down.Store(true)
	close(release)
	sctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	shutdownDone := make(chan error, 1)
	start := time.Now()
	go func() { shutdownDone <- relay.Shutdown(sctx) }()
	select {
	case err := <-shutdownDone:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Shutdown past its deadline while the database hangs = %v, want context.DeadlineExceeded", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("Shutdown with a 300ms deadline had not returned %v later: it waits for a store call that hangs", time.Since(start).Round(time.Millisecond))
	}
}

// hangingStore is a store whose calls hang, while down is set, until their
// context ends or the store comes up again.
type hangingStore struct {
	outboxdriver.Store
	down atomic.Bool
	up   chan struct{}
}

func (s *hangingStore) SettleAndClaim(ctx context.Context, settle outboxdriver.Settlement, claim outboxdriver.Claim) ([]outbox.Message, error) {
	if s.down.Load() {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-s.up:
		}
	}
	return s.Store.SettleAndClaim(ctx, settle, claim)
}

// testOutcomesRecordedAfterCancelDespiteAFailedTry cancels Run's context
// while a batch is published; the publisher confirms the batch, and the
// store fails the first two attempts to record it. The relay must keep trying
// (within the lease) rather than give up after one try, which would leave a
// confirmed message to be published again.
func testOutcomesRecordedAfterCancelDespiteAFailedTry(t *testing.T, h Harness) {
	ctx := context.Background()
	m := newMessage("confirmed", 1)
	if err := h.Write(ctx, true, m); err != nil {
		t.Fatal(err)
	}
	store := &flakySettle{Store: h.Store, failures: 2}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	rec := NewRecorder()
	pub := outbox.PublisherFunc(func(ctx context.Context, batch []outbox.Message) []error {
		cancel() // the application stops while the broker confirms
		return rec.Publish(ctx, batch)
	})
	relay, err := outbox.NewRelay(store, pub, outbox.Config{Workers: 1, LeaseDuration: 30 * time.Second, Logger: TestLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	if err := relay.Run(runCtx); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if store.failed.Load() < 2 {
		t.Fatalf("the store failed %d recordings, want 2: the test did not run as designed", store.failed.Load())
	}
	got, err := admin(t, h).Get(ctx, m.ID)
	if err == nil && got.Status == outbox.StatusPending {
		t.Fatalf("message %s was confirmed by the publisher but is still pending after Run returned: the outcome was dropped after a failed try and the message will be published again", m.ID)
	}
	if err != nil && !errors.Is(err, outbox.ErrNotFound) {
		t.Fatal(err)
	}
}

// flakySettle fails the first failures calls that carry published messages.
type flakySettle struct {
	outboxdriver.Store
	failures int32
	failed   atomic.Int32
}

func (s *flakySettle) SettleAndClaim(ctx context.Context, settle outboxdriver.Settlement, claim outboxdriver.Claim) ([]outbox.Message, error) {
	if len(settle.Published) > 0 && s.failed.Load() < s.failures {
		s.failed.Add(1)
		return nil, errors.New("connection reset by peer (injected)")
	}
	return s.Store.SettleAndClaim(ctx, settle, claim)
}

// testFailedRecordingIsLogged makes the destination unavailable, so the relay
// records the batch's outcomes on their own before pausing, and fails that
// recording: the failure must be logged, not dropped.
func testFailedRecordingIsLogged(t *testing.T, h Harness) {
	ctx := context.Background()
	ok, down := newMessage("up", 1), newMessage("down", 2)
	if err := h.Write(ctx, true, ok, down); err != nil {
		t.Fatal(err)
	}
	store := &flakySettle{Store: h.Store, failures: 1}
	rec := NewRecorder()
	rec.Fail = failDown
	logs := &LogCapture{}
	StartRelay(t, store, rec, outbox.Config{Workers: 1, Logger: slog.New(logs), PollInterval: 20 * time.Millisecond, ActivePollInterval: 5 * time.Millisecond})
	rec.WaitFor(t, 10*time.Second, "the up message published", func() bool { return rec.Count(ok.ID) > 0 })
	deadline := time.Now().Add(10 * time.Second)
	for !logs.Has(slog.LevelWarn, "injected") {
		if time.Now().After(deadline) {
			t.Fatalf("the store failed to record a batch's outcomes (%d failures injected), and nothing was logged at warning level or above naming the error; logs:\n%s", store.failed.Load(), logs.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// LogCapture is a slog.Handler that keeps every record, for tests that check
// what was logged: slog.New(&relaytest.LogCapture{}). Loggers derived with
// With keep their attributes and share the records.
type LogCapture struct {
	mu      sync.Mutex
	records []string
	levels  []slog.Level

	parent *LogCapture // the capture that holds the records, for derived handlers
	attrs  []slog.Attr // attributes of a derived handler
}

// Enabled reports true: every level is kept.
func (c *LogCapture) Enabled(context.Context, slog.Level) bool { return true }

// WithAttrs returns a handler that adds attrs to every record it keeps here.
func (c *LogCapture) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &LogCapture{parent: c.root(), attrs: append(slices.Clone(c.attrs), attrs...)}
}

// WithGroup returns c: groups are not kept.
func (c *LogCapture) WithGroup(string) slog.Handler { return c }

func (c *LogCapture) root() *LogCapture {
	if c.parent != nil {
		return c.parent
	}
	return c
}

// Handle keeps r as one line: level, message, attributes.
func (c *LogCapture) Handle(_ context.Context, r slog.Record) error {
	line := r.Level.String() + " " + r.Message
	for _, a := range c.attrs {
		line += " " + a.String()
	}
	r.Attrs(func(a slog.Attr) bool {
		line += " " + a.String()
		return true
	})
	root := c.root()
	root.mu.Lock()
	defer root.mu.Unlock()
	root.records = append(root.records, line)
	root.levels = append(root.levels, r.Level)
	return nil
}

// Has reports whether one record at level or above contains every one of
// words.
func (c *LogCapture) Has(level slog.Level, words ...string) bool {
	return c.Count(level, words...) > 0
}

// Count returns how many records at level or above contain every one of
// words.
func (c *LogCapture) Count(level slog.Level, words ...string) int {
	c = c.root()
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
next:
	for i, line := range c.records {
		if c.levels[i] < level {
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

// String returns every record, one per line.
func (c *LogCapture) String() string {
	c = c.root()
	c.mu.Lock()
	defer c.mu.Unlock()
	return strings.Join(c.records, "\n")
}

// RequireRunRefuses checks that a relay on store refuses to start: Run returns
// an error wrapping outbox.ErrNotMigrated that contains every one of wants
// (and names `outbox migrate up`), rather than running and failing every
// claim. Stores call it on a table that is missing or at an older migration.
func RequireRunRefuses(t *testing.T, store outboxdriver.Store, wants ...string) {
	t.Helper()
	relay, err := outbox.NewRelay(store, NewRecorder(), outbox.Config{Logger: TestLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err = relay.Run(ctx)
	if !errors.Is(err, outbox.ErrNotMigrated) {
		t.Fatalf("Run on a table that is not ready = %v, want an error wrapping outbox.ErrNotMigrated", err)
	}
	for _, want := range append(wants, "outbox migrate up") {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Run's error %q does not say %q", err, want)
		}
	}
}
