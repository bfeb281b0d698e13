package outboxprom_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/outboxdriver"
	"github.com/go-outbox/outbox/outboxotel"
	"github.com/go-outbox/outbox/outboxotel/outboxprom"
)

// opsStore is a store whose stats, relay registry and stuck keys the test
// sets; the Admin methods besides Stats are unused.
type opsStore struct {
	outboxdriver.Admin
	now time.Time
}

func (s *opsStore) Stats(context.Context) (outboxdriver.Stats, error) {
	return outboxdriver.Stats{Pending: 5, OldestPending: 7 * time.Minute, Dead: 1}, nil
}

func (s *opsStore) Relays(context.Context) ([]outboxdriver.RelayRow, time.Time, error) {
	return []outboxdriver.RelayRow{{Interval: 10 * time.Second, SeenAt: s.now, LastPublishAt: s.now.Add(-2 * time.Minute)}}, s.now, nil
}

func (s *opsStore) StuckKeys(context.Context, time.Duration, int) ([]outboxdriver.StuckKey, int, error) {
	return []outboxdriver.StuckKey{{Key: "order-1"}}, 3, nil
}

func (s *opsStore) BeatRelay(context.Context, outboxdriver.RelayBeat) error { return nil }
func (s *opsStore) RemoveRelay(context.Context, uuid.UUID) error            { return nil }

// The table's operational gauges and the dead letters by class are served
// under the names the alert rules and the dashboard use.
func TestServeShowsLiveRelaysLastPublishAgeStuckKeysAndDeadByClass(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	srv, err := outboxprom.Serve(ctx, "127.0.0.1:0", outboxprom.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Observer().WatchTable(&opsStore{now: time.Now()}, "public.outbox"); err != nil {
		t.Fatal(err)
	}
	m := outbox.Message{ID: uuid.New(), Topic: "orders"}
	srv.Observer().Settled(ctx, "public.outbox", &m, outbox.OutcomeDead, outbox.Permanent(fmt.Errorf("expired at noon: %w", outbox.ErrExpired)))
	want := map[string]*regexp.Regexp{
		"one live relay":            regexp.MustCompile(`(?m)^outbox_live_relays\{[^}]*table="public.outbox"[^}]*\} 1$`),
		"a publication 2 min ago":   regexp.MustCompile(`(?m)^outbox_last_publish_age_seconds\{[^}]*table="public.outbox"[^}]*\} 120$`),
		"3 stuck keys":              regexp.MustCompile(`(?m)^outbox_stuck_keys\{[^}]*table="public.outbox"[^}]*\} 3$`),
		"one expired dead letter":   regexp.MustCompile(`(?m)^outbox_messages_dead_total\{[^}]*class="expired"[^}]*topic="orders"[^}]*\} 1$`),
		"the pending messages (5)":  regexp.MustCompile(`(?m)^outbox_pending_messages\{[^}]*table="public.outbox"[^}]*\} 5$`),
		"the oldest pending's age ": regexp.MustCompile(`(?m)^outbox_oldest_pending_age_seconds\{[^}]*table="public.outbox"[^}]*\} 420$`),
	}
	code, metrics := get(t, srv, "/metrics")
	for what, re := range want {
		if !re.MatchString(metrics) {
			t.Errorf("/metrics (%d) lacks %s (%s):\n%s", code, what, re, metrics)
		}
	}
	requireDocumentedTableMetricsExist(t, metrics)
}

// requireDocumentedTableMetricsExist checks that every gauge of a table
// (those WatchTable exports) the dashboard and the alert rules use is one
// WatchTable exports for a store that has every part.
func requireDocumentedTableMetricsExist(t *testing.T, scrape string) {
	t.Helper()
	name := regexp.MustCompile(`outbox_(live_relays|last_publish_age_seconds|stuck_keys|pending_messages|oldest_pending_age_seconds|dead_messages|behind_dead_messages)\b`)
	for _, doc := range []string{"../../docs/observability/outbox-dashboard.json", "../../docs/observability/outbox-alerts.yml"} {
		text, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range name.FindAllString(string(text), -1) {
			if !strings.Contains(scrape, "\n"+n+"{") {
				t.Errorf("%s uses %s, which WatchTable does not export", doc, n)
			}
		}
	}
}

// /readyz says what each check checks, passing or not: the relay's store
// calls within its ready window, a consumer's readiness, and a check added
// by name, with the reason of each failing one.
func TestReadyzSaysWhatEachCheckChecks(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	billing := &ready{err: errors.New("queue billing not found")}
	srv, err := outboxprom.Serve(ctx, "127.0.0.1:0", outboxprom.Config{
		Consumers: map[string]outboxotel.Readier{"billing": billing},
		Ready:     map[string]func() error{"cache": func() error { return nil }},
	})
	if err != nil {
		t.Fatal(err)
	}
	relay, err := outbox.NewRelay(namedStore{}, outbox.PublisherFunc(func(context.Context, []outbox.Message) []error { return nil }),
		outbox.Config{PollInterval: time.Second, LeaseDuration: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.WatchRelay(relay, "public.outbox"); err != nil {
		t.Fatal(err)
	}
	code, body := get(t, srv, "/readyz")
	want := "not ready: 2 of 3 checks fail\n" +
		"billing: FAILING: queue billing not found (checks: consumer billing is connected and consuming, its adapter's Readiness)\n" +
		"cache: ok\n" +
		"relay public.outbox: FAILING: outbox: relay not running (checks: the relay of public.outbox runs and a store call of it succeeded within its ready window, 30s)\n"
	if code != http.StatusServiceUnavailable || body != want {
		t.Fatalf("/readyz = %d\n%s\nwant 503\n%s", code, body, want)
	}
}

// namedStore is a store for a relay that never runs.
type namedStore struct{ outboxdriver.Store }

func (namedStore) Name() string { return "public.outbox" }
