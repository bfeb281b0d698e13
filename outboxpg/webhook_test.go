package outboxpg_test

// The webhook publisher end to end on PostgreSQL: messages written in
// committed transactions, relayed by outbox.Relay to an HTTP endpoint. These
// tests live here, not in outboxhttp, so that the root module (which holds
// outboxhttp) needs no PostgreSQL driver; the endpoint helpers below are a
// copy of outboxhttp's test receiver for that reason.

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/pgtest"
	"github.com/go-outbox/outbox/outboxdriver"
	"github.com/go-outbox/outbox/outboxhttp"
	"github.com/go-outbox/outbox/outboxpg"
	"github.com/go-outbox/outbox/publishertest"
)

var secret = []byte("test-secret-0123456789abcdef0123")

// request is one request an endpoint received.
type request struct {
	at     time.Time
	path   string
	query  string
	header http.Header
	body   []byte
}

// endpoint is a webhook receiver that records every request and answers with
// the status its respond function picks (200 when nil).
type endpoint struct {
	*httptest.Server
	mu       sync.Mutex
	requests []request
	arrived  chan struct{} // gets a value per request, never blocks the handler
	respond  func(w http.ResponseWriter, r request, n int) int
}

func newEndpoint(t *testing.T, respond func(w http.ResponseWriter, r request, n int) int) *endpoint {
	t.Helper()
	e := &endpoint{arrived: make(chan struct{}, 100_000), respond: respond}
	e.Server = httptest.NewServer(http.HandlerFunc(e.serve))
	t.Cleanup(e.Close)
	return e
}

func (e *endpoint) serve(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	req := request{at: time.Now(), path: r.URL.Path, query: r.URL.RawQuery, header: r.Header.Clone(), body: body}
	e.mu.Lock()
	n := 0 // earlier requests for the same message
	for _, old := range e.requests {
		if old.header.Get(outboxhttp.HeaderID) == req.header.Get(outboxhttp.HeaderID) {
			n++
		}
	}
	e.mu.Unlock()
	status := http.StatusOK
	reply := &bufferedBody{ResponseWriter: w}
	if e.respond != nil {
		status = e.respond(reply, req, n)
	}
	e.mu.Lock()
	e.requests = append(e.requests, req)
	e.mu.Unlock()
	w.WriteHeader(status)
	w.Write(reply.buf.Bytes())
	e.arrived <- struct{}{}
}

// bufferedBody holds what a respond function writes until the status is
// sent.
type bufferedBody struct {
	http.ResponseWriter
	buf bytes.Buffer
}

func (b *bufferedBody) Write(p []byte) (int, error) { return b.buf.Write(p) }

func (e *endpoint) all() []request {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]request(nil), e.requests...)
}

