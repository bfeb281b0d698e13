package outboxhttp_test

import (
	"bufio"
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

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/outboxhttp"
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

func TestConformance(t *testing.T) {
	t.Parallel()
	publishertest.Run(t, harness)
}

func TestRequestCarriesTheMessageHeadersAndTheOutboxOnes(t *testing.T) {
	t.Parallel()
	e := newEndpoint(t, nil)
	p := newPublisher(t, outboxhttp.Config{URL: e.URL + "/hook?tenant=a"})
	with := outbox.Message{ID: uuid.Must(uuid.NewV7()), Topic: "orders.created", Key: "order-1", Payload: []byte(`{}`), Headers: map[string]string{
		"content-type":    "application/json",
		"traceparent":     "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
		"Idempotency-Key": "forged",
		"Host":            "evil.example",
	}}
	without := outbox.Message{ID: uuid.Must(uuid.NewV7()), Topic: "orders.created", Payload: []byte{0, 1}}
	if err := errors.Join(p.Publish(context.Background(), []outbox.Message{with, without})...); err != nil {
		t.Fatal(err)
	}
	byID := map[string]request{}
	for _, r := range e.all() {
		byID[r.header.Get(outboxhttp.HeaderID)] = r
		if r.path != "/hook" || r.query != "tenant=a" {
			t.Errorf("request went to %s?%s, want /hook?tenant=a", r.path, r.query)
		}
	}
	r := byID[with.ID.String()]
	for name, want := range map[string]string{
		"Content-Type":    "application/json",
		"Traceparent":     with.Headers["traceparent"],
		"Idempotency-Key": with.ID.String(),
		"Outbox-Topic":    "orders.created",
		"Outbox-Key":      "order-1",
	} {
		if got := r.header.Get(name); got != want {
			t.Errorf("message %s: header %s = %q, want %q", with.ID, name, got, want)
		}
	}
	r = byID[without.ID.String()]
	if got := r.header.Get("Content-Type"); got != outboxhttp.ContentTypeDefault {
		t.Errorf("message %s without content-type sent as %q, want %q", without.ID, got, outboxhttp.ContentTypeDefault)
	}
	if _, ok := r.header[outboxhttp.HeaderKey]; ok {
		t.Errorf("message %s with an empty key carries %s", without.ID, outboxhttp.HeaderKey)
	}
}

func TestTopicsGoToTheirURLsAndATopicWithoutOneFailsPermanently(t *testing.T) {
	t.Parallel()
	orders, fallback := newEndpoint(t, nil), newEndpoint(t, nil)
	routed := newPublisher(t, outboxhttp.Config{URLs: map[string]string{"orders": orders.URL}})
	both := newPublisher(t, outboxhttp.Config{URL: fallback.URL, URLs: map[string]string{"orders": orders.URL}})
	ctx := context.Background()

	errs := routed.Publish(ctx, []outbox.Message{publishertest.Messages("orders", 1)[0], publishertest.Messages("payments", 1)[0]})
	if errs[0] != nil {
		t.Fatalf("routed topic: %v", errs[0])
	}
	var pe *outboxhttp.PublishError
	if !outbox.IsPermanent(errs[1]) || !errors.As(errs[1], &pe) || pe.Topic != "payments" || !strings.Contains(errs[1].Error(), "no URL") {
		t.Fatalf("topic without URL: %v, want a permanent *PublishError saying it has no URL", errs[1])
	}
	if err := errors.Join(both.Publish(ctx, []outbox.Message{publishertest.Messages("payments", 1)[0]})...); err != nil {
		t.Fatal(err)
	}
	if n, m := len(orders.all()), len(fallback.all()); n != 1 || m != 1 {
		t.Fatalf("orders endpoint got %d requests, default endpoint %d; want 1 each", n, m)
	}
}

func TestStatusesAreClassifiedRetryableOrPermanent(t *testing.T) {
	t.Parallel()
	for status, permanent := range map[int]bool{
		http.StatusBadRequest: true, http.StatusUnauthorized: true, http.StatusNotFound: true,
		http.StatusRequestEntityTooLarge: true, http.StatusUnprocessableEntity: true,
		http.StatusMovedPermanently: true, http.StatusFound: true, http.StatusPermanentRedirect: true,
		http.StatusRequestTimeout: false, http.StatusTooManyRequests: false, http.StatusInternalServerError: false,
		http.StatusBadGateway: false, http.StatusServiceUnavailable: false, http.StatusGatewayTimeout: false,
	} {
		e := newEndpoint(t, func(w http.ResponseWriter, _ request, _ int) int {
			if status >= 300 && status < 400 {
				w.Header().Set("Location", "/elsewhere?token=s3cret")
			}
			return status
		})
		p := newPublisher(t, outboxhttp.Config{URL: e.URL})
		m := publishertest.Messages("t", 1)[0]
		err := p.Publish(context.Background(), []outbox.Message{m})[0]
		var pe *outboxhttp.PublishError
		switch {
		case err == nil || !errors.As(err, &pe):
			t.Errorf("status %d: %v, want a *PublishError", status, err)
		case pe.StatusCode != status || pe.ID != m.ID:
			t.Errorf("status %d: error %+v has the wrong status or id", status, pe)
		case outbox.IsPermanent(err) != permanent:
			t.Errorf("status %d: %v is permanent %v, want %v", status, err, outbox.IsPermanent(err), permanent)
		case strings.Contains(err.Error(), "s3cret"):
			t.Errorf("status %d: %v shows the redirect's query", status, err)
		}
		if n := len(e.all()); n != 1 {
			t.Errorf("status %d: endpoint got %d requests, want 1 (redirects are not followed)", status, n)
		}
	}
}

func TestRetryAfterIsReportedAndHoldsBackTheRestOfTheBatch(t *testing.T) {
	t.Parallel()
	date := time.Now().Add(90 * time.Second).UTC().Format(http.TimeFormat)
	for _, tc := range []struct {
		header string
		status int
		min    time.Duration
		max    time.Duration
	}{
		{"2", http.StatusTooManyRequests, 2 * time.Second, 2 * time.Second},
		{date, http.StatusServiceUnavailable, 80 * time.Second, 90 * time.Second},
		{"86400", http.StatusTooManyRequests, 5 * time.Minute, 5 * time.Minute}, // capped by MaxRetryAfter
	} {
		e := newEndpoint(t, func(w http.ResponseWriter, _ request, _ int) int {
			w.Header().Set("Retry-After", tc.header)
			return tc.status
		})
		p := newPublisher(t, outboxhttp.Config{URL: e.URL, Sequential: true, MaxRetryAfter: 5 * time.Minute})
		batch := publishertest.Messages("t", 3)
		errs := p.Publish(context.Background(), batch)
		for i, err := range errs {
			d, ok := outbox.RetryAfterOf(err)
			if !ok || d < tc.min-time.Second || d > tc.max || outbox.IsPermanent(err) {
				t.Errorf("Retry-After %q, message %d: %v asks for %v (%v), want retryable after %v..%v", tc.header, i, err, d, ok, tc.min, tc.max)
			}
		}
		if n := len(e.all()); n != 1 {
			t.Errorf("Retry-After %q: endpoint got %d requests, want 1: the rest of the batch waits", tc.header, n)
		}
	}
}

func TestSequentialHoldsBackTheLaterMessagesOfAFailedKey(t *testing.T) {
	t.Parallel()
	failing := uuid.Must(uuid.NewV7())
	e := newEndpoint(t, func(w http.ResponseWriter, r request, _ int) int {
		if r.header.Get(outboxhttp.HeaderID) == failing.String() {
			return http.StatusBadGateway
		}
		return http.StatusOK
	})
	p := newPublisher(t, outboxhttp.Config{URL: e.URL, Sequential: true})
	batch := []outbox.Message{
		{ID: failing, Topic: "t", Key: "a"},
		{ID: uuid.Must(uuid.NewV7()), Topic: "t", Key: "b"},
		{ID: uuid.Must(uuid.NewV7()), Topic: "t", Key: "a"},
	}
	errs := p.Publish(context.Background(), batch)
	if errs[0] == nil || errs[1] != nil || errs[2] == nil || outbox.IsPermanent(errs[2]) {
		t.Fatalf("outcomes %v; want key a's first message failed, b delivered, a's second held back retryably", errs)
	}
	got := e.all()
	if len(got) != 2 || got[0].header.Get(outboxhttp.HeaderID) != failing.String() || got[1].header.Get(outboxhttp.HeaderKey) != "b" {
		t.Fatalf("endpoint got %d requests; want the failing one, then key b's, in order", len(got))
	}
}

func TestConcurrencyBoundsTheRequestsInFlight(t *testing.T) {
	t.Parallel()
	var (
		mu            sync.Mutex
		inFlight, top int
	)
	e := newEndpoint(t, func(w http.ResponseWriter, _ request, _ int) int {
		mu.Lock()
		inFlight++
		top = max(top, inFlight)
		mu.Unlock()
		time.Sleep(20 * time.Millisecond) // keep requests overlapping
		mu.Lock()
		inFlight--
		mu.Unlock()
		return http.StatusOK
	})
	p := newPublisher(t, outboxhttp.Config{URL: e.URL, Concurrency: 3})
	if err := errors.Join(p.Publish(context.Background(), publishertest.Messages("t", 12))...); err != nil {
		t.Fatal(err)
	}
	if top < 2 || top > 3 {
		t.Fatalf("at most %d requests were in flight at once, want 2..3 with Concurrency 3", top)
	}
}

func TestSlowEndpointTimesOutRetryably(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	e := newEndpoint(t, func(w http.ResponseWriter, _ request, _ int) int {
		<-release
		return http.StatusOK
	})
	defer close(release)
	p := newPublisher(t, outboxhttp.Config{URL: e.URL, Timeout: 100 * time.Millisecond})
	start := time.Now()
	err := p.Publish(context.Background(), publishertest.Messages("t", 1))[0]
	if err == nil || outbox.IsPermanent(err) || !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "Config.Timeout") {
		t.Fatalf("slow endpoint: %v, want a retryable timeout naming Config.Timeout", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("a 100ms timeout took %v", d)
	}
}

// A refused connection proves the endpoint never got the request: the
// error is marked unavailable, so the relay counts no attempt. A timeout
// proves nothing (the endpoint may have acted) and is not.
func TestRefusedConnectionIsUnavailableATimeoutIsNot(t *testing.T) {
	t.Parallel()
	p := newPublisher(t, outboxhttp.Config{URL: closedURL(t)})
	err := p.Publish(context.Background(), publishertest.Messages("t", 1))[0]
	if !outbox.IsUnavailable(err) || outbox.IsPermanent(err) {
		t.Errorf("refused connection: %v; want an error marked outbox.Unavailable", err)
	}

	release := make(chan struct{})
	e := newEndpoint(t, func(w http.ResponseWriter, _ request, _ int) int {
		<-release
		return http.StatusOK
	})
	defer close(release)
	p = newPublisher(t, outboxhttp.Config{URL: e.URL, Timeout: 100 * time.Millisecond})
	if err := p.Publish(context.Background(), publishertest.Messages("t", 1))[0]; err == nil || outbox.IsUnavailable(err) {
		t.Errorf("timeout: %v; want an ordinary failure, not unavailable", err)
	}
}

func TestErrorsNameTheURLWithoutCredentialsOrQuery(t *testing.T) {
	t.Parallel()
	e := newEndpoint(t, func(http.ResponseWriter, request, int) int { return http.StatusInternalServerError })
	closed := closedURL(t)
	for _, raw := range []string{
		strings.Replace(e.URL, "http://", "http://user:pa55word@", 1) + "/hook?token=s3cret#frag",
		strings.Replace(closed, "http://", "http://user:pa55word@", 1) + "?token=s3cret",
	} {
		p := newPublisher(t, outboxhttp.Config{URL: raw})
		err := p.Publish(context.Background(), publishertest.Messages("t", 1))[0]
		if err == nil {
			t.Fatalf("%s: no error", raw)
		}
		msg := err.Error()
		if strings.Contains(msg, "pa55word") || strings.Contains(msg, "s3cret") || strings.Contains(msg, "user") {
			t.Errorf("error %q shows credentials or the query", msg)
		}
		if !strings.Contains(msg, "POST http://127.0.0.1:") {
			t.Errorf("error %q does not name the endpoint", msg)
		}
	}
	if got := e.all(); len(got) != 1 || got[0].header.Get("Authorization") == "" {
		t.Errorf("user information of the URL was not sent as basic authentication")
	}
}

func TestCloseStopsPublishingRetryably(t *testing.T) {
	t.Parallel()
	e := newEndpoint(t, nil)
	p := newPublisher(t, outboxhttp.Config{URL: e.URL})
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	err := p.Publish(context.Background(), publishertest.Messages("t", 1))[0]
	if !errors.Is(err, outboxhttp.ErrClosed) || outbox.IsPermanent(err) {
		t.Fatalf("Publish after Close: %v, want retryable ErrClosed", err)
	}
	if n := len(e.all()); n != 0 {
		t.Fatalf("a closed publisher sent %d requests", n)
	}
}

func TestHeaderValueWithAControlCharacterFailsPermanently(t *testing.T) {
	t.Parallel()
	e := newEndpoint(t, nil)
	p := newPublisher(t, outboxhttp.Config{URL: e.URL})
	m := publishertest.Messages("t", 1)[0]
	m.Headers["x-note"] = "two\nlines"
	err := p.Publish(context.Background(), []outbox.Message{m})[0]
	if !outbox.IsPermanent(err) || !strings.Contains(err.Error(), "x-note") {
		t.Fatalf("header with a line break: %v, want a permanent error naming the header", err)
	}
}

func TestNewRejectsInvalidConfigNamingTheField(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		cfg   outboxhttp.Config
		field string
	}{
		{outboxhttp.Config{URL: "https://example.com"}, "Secret"},
		{outboxhttp.Config{Secret: secret}, "URL"},
		{outboxhttp.Config{Secret: secret, URL: "ftp://example.com/x"}, "URL"},
		{outboxhttp.Config{Secret: secret, URL: "/relative"}, "URL"},
		{outboxhttp.Config{Secret: secret, URLs: map[string]string{"orders": "https://user:pa55word@%zz"}}, `URLs["orders"]`},
		{outboxhttp.Config{Secret: secret, URL: "https://example.com", Concurrency: -1}, "Concurrency"},
		{outboxhttp.Config{Secret: secret, URL: "https://example.com", Timeout: -time.Second}, "Timeout"},
		{outboxhttp.Config{Secret: secret, URL: "https://example.com", MaxRetryAfter: -time.Second}, "MaxRetryAfter"},
	} {
		_, err := outboxhttp.New(tc.cfg)
		var ce *outbox.ConfigError
		if !errors.As(err, &ce) || !strings.Contains(ce.Field, tc.field) {
			t.Errorf("New(%+v) = %v, want a *outbox.ConfigError for %s", tc.cfg, err, tc.field)
			continue
		}
		if strings.Contains(err.Error(), "pa55word") {
			t.Errorf("New error %q shows a password", err)
		}
	}
}

