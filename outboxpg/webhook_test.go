package outboxpg_test

// The webhook publisher end to end on PostgreSQL: messages written in
// committed transactions, relayed by outbox.Relay to an HTTP Endpoint. These
// tests live here, not in outboxhttp, so that the root module (which holds
// outboxhttp) needs no PostgreSQL driver; the receiver is internal/webhooktest,
// shared with outboxhttp's tests.

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/pgtest"
	"github.com/go-outbox/outbox/internal/webhooktest"
	"github.com/go-outbox/outbox/outboxdriver"
	"github.com/go-outbox/outbox/outboxhttp"
	"github.com/go-outbox/outbox/outboxpg"
	"github.com/go-outbox/outbox/publishertest"
)

// pgStore is a fresh migrated outbox table in PostgreSQL, and a way to write
// to it in committed transactions.
func pgStore(t *testing.T) (*outboxpg.Store, func(ctx context.Context, msgs ...*outbox.Message) error) {
	t.Helper()
	store := newStore(t, pgtest.Pool(t), outboxpg.Options{})
	w := newWriter[pgx.Tx](t, store)
	return store, func(ctx context.Context, msgs ...*outbox.Message) error {
		return w.Transact(ctx, func(ctx context.Context, tx pgx.Tx) error { return w.Write(ctx, tx, msgs...) })
	}
}

func TestEndToEndThroughARelayOnPostgreSQL(t *testing.T) {
	t.Parallel()
	store, write := pgStore(t)
	publishertest.EndToEnd(t, webhooktest.Harness(t), store, write)
}

// runRelay runs a relay with quick retries until the test ends.
func runRelay(t *testing.T, store outboxdriver.Store, pub outbox.Publisher) {
	t.Helper()
	relay, err := outbox.NewRelay(store, pub, outbox.Config{
		BackoffBase:  10 * time.Millisecond,
		BackoffMax:   50 * time.Millisecond,
		PollInterval: 20 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- relay.Run(ctx) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("Relay.Run: %v", err)
		}
	})
}

// eventually polls the message's stored state until ok accepts it.
func eventually(t *testing.T, store *outboxpg.Store, id uuid.UUID, want string, ok func(m outbox.Message, err error) bool) outbox.Message {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		m, err := store.Get(context.Background(), id)
		if ok(m, err) {
			return m
		}
		if time.Now().After(deadline) {
			t.Fatalf("message %s: stored state %+v (err %v) after 30s, want %s", id, m, err, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func writeOne(t *testing.T, write func(ctx context.Context, msgs ...*outbox.Message) error, topic string) outbox.Message {
	t.Helper()
	m := publishertest.Messages(topic, 1)[0]
	if err := write(context.Background(), &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func TestServerErrorIsRetriedUntilTheEndpointAcceptsTheMessage(t *testing.T) {
	t.Parallel()
	e := webhooktest.NewEndpoint(t, func(w http.ResponseWriter, _ webhooktest.Request, n int) int {
		if n == 0 {
			return http.StatusInternalServerError
		}
		return http.StatusOK
	})
	store, write := pgStore(t)
	runRelay(t, store, webhooktest.NewPublisher(t, outboxhttp.Config{URL: e.URL}))
	m := writeOne(t, write, "orders.created")

	eventually(t, store, m.ID, "published (deleted)", func(_ outbox.Message, err error) bool { return errors.Is(err, outbox.ErrNotFound) })
	reqs := e.All()
	if len(reqs) != 2 {
		t.Fatalf("endpoint got %d requests for message %s, want 2 (500, then 200)", len(reqs), m.ID)
	}
	for i, r := range reqs {
		if got := r.Header.Get(outboxhttp.HeaderIdempotencyKey); got != m.ID.String() {
			t.Errorf("request %d: Idempotency-Key %q, want the message id %s", i, got, m.ID)
		}
		if err := outboxhttp.Verify(webhooktest.Secret, r.Header, r.Body, 0); err != nil {
			t.Errorf("request %d: %v", i, err)
		}
	}
}

func TestTooManyRequestsWithRetryAfterDelaysTheNextAttemptThatLong(t *testing.T) {
	t.Parallel()
	e := webhooktest.NewEndpoint(t, func(w http.ResponseWriter, _ webhooktest.Request, n int) int {
		if n == 0 {
			w.Header().Set("Retry-After", "2")
			return http.StatusTooManyRequests
		}
		return http.StatusOK
	})
	store, write := pgStore(t)
	runRelay(t, store, webhooktest.NewPublisher(t, outboxhttp.Config{URL: e.URL}))
	m := writeOne(t, write, "orders.created")

	retrying := eventually(t, store, m.ID, "one failed attempt", func(m outbox.Message, err error) bool { return err == nil && m.Attempts == 1 })
	failedAt := e.All()[0].At
	if wait := retrying.AvailableAt.Sub(failedAt); wait < 1900*time.Millisecond {
		t.Errorf("message %s: next attempt stored %v after the 429, want at least the 2s of Retry-After (backoff alone is at most 50ms)", m.ID, wait)
	}
	if !strings.Contains(retrying.LastError, "429") {
		t.Errorf("message %s: LastError %q does not name the status 429", m.ID, retrying.LastError)
	}
	eventually(t, store, m.ID, "published (deleted)", func(_ outbox.Message, err error) bool { return errors.Is(err, outbox.ErrNotFound) })
	reqs := e.All()
	if len(reqs) != 2 {
		t.Fatalf("endpoint got %d requests, want 2", len(reqs))
	}
	if gap := reqs[1].At.Sub(reqs[0].At); gap < 1900*time.Millisecond {
		t.Errorf("retry came %v after the 429 with Retry-After: 2", gap)
	}
}

func TestBadRequestDeadLettersTheMessageAtOnceWithTheStatus(t *testing.T) {
	t.Parallel()
	e := webhooktest.NewEndpoint(t, func(w http.ResponseWriter, _ webhooktest.Request, _ int) int {
		w.Header().Set("Content-Type", "text/plain")
		io.WriteString(w, "unknown event type\n")
		return http.StatusBadRequest
	})
	store, write := pgStore(t)
	runRelay(t, store, webhooktest.NewPublisher(t, outboxhttp.Config{URL: e.URL}))
	m := writeOne(t, write, "orders.created")

	dead := eventually(t, store, m.ID, "dead", func(m outbox.Message, err error) bool { return err == nil && m.Status == outbox.StatusDead })
	if dead.Attempts != 1 || !strings.Contains(dead.LastError, "400 Bad Request") || !strings.Contains(dead.LastError, "unknown event type") {
		t.Errorf("message %s dead after %d attempts with LastError %q; want 1 attempt and the status 400 with the response", m.ID, dead.Attempts, dead.LastError)
	}
	if n := len(e.All()); n != 1 {
		t.Errorf("endpoint got %d requests, want 1", n)
	}
}
