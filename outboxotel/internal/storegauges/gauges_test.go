package storegauges_test

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/pgtest"
	"github.com/go-outbox/outbox/outboxdriver"
	"github.com/go-outbox/outbox/outboxotel"
	"github.com/go-outbox/outbox/outboxpg"
	"github.com/go-outbox/outbox/outboxsqlite"
)

// store is what the tests need of a store: the table's gauges read it, the
// test writes messages through it and registers relays in it.
type store interface {
	outboxdriver.Admin
	outboxdriver.RelayRegistry
	Name() string
}

// subject is a store on a migrated table and how to write to it.
type subject struct {
	store store
	// write writes msgs in one transaction.
	write func(t *testing.T, msgs ...*outbox.Message)
}

// postgres returns a store on a table in a fresh schema migrated to version
// (0: the latest).
func postgres(t *testing.T, version int) subject {
	t.Helper()
	pool := pgtest.Pool(t)
	opts := outboxpg.Options{Schema: pgtest.Schema(t)}
	m, err := outboxpg.NewMigrator(pool, opts)
	if err != nil {
		t.Fatal(err)
	}
	if version == 0 {
		version = m.Latest()
	}
	if _, err := m.To(t.Context(), version); err != nil {
		t.Fatalf("migrate to %d: %v", version, err)
	}
	s, err := outboxpg.New(pool, opts)
	if err != nil {
		t.Fatal(err)
	}
	w, err := outbox.NewWriter(s, outbox.WriterConfig{})
	if err != nil {
		t.Fatal(err)
	}
	return subject{store: s, write: func(t *testing.T, msgs ...*outbox.Message) {
		t.Helper()
		if err := s.RunInTx(t.Context(), func(tx pgx.Tx) error { return w.Write(t.Context(), tx, msgs...) }); err != nil {
			t.Fatalf("write: %v", err)
		}
	}}
}

// sqlite returns a store on a new database file migrated to version (0:
// the latest).
func sqlite(t *testing.T, version int) subject {
	t.Helper()
	opts := outboxsqlite.Options{CreateIfMissing: true}
	s, err := outboxsqlite.Open(t.Context(), filepath.Join(t.TempDir(), "outbox.db"), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	m, err := outboxsqlite.NewMigrator(s.DB(), opts)
	if err != nil {
		t.Fatal(err)
	}
	if version == 0 {
		version = m.Latest()
	}
	if _, err := m.To(t.Context(), version); err != nil {
		t.Fatalf("migrate to %d: %v", version, err)
	}
	w, err := outbox.NewWriter(s, outbox.WriterConfig{})
	if err != nil {
		t.Fatal(err)
	}
	return subject{store: s, write: func(t *testing.T, msgs ...*outbox.Message) {
		t.Helper()
		if err := s.RunInTx(t.Context(), func(tx *sql.Tx) error { return w.Write(t.Context(), tx, msgs...) }); err != nil {
			t.Fatalf("write: %v", err)
		}
	}}
}

var stores = map[string]func(t *testing.T, version int) subject{"postgres": postgres, "sqlite": sqlite}

// gauges watches the table of s with an observer that reads it again at
// every collection.
type gauges struct {
	reader *sdkmetric.ManualReader
	table  attribute.Set
}

func watch(t *testing.T, s store) gauges {
	t.Helper()
	reader := sdkmetric.NewManualReader()
	obs, err := outboxotel.NewObserver(outboxotel.Config{
		MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)),
		StatsCacheFor: time.Nanosecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := obs.WatchTable(s, s.Name()); err != nil {
		t.Fatal(err)
	}
	return gauges{reader: reader, table: attribute.NewSet(attribute.String("table", s.Name()))}
}

// collect returns the table's gauges by name; a gauge not exported is
// absent.
func (g gauges) collect(t *testing.T) map[string]float64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := g.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Gauge[int64]:
				for _, p := range d.DataPoints {
					if p.Attributes.Equals(&g.table) {
						out[m.Name] = float64(p.Value)
					}
				}
			case metricdata.Gauge[float64]:
				for _, p := range d.DataPoints {
					if p.Attributes.Equals(&g.table) {
						out[m.Name] = p.Value
					}
				}
			}
		}
	}
	return out
}

