package outboxotel_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/outboxdriver"
)

// opsStore is an outboxdriver.Admin with a relay registry and stuck keys,
// whose answers the test sets; the Admin methods besides Stats are unused.
type opsStore struct {
	outboxdriver.Admin
	mu         sync.Mutex
	relays     []outboxdriver.RelayRow
	now        time.Time
	stuck      int
	stuckAfter time.Duration // the threshold of the last StuckKeys call
	stuckLimit int
	relaysErr  error
	stuckErr   error
	relayCalls atomic.Int32
	stuckCalls atomic.Int32
}

func (s *opsStore) Stats(context.Context) (outboxdriver.Stats, error) {
	return outboxdriver.Stats{Pending: 3}, nil
}

func (s *opsStore) Relays(context.Context) ([]outboxdriver.RelayRow, time.Time, error) {
	s.relayCalls.Add(1)
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.relays, s.now, s.relaysErr
}

func (s *opsStore) StuckKeys(_ context.Context, olderThan time.Duration, limit int) ([]outboxdriver.StuckKey, int, error) {
	s.stuckCalls.Add(1)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stuckAfter, s.stuckLimit = olderThan, limit
	if s.stuckErr != nil {
		return nil, 0, s.stuckErr
	}
	var keys []outboxdriver.StuckKey
	if s.stuck > 0 {
		keys = []outboxdriver.StuckKey{{Key: "order-1"}}
	}
	return keys, s.stuck, nil
}

func (s *opsStore) BeatRelay(context.Context, outboxdriver.RelayBeat) error { return nil }
func (s *opsStore) RemoveRelay(context.Context, uuid.UUID) error            { return nil }

var (
	_ outboxdriver.RelayRegistry  = (*opsStore)(nil)
	_ outboxdriver.StuckKeyFinder = (*opsStore)(nil)
)

// The table's operational gauges count the relays live at the database's
// clock (a stale row is not), the age of the latest publication of any
// registered relay, stale ones included, and the stuck keys past the
// default threshold, read with a limit of 1.
func TestTableGaugesShowLiveRelaysLastPublishAgeAndStuckKeys(t *testing.T) {
	s := newSDK(t)
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	store := &opsStore{now: now, stuck: 4, relays: []outboxdriver.RelayRow{
		{Interval: 10 * time.Second, SeenAt: now.Add(-5 * time.Second), LastPublishAt: now.Add(-90 * time.Second)},
		{Interval: 10 * time.Second, SeenAt: now.Add(-31 * time.Second), LastPublishAt: now.Add(-40 * time.Second)}, // stale
		{Interval: 10 * time.Second, SeenAt: now.Add(-1 * time.Second)},                                             // never published
	}}
	if _, err := s.obs.WatchTable(store, "public.outbox"); err != nil {
		t.Fatal(err)
	}
	got := s.collect(t)
	table := attrs("table", "public.outbox")
	for name, want := range map[string]float64{
		"outbox.live.relays":      2,
		"outbox.last_publish.age": 40,
		"outbox.stuck.keys":       4,
		"outbox.pending.messages": 3,
	} {
		if v, ok := got[name][table]; !ok || v != want {
			t.Errorf("%s = %v (exported: %v), want %v; all: %v", name, v, ok, want, got)
		}
	}
	if store.stuckAfter != 5*time.Minute || store.stuckLimit != 1 {
		t.Errorf("StuckKeys(%s, %d), want the default threshold of 5m and a limit of 1", store.stuckAfter, store.stuckLimit)
	}
}

// With no relay that ever published, the age of the last publication is not
// exported rather than made up; the other gauges are.
func TestLastPublishAgeIsAbsentWhileNoRegisteredRelayEverPublished(t *testing.T) {
	s := newSDK(t)
	now := time.Now()
	store := &opsStore{now: now, relays: []outboxdriver.RelayRow{{Interval: time.Second, SeenAt: now}}}
	if _, err := s.obs.WatchTable(store, "public.outbox"); err != nil {
		t.Fatal(err)
	}
	got := s.collect(t)
	table := attrs("table", "public.outbox")
	if v, ok := got["outbox.last_publish.age"][table]; ok {
		t.Errorf("outbox.last_publish.age = %v with no relay that published, want it not exported", v)
	}
	if got["outbox.live.relays"][table] != 1 {
		t.Errorf("outbox.live.relays = %v, want 1; all: %v", got["outbox.live.relays"][table], got)
	}
}

// handled collects what otel.Handle receives while the test runs.
type handled struct {
	mu   sync.Mutex
	errs []error
}

func (h *handled) Handle(err error) { h.mu.Lock(); h.errs = append(h.errs, err); h.mu.Unlock() }

func (h *handled) count(target error) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, err := range h.errs {
		if errors.Is(err, target) {
			n++
		}
	}
	return n
}

// catchErrors makes otel.Handle report to the returned handler until the
// test ends.
func catchErrors(t *testing.T) *handled {
	h := &handled{}
	otel.SetErrorHandler(h)
	t.Cleanup(func() { otel.SetErrorHandler(otel.ErrorHandlerFunc(func(error) {})) })
	return h
}

