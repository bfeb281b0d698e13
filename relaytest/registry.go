package relaytest

import (
	"context"
	"encoding/json"
	"os"
	"testing"
	"time"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/outboxdriver"
)

// testRelayRegistersItself runs a relay on a store with a relay registry and
// checks its row: there from the start, refreshed every heartbeat with when
// it last claimed and published, and removed when the relay stops.
func testRelayRegistersItself(t *testing.T, h Harness) {
	reg, ok := h.Store.(outboxdriver.RelayRegistry)
	if !ok {
		t.Skip("the store keeps no relay registry (outboxdriver.RelayRegistry)")
	}
	ctx := context.Background()
	rows := func() ([]outboxdriver.RelayRow, time.Time) {
		t.Helper()
		rows, now, err := reg.Relays(ctx)
		if err != nil {
			t.Fatalf("Relays: %v", err)
		}
		return rows, now
	}
	const interval = 50 * time.Millisecond
	rec := NewRecorder()
	relay, err := outbox.NewRelay(h.Store, rec, outbox.Config{HeartbeatInterval: interval, Workers: 3, PollInterval: 100 * time.Millisecond, Logger: TestLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- relay.Run(ctx) }()
	t.Cleanup(func() { _ = relay.Shutdown(ctx) })

	var row outboxdriver.RelayRow
	rec.WaitFor(t, 10*time.Second, "the relay's row in the registry", func() bool {
		list, _ := rows()
		if len(list) == 1 {
			row = list[0]
		}
		return len(list) == 1
	})
	host, _ := os.Hostname()
	var cfg map[string]any
	if err := json.Unmarshal([]byte(row.Config), &cfg); err != nil || cfg["workers"] != float64(3) {
		t.Fatalf("registered config %s (%v); want JSON with workers 3", row.Config, err)
	}
	if row.Host != host || row.PID != os.Getpid() || row.Version == "" || row.Interval != interval {
		t.Fatalf("registered host %q pid %d version %q interval %v; want %q, %d, a version, %v", row.Host, row.PID, row.Version, row.Interval, host, os.Getpid(), interval)
	}
	if !row.LastPublishAt.IsZero() {
		t.Fatalf("an idle relay's row says it published at %v", row.LastPublishAt)
	}

	m := newMessage("registry", 1)
	if err := h.Write(ctx, true, m); err != nil {
		t.Fatal(err)
	}
	h.Notify()
	rec.WaitFor(t, 10*time.Second, "the message published and the next beat to say so", func() bool {
		list, now := rows()
		if len(list) != 1 || list[0].LastPublishAt.IsZero() {
			return false
		}
		row = list[0]
		return row.Live(now) && !row.LastClaimAt.IsZero()
	})
	if rec.Count(m.ID) != 1 {
		t.Fatalf("the message was published %d times; want 1", rec.Count(m.ID))
	}
	seen := row.SeenAt
	rec.WaitFor(t, 10*time.Second, "a later beat", func() bool {
		list, _ := rows()
		return len(list) == 1 && list[0].SeenAt.After(seen)
	})

	if err := relay.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	if list, _ := rows(); len(list) != 0 {
		t.Fatalf("after the relay stopped the registry lists %d relays; want its row removed", len(list))
	}
}