// waitFor collects until ok holds, failing the test after 10 s with the
// last gauges.
func (g gauges) waitFor(t *testing.T, what string, ok func(map[string]float64) bool) map[string]float64 {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := g.collect(t)
		if ok(got) {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after 10s waiting for %s; gauges: %v", what, got)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func beat(t *testing.T, s store, interval, sincePublish time.Duration) {
	t.Helper()
	err := s.BeatRelay(t.Context(), outboxdriver.RelayBeat{
		ID: uuid.New(), Host: "test", PID: 1, Version: "test", Config: "{}",
		Interval: interval, SinceClaim: sincePublish, SincePublish: sincePublish, Forget: 24 * time.Hour,
	})
	if err != nil {
		t.Fatalf("register a relay: %v", err)
	}
}

// The gauges of a table follow its relay registry: none live and no
// publication before a relay registers; then the relays seen within their
// heartbeats, and the time since the latest publication of any of them,
// the one that went stale included.
func TestTableGaugesCountLiveRelaysAndTheirLastPublicationOnEveryStore(t *testing.T) {
	for name, open := range stores {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s := open(t, 0).store
			g := watch(t, s)
			got := g.collect(t)
			if v, ok := got["outbox.live.relays"]; !ok || v != 0 {
				t.Errorf("outbox.live.relays = %v (exported: %v) before any relay registered, want 0", v, ok)
			}
			if v, ok := got["outbox.last_publish.age"]; ok {
				t.Errorf("outbox.last_publish.age = %v before any relay registered, want it not exported", v)
			}

			beat(t, s, time.Hour, 90*time.Second)
			got = g.collect(t)
			if v := got["outbox.live.relays"]; v != 1 {
				t.Errorf("outbox.live.relays = %v after a relay registered, want 1; all: %v", v, got)
			}
			if v := got["outbox.last_publish.age"]; v < 90 || v > 150 {
				t.Errorf("outbox.last_publish.age = %v after a relay that published 90s ago registered, want 90 to 150", v)
			}

			// A relay beating every millisecond is stale 3 ms after its
			// beat; its later publication still counts.
			beat(t, s, time.Millisecond, 10*time.Second)
			got = g.waitFor(t, "the relay beating every millisecond to go stale", func(got map[string]float64) bool {
				return got["outbox.live.relays"] == 1
			})
			if v := got["outbox.last_publish.age"]; v < 10 || v > 70 {
				t.Errorf("outbox.last_publish.age = %v once a relay that published 10s ago went stale, want 10 to 70 (its publication counts)", v)
			}
		})
	}
}

// The stuck keys gauge counts the keys whose head waited past the threshold
// (5 minutes by default), not the younger ones, nor messages without a key.
func TestTableGaugesCountStuckKeysOnEveryStore(t *testing.T) {
	for name, open := range stores {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			sub := open(t, 0)
			g := watch(t, sub.store)
			if v, ok := g.collect(t)["outbox.stuck.keys"]; !ok || v != 0 {
				t.Errorf("outbox.stuck.keys = %v (exported: %v) on an empty table, want 0", v, ok)
			}
			old := time.Now().Add(-10 * time.Minute)
			sub.write(t,
				&outbox.Message{Topic: "orders", Key: "order-1", CreatedAt: old, AvailableAt: old},
				&outbox.Message{Topic: "orders", Key: "order-1"},
				&outbox.Message{Topic: "orders", Key: "order-2", CreatedAt: old, AvailableAt: old},
				&outbox.Message{Topic: "orders", Key: "order-3"},
				&outbox.Message{Topic: "orders", CreatedAt: old},
			)
			got := g.collect(t)
			if v := got["outbox.stuck.keys"]; v != 2 {
				t.Errorf("outbox.stuck.keys = %v with two keys whose head waited 10 minutes, want 2; all: %v", v, got)
			}
			if v := got["outbox.pending.messages"]; v != 5 {
				t.Errorf("outbox.pending.messages = %v, want 5", v)
			}
		})
	}
}

// errorLog collects what otel.Handle receives.
type errorLog struct {
	mu   sync.Mutex
	errs []error
}

func (l *errorLog) Handle(err error) { l.mu.Lock(); l.errs = append(l.errs, err); l.mu.Unlock() }

// A table migrated before the relay registry existed keeps its other
// gauges: stats and stuck keys; the live relays and last publication are
// left out.
func TestTableGaugesOfATableWithoutRelayRegistryLeaveOutOnlyTheRelaysOnEveryStore(t *testing.T) {
	errs := &errorLog{}
	otel.SetErrorHandler(errs)
	t.Cleanup(func() { otel.SetErrorHandler(otel.ErrorHandlerFunc(func(error) {})) })
	// The last migration before the registry's.
	for name, version := range map[string]int{"postgres": 6, "sqlite": 5} {
		t.Run(name, func(t *testing.T) {
			sub := stores[name](t, version)
			g := watch(t, sub.store)
			sub.write(t, &outbox.Message{Topic: "orders", Key: "order-1", CreatedAt: time.Now().Add(-10 * time.Minute), AvailableAt: time.Now().Add(-10 * time.Minute)})
			var got map[string]float64
			for range 3 {
				got = g.collect(t)
			}
			if got["outbox.pending.messages"] != 1 || got["outbox.stuck.keys"] != 1 {
				t.Errorf("gauges of a table without registry: %v; want 1 pending and 1 stuck key", got)
			}
			for _, gone := range []string{"outbox.live.relays", "outbox.last_publish.age"} {
				if v, ok := got[gone]; ok {
					t.Errorf("%s = %v for a table without registry, want it left out", gone, v)
				}
			}
		})
	}
	notMigrated := 0
	for _, err := range errs.errs {
		if errors.Is(err, outboxdriver.ErrNotMigrated) {
			notMigrated++
		}
	}
	if notMigrated != 2 {
		t.Errorf("%d errors reported as not migrated, want 2 (once per store): %v", notMigrated, errs.errs)
	}
}
