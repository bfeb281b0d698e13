package outboxprom_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/consume"
	"github.com/go-outbox/outbox/outboxotel"
	"github.com/go-outbox/outbox/outboxotel/outboxprom"
)

// memInbox is an inbox table in memory: processed ids and parked messages,
// enough for an outbox.Inbox and a consumer's Parked.
type memInbox struct {
	mu        sync.Mutex
	processed map[uuid.UUID]bool
	parked    map[string]map[uuid.UUID]outbox.Message
}

func newMemInbox() *memInbox {
	return &memInbox{processed: map[uuid.UUID]bool{}, parked: map[string]map[uuid.UUID]outbox.Message{}}
}

// RunInTx runs fn with no transaction: the test's handlers write nothing.
func (t *memInbox) RunInTx(_ context.Context, fn func(tx struct{}) error) error {
	return fn(struct{}{})
}

func (t *memInbox) MarkProcessed(_ context.Context, _ struct{}, _ string, id uuid.UUID) (bool, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	first := !t.processed[id]
	t.processed[id] = true
	return first, nil
}

func (t *memInbox) Park(_ context.Context, consumer string, m outbox.Message, _ int, _ string) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.parked[consumer] == nil {
		t.parked[consumer] = map[uuid.UUID]outbox.Message{}
	}
	t.parked[consumer][m.ID] = m
	return nil
}

func (t *memInbox) TakeRetries(context.Context, string, int) ([]outbox.Message, error) {
	return nil, nil
}

func (t *memInbox) Unpark(_ context.Context, consumer string, id uuid.UUID) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.parked[consumer], id)
	return nil
}

func (t *memInbox) ParkedCounts(context.Context) (map[string]int64, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	counts := map[string]int64{}
	for c, ms := range t.parked {
		if len(ms) > 0 {
			counts[c] = int64(len(ms))
		}
	}
	return counts, nil
}

// ready is a readiness check the test sets.
type ready struct {
	mu  sync.Mutex
	err error
}

func (r *ready) set(err error) { r.mu.Lock(); r.err = err; r.mu.Unlock() }
func (r *ready) Ready() error  { r.mu.Lock(); defer r.mu.Unlock(); return r.err }

// delivery is a broker's delivery of one message.
type delivery struct{ m outbox.Message }

func (d delivery) Message() outbox.Message                { return d.m }
func (d delivery) Attempt() int                           { return 1 }
func (d delivery) Ack(context.Context) error              { return nil }
func (d delivery) Park(context.Context, int, error) error { return nil }
func (d delivery) Working()                               {}

// get fetches path from the server and returns its status and body.
func get(t *testing.T, srv *outboxprom.Server, path string) (int, string) {
	t.Helper()
	resp, err := http.Get("http://" + srv.Addr().String() + path)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	return resp.StatusCode, string(body)
}