// A store whose registry and stuck-key reads fail as not migrated keeps its
// other gauges; the missing part is reported once and not read again.
func TestAStoreNotMigratedForRelaysOrStuckKeysKeepsItsOtherGaugesAndIsToldOnce(t *testing.T) {
	errs := catchErrors(t)
	s := newSDKCachingFor(t, 0)
	notMigrated := fmt.Errorf("%w: the relay registry does not exist (migration 7)", outboxdriver.ErrNotMigrated)
	store := &opsStore{relaysErr: notMigrated, stuckErr: notMigrated}
	if _, err := s.obs.WatchTable(store, "public.outbox"); err != nil {
		t.Fatal(err)
	}
	var got map[string]map[attribute.Set]float64
	table := attrs("table", "public.outbox")
	for range 4 {
		got = s.collect(t)
		if v, ok := got["outbox.pending.messages"][table]; !ok || v != 3 {
			t.Fatalf("outbox.pending.messages = %v (exported: %v) with the registry not migrated, want 3; all: %v", v, ok, got)
		}
	}
	for _, name := range []string{"outbox.live.relays", "outbox.last_publish.age", "outbox.stuck.keys"} {
		if len(got[name]) > 0 {
			t.Errorf("%s exported %v from a store not migrated for it, want nothing", name, got[name])
		}
	}
	if n := errs.count(outboxdriver.ErrNotMigrated); n != 2 {
		t.Errorf("4 collections reported %d not-migrated errors, want 2 (once for the registry, once for stuck keys): %v", n, errs.errs)
	}
	if r, k := store.relayCalls.Load(), store.stuckCalls.Load(); r != 1 || k != 1 {
		t.Errorf("4 collections read the missing registry %d times and stuck keys %d times, want once each", r, k)
	}
}

// A failed read of the registry that is not a missing table keeps the last
// values read, as the table's stats do.
func TestRelayGaugesShowTheLastValuesReadWhenARegistryReadFails(t *testing.T) {
	catchErrors(t)
	s := newSDKCachingFor(t, 0)
	now := time.Now()
	store := &opsStore{now: now, relays: []outboxdriver.RelayRow{{Interval: time.Minute, SeenAt: now}}}
	if _, err := s.obs.WatchTable(store, "public.outbox"); err != nil {
		t.Fatal(err)
	}
	s.collect(t)
	store.mu.Lock()
	store.relaysErr = errors.New("connection reset")
	store.mu.Unlock()
	got := s.collect(t)
	if v := got["outbox.live.relays"][attrs("table", "public.outbox")]; v != 1 {
		t.Errorf("outbox.live.relays = %v after a failed read, want the last value read, 1; all: %v", v, got)
	}
}

// A store without a registry or stuck keys (an Admin only) exports none of
// their gauges.
func TestAStoreWithoutRegistryOrStuckKeysExportsNoneOfTheirGauges(t *testing.T) {
	s := newSDK(t)
	if _, err := s.obs.WatchTable(&countingStats{}, "public.outbox"); err != nil {
		t.Fatal(err)
	}
	got := s.collect(t)
	for _, name := range []string{"outbox.live.relays", "outbox.last_publish.age", "outbox.stuck.keys"} {
		if len(got[name]) > 0 {
			t.Errorf("%s exported %v for a store without it, want nothing", name, got[name])
		}
	}
}

// Dead messages are counted by class, as `outbox dead groups` sorts them,
// so that an alert tells expired messages from the others.
func TestDeadMessagesAreCountedByClassPermanentExhaustedOrExpired(t *testing.T) {
	s := newSDK(t)
	ctx := context.Background()
	m := outbox.Message{ID: uuid.New(), Topic: "orders"}
	expired := outbox.Permanent(fmt.Errorf("expired at 2026-05-01T12:00:00Z: %w", outbox.ErrExpired))
	s.obs.Settled(ctx, "public.outbox", &m, outbox.OutcomeDead, outbox.Permanent(errors.New("312 NO_ROUTE")))
	s.obs.Settled(ctx, "public.outbox", &m, outbox.OutcomeDead, errors.New("broker down"))
	s.obs.Settled(ctx, "public.outbox", &m, outbox.OutcomeDead, errors.New("broker down"))
	s.obs.Settled(ctx, "public.outbox", &m, outbox.OutcomeDead, expired)
	s.obs.Settled(ctx, "public.outbox", &m, outbox.OutcomeDead, expired)
	s.obs.Settled(ctx, "public.outbox", &m, outbox.OutcomeDead, expired)

	got := s.collect(t)["outbox.messages.dead"]
	for class, want := range map[string]float64{"permanent": 1, "exhausted": 2, "expired": 3} {
		if v := got[attrs("table", "public.outbox", "topic", "orders", "class", class)]; v != want {
			t.Errorf("outbox.messages.dead{class=%s} = %v, want %v; all: %v", class, v, want, got)
		}
	}
}
