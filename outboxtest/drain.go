package outboxtest

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/outboxdriver"
)

// DrainTimeoutDefault is DrainConfig.Timeout when zero.
const DrainTimeoutDefault = 30 * time.Second

// drainPoll is how often Drain looks at the table while the relay works.
const drainPoll = 5 * time.Millisecond

// Store is what Drain needs of a store: the relay's contract and the
// operator's counts. *outboxpg.Store and *outboxsqlite.Store are both.
type Store interface {
	outboxdriver.Store
	outboxdriver.Admin
}

// DrainConfig tunes DrainWith. The zero value takes every default.
type DrainConfig struct {
	// Relay configures the relay. Its Logger, if nil, becomes one that
	// writes warnings and errors to the test's log; with it, an error the
	// relay logs (a broken publisher, outcomes it could not record) fails
	// the test.
	Relay outbox.Config
	// Timeout bounds the drain; past it the test fails with the table's
	// counts. Default DrainTimeoutDefault.
	Timeout time.Duration
}

// Drain runs a relay on store with pub until no message is due and none is
// in flight, then stops it and returns the messages pub confirmed meanwhile,
// in the order it confirmed them. Messages waiting for a retry later, or
// scheduled later, stay pending: Drain publishes what is due now. It fails
// the test if the relay cannot start (a table not migrated), logs an error,
// or has not finished within DrainTimeoutDefault.
func Drain(t testing.TB, store Store, pub outbox.Publisher) []outbox.Message {
	t.Helper()
	return DrainWith(t, store, pub, DrainConfig{})
}

// DrainWith is Drain with a relay configuration and a timeout of the
// caller's.
func DrainWith(t testing.TB, store Store, pub outbox.Publisher, cfg DrainConfig) []outbox.Message {
	t.Helper()
	timeout := cfg.Timeout
	if timeout <= 0 {
		timeout = DrainTimeoutDefault
	}
	var logged *testLog
	if cfg.Relay.Logger == nil {
		logged = newTestLog(t)
		cfg.Relay.Logger = slog.New(logged)
	}
	rec, wrapped := newConfirmed(pub)
	relay, err := outbox.NewRelay(store, wrapped, cfg.Relay)
	if err != nil {
		t.Fatalf("outboxtest: Drain: %v", err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- relay.Run(ctx) }()

	quiet, why, runErr, ended := waitQuiet(ctx, store, done)
	if !ended {
		// Nothing is in flight: Shutdown lets the relay record what it
		// holds and return at once. Past the timeout it aborts instead.
		_ = relay.Shutdown(ctx)
		runErr = <-done
	}
	if logged != nil {
		logged.close()
	}
	switch {
	case runErr != nil:
		t.Fatalf("outboxtest: Drain: the relay stopped: %v", runErr)
	case logged != nil && len(logged.errors()) > 0:
		t.Fatalf("outboxtest: Drain: the relay logged errors:\n  %s", strings.Join(logged.errors(), "\n  "))
	case !quiet:
		t.Fatalf("outboxtest: Drain: %s", why)
	}
	return rec.messages()
}

// waitQuiet polls the table until nothing is due and nothing is leased. A
// due message is either free (NextDue says so) or leased by a worker
// (Stats.InFlight): a worker records an outcome and claims its next batch in
// one exchange, so no message is out of both between the two looks. A
// claim a store holds in an open transaction (outboxpg's TransactionLeases)
// hides its messages from both; Shutdown then waits for that batch.
func waitQuiet(ctx context.Context, store Store, done <-chan error) (quiet bool, why string, runErr error, ended bool) {
	ticker := time.NewTicker(drainPoll)
	defer ticker.Stop()
	last := "the relay has not looked at the table yet"
	for {
		select {
		case <-ctx.Done():
			return false, "not drained in time: " + last, nil, false
		case err := <-done:
			return false, "the relay stopped before the table was drained", err, true
		case <-ticker.C:
		}
		wait, any, err := store.NextDue(ctx)
		if err != nil {
			last = fmt.Sprintf("the last look at the table failed: %v", err)
			continue
		}
		if any && wait <= 0 {
			last = "messages were still due"
			continue
		}
		stats, err := store.Stats(ctx)
		if err != nil {
			last = fmt.Sprintf("the last look at the table failed: %v", err)
			continue
		}
		if stats.InFlight > 0 {
			last = fmt.Sprintf("%d message(s) were still in flight", stats.InFlight)
			continue
		}
		return true, "", nil, false
	}
}

// confirmed wraps the drain's publisher to keep what it confirmed.
type confirmed struct {
	pub  outbox.Publisher
	mu   sync.Mutex
	msgs []outbox.Message
}

// keyOrderConfirmed is confirmed for a publisher that keeps key order: the
// relay must still see that it does (outbox.KeyOrderKeeper), or it would
// hand it a key's messages in waves.
type keyOrderConfirmed struct{ *confirmed }

func (keyOrderConfirmed) KeepsKeyOrder() {}

func newConfirmed(pub outbox.Publisher) (*confirmed, outbox.Publisher) {
	c := &confirmed{pub: pub}
	if _, ok := pub.(outbox.KeyOrderKeeper); ok {
		return c, keyOrderConfirmed{c}
	}
	return c, c
}

func (c *confirmed) Publish(ctx context.Context, batch []outbox.Message) []error {
	errs := c.pub.Publish(ctx, batch)
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, err := range errs {
		if err == nil && i < len(batch) && len(errs) == len(batch) {
			c.msgs = append(c.msgs, batch[i])
		}
	}
	return errs
}

// Close does nothing: the publisher is the caller's.
func (c *confirmed) Close() error { return nil }

func (c *confirmed) messages() []outbox.Message {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.msgs)
}

// testLog is a slog.Handler writing warnings and errors to the test's log
// and keeping the errors. After close it drops everything: a test's log
// must not be written once the test may have ended.
type testLog struct {
	attrs []slog.Attr
	sink  *logSink
}

// logSink is what a testLog and the copies WithAttrs makes share.
type logSink struct {
	closed bool
	errs   []string
	mu     sync.Mutex
	t      testing.TB
}

func newTestLog(t testing.TB) *testLog { return &testLog{sink: &logSink{t: t}} }

func (l *testLog) Enabled(_ context.Context, level slog.Level) bool { return level >= slog.LevelWarn }

func (l *testLog) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString(r.Message)
	write := func(a slog.Attr) bool {
		fmt.Fprintf(&b, " %s=%v", a.Key, a.Value)
		return true
	}
	for _, a := range l.attrs {
		write(a)
	}
	r.Attrs(write)
	s := l.sink
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.t.Logf("%s %s", r.Level, b.String())
	if r.Level >= slog.LevelError {
		s.errs = append(s.errs, b.String())
	}
	return nil
}

func (l *testLog) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &testLog{attrs: append(slices.Clip(l.attrs), attrs...), sink: l.sink}
}

// WithGroup flattens groups: the relay's logs use none that matter here.
func (l *testLog) WithGroup(string) slog.Handler { return l }

func (l *testLog) close() {
	l.sink.mu.Lock()
	defer l.sink.mu.Unlock()
	l.sink.closed = true
}

func (l *testLog) errors() []string {
	l.sink.mu.Lock()
	defer l.sink.mu.Unlock()
	return slices.Clone(l.sink.errs)
}