// waitGet polls path until ok holds for its answer, failing the test after
// 10s with the last answer.
func waitGet(t *testing.T, srv *outboxprom.Server, path, what string, ok func(code int, body string) bool) string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		code, body := get(t, srv, path)
		if ok(code, body) {
			return body
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after 10s waiting for %s; GET %s = %d:\n%s", what, path, code, body)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Serve, on a real listener, serves what a consumer's operator needs:
// /readyz answers 503 with the consumer's reason until it consumes, then
// 200; /metrics shows the message it parked in its inbox table, the one its
// inbox applied, and that it is ready; /healthz answers while the process
// does.
func TestServeShowsAConsumersParkedMessagesHandledCountAndReadiness(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	table := newMemInbox()
	ready := &consume.Readiness{}
	ready.Start("outboxtest", "billing", errors.New("connecting to the broker"))
	srv, err := outboxprom.Serve(ctx, "127.0.0.1:0", outboxprom.Config{
		Consumers: map[string]outboxotel.Readier{"billing": ready},
		Inbox:     table,
		Observer:  outboxotel.Config{StatsCacheFor: time.Nanosecond},
	})
	if err != nil {
		t.Fatal(err)
	}

	if code, body := get(t, srv, "/healthz"); code != http.StatusOK {
		t.Fatalf("/healthz = %d %q, want 200", code, body)
	}
	code, body := get(t, srv, "/readyz")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "billing") || !strings.Contains(body, "connecting to the broker") {
		t.Fatalf("/readyz while the consumer connects = %d %q, want 503 naming the consumer and why", code, body)
	}

	// The consumer: an inbox observed by the served observer, and the
	// adapters' engine parking after one failed attempt.
	inbox, err := outbox.NewInbox(table, "billing")
	if err != nil {
		t.Fatal(err)
	}
	inbox.Observe(srv.Observer())
	poison, fine := outbox.Message{ID: uuid.New(), Topic: "orders"}, outbox.Message{ID: uuid.New(), Topic: "orders"}
	apply := inbox.Apply(func(_ context.Context, _ struct{}, m outbox.Message) error {
		if m.ID == poison.ID {
			return outbox.Permanent(errors.New("no such customer"))
		}
		return nil
	})
	cfg := consume.Config{Consumer: "billing", MaxDeliver: 1, BackoffBase: time.Millisecond, BackoffMax: time.Millisecond,
		Logger: slog.New(slog.DiscardHandler), Observer: srv.Observer(), Parked: table}
	ready.Consuming()
	consume.Handle(ctx, cfg, delivery{poison}, apply)
	consume.Handle(ctx, cfg, delivery{fine}, apply)

	waitGet(t, srv, "/readyz", "/readyz to answer 200 once the consumer consumes", func(code int, body string) bool {
		return code == http.StatusOK && strings.HasPrefix(body, "ready: 1 check passes\nbilling: ok (checks: ")
	})
	want := map[string]*regexp.Regexp{
		"one parked message": regexp.MustCompile(`(?m)^outbox_inbox_parked_messages\{[^}]*consumer="billing"[^}]*\} 1$`),
		"none waiting":       regexp.MustCompile(`(?m)^outbox_inbox_waiting_messages\{[^}]*consumer="billing"[^}]*\} 0$`),
		"one applied":        regexp.MustCompile(`(?m)^outbox_inbox_handled_total\{[^}]*consumer="billing"[^}]*\} 1$`),
		"the consumer ready": regexp.MustCompile(`(?m)^outbox_consumer_ready\{[^}]*consumer="billing"[^}]*\} 1$`),
	}
	metrics := waitGet(t, srv, "/metrics", "the consumer's metrics", func(code int, body string) bool {
		for _, re := range want {
			if !re.MatchString(body) {
				return false
			}
		}
		return code == http.StatusOK
	})
	requireDocumentedConsumerMetricsExist(t, metrics)

	if err := srv.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if _, err := http.Get("http://" + srv.Addr().String() + "/healthz"); err == nil {
		t.Fatalf("/healthz answers after Close")
	}
}

// A check added once the server serves (a relay made after it, say) is run
// by /readyz from then on.
func TestServeRunsAReadinessCheckAddedAfterItStarted(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	srv, err := outboxprom.Serve(ctx, "127.0.0.1:0", outboxprom.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if code, body := get(t, srv, "/readyz"); code != http.StatusOK {
		t.Fatalf("/readyz with no check = %d %q, want 200", code, body)
	}
	r := &ready{err: errors.New("store unreachable")}
	srv.AddReady("relay", r.Ready)
	if code, body := get(t, srv, "/readyz"); code != http.StatusServiceUnavailable || body != "not ready: 1 of 1 check fails\nrelay: FAILING: store unreachable\n" {
		t.Fatalf("/readyz with a failing check = %d %q, want 503 \"relay: FAILING: store unreachable\"", code, body)
	}
	r.set(nil)
	if code, _ := get(t, srv, "/readyz"); code != http.StatusOK {
		t.Fatalf("/readyz once the check passes = %d, want 200", code)
	}
	cancel()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := http.Get("http://" + srv.Addr().String() + "/healthz"); err != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the server still answers 10s after its context ended")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// requireDocumentedConsumerMetricsExist checks that every consumer metric
// (outbox_inbox_*, outbox_consumer_*) the Grafana dashboard and the alert
// rules use is one a consumer exports, so that a renamed metric cannot
// leave them silently empty (cmd/outbox checks the relay's the same way).
func requireDocumentedConsumerMetricsExist(t *testing.T, scrape string) {
	t.Helper()
	name := regexp.MustCompile(`outbox_(inbox|consumer)_[a-z_]+`)
	eventOnly := map[string]bool{"outbox_inbox_duplicates_total": true}
	for _, doc := range []string{"../../docs/observability/outbox-dashboard.json", "../../docs/observability/outbox-alerts.yml"} {
		text, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range name.FindAllString(string(text), -1) {
			if !eventOnly[n] && !strings.Contains(scrape, "\n"+n) {
				t.Errorf("%s uses %s, which a consumer does not export", doc, n)
			}
		}
	}
}