func newPublisher(t *testing.T, cfg outboxhttp.Config) *outboxhttp.Publisher {
	t.Helper()
	if cfg.Secret == nil {
		cfg.Secret = secret
	}
	p, err := outboxhttp.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// closedURL returns a URL on the loopback where nothing listens.
func closedURL(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return "http://" + addr + "/hook"
}

// harness serves one publishertest run: an endpoint that accepts every
// message except those of the topic "rejected", which it answers with 400.
func harness(t *testing.T) publishertest.Harness {
	e := newEndpoint(t, func(w http.ResponseWriter, r request, _ int) int {
		if r.header.Get(outboxhttp.HeaderTopic) == "rejected" {
			return http.StatusBadRequest
		}
		if err := outboxhttp.Verify(secret, r.header.Get(outboxhttp.HeaderSignature), r.body, 0); err != nil {
			return http.StatusUnauthorized
		}
		return http.StatusOK
	})
	cfg := outboxhttp.Config{URL: e.URL + "/hook"}
	delivered := 0 // accepted requests already returned by Receive
	return publishertest.Harness{
		Publisher: newPublisher(t, cfg),
		Topic:     "orders.created",
		Receive: func(ctx context.Context, n int) ([]publishertest.Received, error) {
			var out []publishertest.Received
			for len(out) < n {
				var accepted []request
				for _, r := range e.all() {
					if r.header.Get(outboxhttp.HeaderTopic) != "rejected" {
						accepted = append(accepted, r)
					}
				}
				for ; delivered < len(accepted) && len(out) < n; delivered++ {
					out = append(out, received(accepted[delivered]))
				}
				if len(out) == n {
					break
				}
				select {
				case <-e.arrived:
				case <-ctx.Done():
					return out, ctx.Err()
				}
			}
			return out, nil
		},
		Unreachable: func(t *testing.T) outbox.Publisher {
			return newPublisher(t, outboxhttp.Config{URL: closedURL(t)})
		},
		Invalid: func() outbox.Message {
			return publishertest.Messages("rejected", 1)[0]
		},
	}
}

func received(r request) publishertest.Received {
	headers := map[string]string{}
	for name := range r.header {
		// HTTP canonicalises names; outbox headers are case-sensitive
		// strings, and the suite's are lower case.
		headers[strings.ToLower(name)] = r.header.Get(name)
	}
	return publishertest.Received{
		ID:      r.header.Get(outboxhttp.HeaderID),
		Topic:   r.header.Get(outboxhttp.HeaderTopic),
		Key:     r.header.Get(outboxhttp.HeaderKey),
		Payload: r.body,
		Headers: headers,
	}
}

// pgStore is a fresh migrated outbox table in PostgreSQL, and a way to write
// to it in committed transactions.
func pgStore(t *testing.T) (*outboxpg.Store, func(ctx context.Context, msgs ...*outbox.Message) error) {
	t.Helper()
	ctx := context.Background()
	opts := outboxpg.Options{Schema: pgtest.Schema(t)}
	pool := pgtest.Pool(t)
	m, err := outboxpg.NewMigrator(pool, opts)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Up(ctx); err != nil {
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
	return store, func(ctx context.Context, msgs ...*outbox.Message) error {
		return w.Transact(ctx, func(tx pgx.Tx) error { return w.Write(ctx, tx, msgs...) })
	}
}

func TestEndToEndThroughARelayOnPostgreSQL(t *testing.T) {
	t.Parallel()
	store, write := pgStore(t)
	publishertest.EndToEnd(t, harness(t), store, write)
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
	e := newEndpoint(t, func(w http.ResponseWriter, _ request, n int) int {
		if n == 0 {
			return http.StatusInternalServerError
		}
		return http.StatusOK
	})
	store, write := pgStore(t)
	runRelay(t, store, newPublisher(t, outboxhttp.Config{URL: e.URL}))
	m := writeOne(t, write, "orders.created")

	eventually(t, store, m.ID, "published (deleted)", func(_ outbox.Message, err error) bool { return errors.Is(err, outbox.ErrNotFound) })
	reqs := e.all()
	if len(reqs) != 2 {
		t.Fatalf("endpoint got %d requests for message %s, want 2 (500, then 200)", len(reqs), m.ID)
	}
	for i, r := range reqs {
		if got := r.header.Get(outboxhttp.HeaderIdempotencyKey); got != m.ID.String() {
			t.Errorf("request %d: Idempotency-Key %q, want the message id %s", i, got, m.ID)
		}
		if err := outboxhttp.Verify(secret, r.header.Get(outboxhttp.HeaderSignature), r.body, 0); err != nil {
			t.Errorf("request %d: %v", i, err)
		}
	}
}

func TestTooManyRequestsWithRetryAfterDelaysTheNextAttemptThatLong(t *testing.T) {
	t.Parallel()
	e := newEndpoint(t, func(w http.ResponseWriter, _ request, n int) int {
		if n == 0 {
			w.Header().Set("Retry-After", "2")
			return http.StatusTooManyRequests
		}
		return http.StatusOK
	})
	store, write := pgStore(t)
	runRelay(t, store, newPublisher(t, outboxhttp.Config{URL: e.URL}))
	m := writeOne(t, write, "orders.created")

	retrying := eventually(t, store, m.ID, "one failed attempt", func(m outbox.Message, err error) bool { return err == nil && m.Attempts == 1 })
	failedAt := e.all()[0].at
	if wait := retrying.AvailableAt.Sub(failedAt); wait < 1900*time.Millisecond {
		t.Errorf("message %s: next attempt stored %v after the 429, want at least the 2s of Retry-After (backoff alone is at most 50ms)", m.ID, wait)
	}
	if !strings.Contains(retrying.LastError, "429") {
		t.Errorf("message %s: LastError %q does not name the status 429", m.ID, retrying.LastError)
	}
	eventually(t, store, m.ID, "published (deleted)", func(_ outbox.Message, err error) bool { return errors.Is(err, outbox.ErrNotFound) })
	reqs := e.all()
	if len(reqs) != 2 {
		t.Fatalf("endpoint got %d requests, want 2", len(reqs))
	}
	if gap := reqs[1].at.Sub(reqs[0].at); gap < 1900*time.Millisecond {
		t.Errorf("retry came %v after the 429 with Retry-After: 2", gap)
	}
}

func TestBadRequestDeadLettersTheMessageAtOnceWithTheStatus(t *testing.T) {
	t.Parallel()
	e := newEndpoint(t, func(w http.ResponseWriter, _ request, _ int) int {
		w.Header().Set("Content-Type", "text/plain")
		io.WriteString(w, "unknown event type\n")
		return http.StatusBadRequest
	})
	store, write := pgStore(t)
	runRelay(t, store, newPublisher(t, outboxhttp.Config{URL: e.URL}))
	m := writeOne(t, write, "orders.created")

	dead := eventually(t, store, m.ID, "dead", func(m outbox.Message, err error) bool { return err == nil && m.Status == outbox.StatusDead })
	if dead.Attempts != 1 || !strings.Contains(dead.LastError, "400 Bad Request") || !strings.Contains(dead.LastError, "unknown event type") {
		t.Errorf("message %s dead after %d attempts with LastError %q; want 1 attempt and the status 400 with the response", m.ID, dead.Attempts, dead.LastError)
	}
	if n := len(e.all()); n != 1 {
		t.Errorf("endpoint got %d requests, want 1", n)
	}
}