func TestSequentialHoldsBackAnUnavailableKeyWithoutCountingAttempts(t *testing.T) {
	t.Parallel()
	p := newPublisher(t, outboxhttp.Config{URL: closedURL(t), Sequential: true})
	batch := []outbox.Message{{ID: uuid.Must(uuid.NewV7()), Topic: "t", Key: "a"}, {ID: uuid.Must(uuid.NewV7()), Topic: "t", Key: "a"}}
	for i, err := range p.Publish(context.Background(), batch) {
		if !outbox.IsUnavailable(err) || outbox.IsPermanent(err) {
			t.Errorf("message %d of a key whose endpoint refuses connections: %v; want unavailable", i, err)
		}
	}
}

// TestRequestResentAfterAReusedConnectionFailedIsNotUnavailable has the
// endpoint read a request on a kept-alive connection and die before it
// answers. net/http sends the request again on a new connection (it carries
// an Idempotency-Key, so it counts as safe to repeat), and that dial is
// refused: the error is a dial error, but the endpoint may have acted on the
// request, so it must not be marked unavailable.
func TestRequestResentAfterAReusedConnectionFailedIsNotUnavailable(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	arrived := make(chan string, 2)
	served := make(chan error, 1)
	go func() {
		served <- func() error {
			conn, err := l.Accept()
			if err != nil {
				return err
			}
			defer conn.Close()
			r := bufio.NewReader(conn)
			for n := range 2 {
				req, err := http.ReadRequest(r)
				if err != nil {
					return err
				}
				if _, err := io.Copy(io.Discard, req.Body); err != nil {
					return err
				}
				arrived <- req.Header.Get(outboxhttp.HeaderID)
				if n == 0 {
					if _, err := io.WriteString(conn, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"); err != nil {
						return err
					}
				}
			}
			return l.Close() // before the connection: the second try is refused
		}()
	}()
	p := newPublisher(t, outboxhttp.Config{URL: "http://" + l.Addr().String() + "/hook"})
	batch := publishertest.Messages("t", 2)
	if err := p.Publish(context.Background(), batch[:1])[0]; err != nil {
		t.Fatalf("first message: %v", err)
	}
	err = p.Publish(context.Background(), batch[1:])[0]
	if err := <-served; err != nil {
		t.Fatalf("endpoint: %v", err)
	}
	if first, second := <-arrived, <-arrived; first != batch[0].ID.String() || second != batch[1].ID.String() {
		t.Fatalf("endpoint got %s then %s; want %s then %s", first, second, batch[0].ID, batch[1].ID)
	}
	if err == nil || outbox.IsUnavailable(err) {
		t.Errorf("a message the endpoint read before it died: %v; want an ordinary failure, not unavailable", err)
	}
}
