package relaytest

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/outboxdriver"
)

// testTablesRelay checks an outbox.TablesRelay over three tables of the
// store, each from its own call of newHarness: it publishes every message
// of the tables its source lists, each once; a table the source lists
// later is served from the next rescan; a table the source no longer lists
// has its relay stopped, so that a message written to it afterwards stays
// pending while the other tables' messages go out; a source that fails
// keeps the tables listed before served; Shutdown stops every relay and Run
// returns nil.
func testTablesRelay(t *testing.T, newHarness func(t *testing.T) Harness) {
	ctx := context.Background()
	hs := []Harness{newHarness(t), newHarness(t), newHarness(t)}
	src := &changingTables{}
	rec := NewRecorder()
	logs := &LogCapture{}
	watched := &servedTables{}
	tr, err := outbox.NewTablesRelay(src, rec, outbox.TablesConfig{
		OnServe:        watched.onServe,
		RescanInterval: 50 * time.Millisecond,
		Relay:          outbox.Config{PollInterval: 50 * time.Millisecond, Logger: slog.New(logs)},
	})
	if err != nil {
		t.Fatalf("NewTablesRelay: %v", err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- tr.Run(runCtx) }()
	write := func(h Harness, i int) *outbox.Message {
		t.Helper()
		m := newMessage("tables", i)
		if err := h.Write(ctx, true, m); err != nil {
			t.Fatalf("write to %s: %v", h.Store.Name(), err)
		}
		return m
	}
	published := func(ms ...*outbox.Message) func() bool {
		return func() bool {
			for _, m := range ms {
				if rec.Count(m.ID) == 0 {
					return false
				}
			}
			return true
		}
	}

	// A source that lists nothing says so, once while it lists nothing.
	src.set()
	deadline := time.Now().Add(10 * time.Second)
	for !logs.Has(slog.LevelWarn, "lists no table") || src.calls.Load() < 4 {
		if time.Now().After(deadline) {
			t.Fatalf("a source listing no table not logged after 4 rescans; logs:\n%s", logs)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if n := logs.Count(slog.LevelWarn, "lists no table"); n != 1 {
		t.Fatalf("a source listing no table over 4 rescans logged %d times; want once", n)
	}
	src.set(hs[0].Store, hs[1].Store)

	first, second := write(hs[0], 1), write(hs[1], 2)
	rec.WaitFor(t, 10*time.Second, "the messages of the two tables listed", published(first, second))

	added := write(hs[2], 3)
	src.set(hs[0].Store, hs[1].Store, hs[2].Store)
	rec.WaitFor(t, 10*time.Second, "the message of a table listed later", published(added))

	gone := hs[1].Store.Name()
	src.set(hs[0].Store, hs[2].Store)
	deadline = time.Now().Add(10 * time.Second)
	for slices.Contains(tr.Tables(), gone) || !logs.Has(slog.LevelInfo, "outbox relay stopped", "table="+gone) || watched.last(gone) != "stopped" {
		if time.Now().After(deadline) {
			t.Fatalf("the relay of %s, no longer listed, not stopped within 10s (serving %v; OnServe saw %v); logs:\n%s", gone, tr.Tables(), watched.events(gone), logs)
		}
		time.Sleep(10 * time.Millisecond)
	}
	unserved, served := write(hs[1], 4), write(hs[0], 5)
	rec.WaitFor(t, 10*time.Second, "a message of a table still listed", published(served))
	if n := rec.Count(unserved.ID); n != 0 {
		t.Fatalf("message %s of %s, written after the table was no longer listed, published %d times; want its relay stopped", unserved.ID, gone, n)
	}
	if st, err := admin(t, hs[1]).Stats(ctx); err != nil || st.Pending != 1 {
		t.Fatalf("%s after its relay stopped: %+v, %v; want the one message pending", gone, st, err)
	}

	// A source that fails keeps the tables it listed before served.
	before := tr.Tables()
	src.fail(errors.New("database unreachable (injected)"))
	deadline = time.Now().Add(10 * time.Second)
	for !logs.Has(slog.LevelWarn, "cannot list the tables", "database unreachable (injected)") {
		if time.Now().After(deadline) {
			t.Fatalf("a failing source not logged; logs:\n%s", logs)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got := tr.Tables(); !slices.Equal(got, before) {
		t.Fatalf("tables served while the source fails: %v, want those served before %v", got, before)
	}
	whileFailing := write(hs[2], 6)
	rec.WaitFor(t, 10*time.Second, "a message written while the source fails", published(whileFailing))
	src.fail(nil)

	shutdownCtx, stop := context.WithTimeout(ctx, 10*time.Second)
	defer stop()
	if err := tr.Shutdown(shutdownCtx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run returned %v after Shutdown, want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return within 10s of Shutdown")
	}
	for _, m := range []*outbox.Message{first, second, added, served, whileFailing} {
		if n := rec.Count(m.ID); n != 1 {
			t.Errorf("message %s published %d times, want once", m.ID, n)
		}
	}
	if got := tr.Tables(); len(got) != 0 {
		t.Errorf("Tables() after Run returned: %v, want none", got)
	}
	// Each relay's OnServe was undone once it stopped, before the next:
	// a watch of its metrics never outlives it, nor is it made twice.
	for _, h := range hs {
		name := h.Store.Name()
		events := watched.events(name)
		ok := len(events) > 0 && len(events)%2 == 0
		for i, e := range events {
			ok = ok && e == []string{"serve", "stopped"}[i%2]
		}
		if !ok {
			t.Errorf("OnServe of %s and the calls of what it returned: %v; want serve, stopped, ... ending with stopped once Run returned", name, events)
		}
	}
}

// servedTables records a TablesRelay's OnServe calls and the calls of the
// functions they return, by table.
type servedTables struct {
	mu  sync.Mutex
	log map[string][]string
}

func (s *servedTables) onServe(store outboxdriver.Store, relay *outbox.Relay) func() {
	name := store.Name()
	event := "serve"
	if relay == nil {
		event = "serve without a relay"
	}
	s.add(name, event)
	return func() { s.add(name, "stopped") }
}

func (s *servedTables) add(name, event string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.log == nil {
		s.log = map[string][]string{}
	}
	s.log[name] = append(s.log[name], event)
}

// events returns what happened to table name, in order.
func (s *servedTables) events(name string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.log[name])
}

// last returns the latest event of table name ("" if none).
func (s *servedTables) last(name string) string {
	events := s.events(name)
	if len(events) == 0 {
		return ""
	}
	return events[len(events)-1]
}

// StartTablesRelay runs a TablesRelay of src until the test ends, as
// StartRelay does a Relay (a test logger when cfg.Relay.Logger is nil).
func StartTablesRelay(t *testing.T, src outbox.TableSource, pub outbox.Publisher, cfg outbox.TablesConfig) *outbox.TablesRelay {
	t.Helper()
	if cfg.Relay.Logger == nil {
		cfg.Relay.Logger = TestLogger(t)
	}
	tr, err := outbox.NewTablesRelay(src, pub, cfg)
	if err != nil {
		t.Fatalf("NewTablesRelay: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- tr.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("TablesRelay.Run returned %v after cancel, want nil", err)
			}
		case <-time.After(30 * time.Second):
			t.Errorf("TablesRelay.Run did not return within 30s of cancel")
		}
	})
	return tr
}

// changingTables is an outbox.TableSource whose tables a test sets.
type changingTables struct {
	mu     sync.Mutex
	stores []outboxdriver.Store
	err    error
	calls  atomic.Int64 // of Tables: the rescans
}

// fail makes the next Tables calls fail with err (nil: succeed again).
func (c *changingTables) fail(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.err = err
}

// set makes stores the tables of the next Tables calls.
func (c *changingTables) set(stores ...outboxdriver.Store) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stores = stores
}

// Tables returns the stores set last.
func (c *changingTables) Tables(context.Context) ([]outboxdriver.Store, error) {
	c.calls.Add(1)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return nil, c.err
	}
	return slices.Clone(c.stores), nil
}
