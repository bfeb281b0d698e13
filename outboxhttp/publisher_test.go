package outboxhttp_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/webhooktest"
	"github.com/go-outbox/outbox/outboxhttp"
	"github.com/go-outbox/outbox/publishertest"
)

func TestConformance(t *testing.T) {
	t.Parallel()
	publishertest.Run(t, webhooktest.Harness)
}

func TestRequestCarriesTheMessageHeadersAndTheOutboxOnes(t *testing.T) {
	t.Parallel()
	e := webhooktest.NewEndpoint(t, nil)
	p := webhooktest.NewPublisher(t, outboxhttp.Config{URL: e.URL + "/hook?tenant=a"})
	with := outbox.Message{ID: uuid.Must(uuid.NewV7()), Topic: "orders.created", Key: "order-1", Payload: []byte(`{}`), Headers: map[string]string{
		"content-type":    "application/json",
		"traceparent":     "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
		"Idempotency-Key": "forged",
		"Content-Length":  "1",
	}}
	without := outbox.Message{ID: uuid.Must(uuid.NewV7()), Topic: "orders.created", Payload: []byte{0, 1}}
	if err := errors.Join(p.Publish(context.Background(), []outbox.Message{with, without})...); err != nil {
		t.Fatal(err)
	}
	byID := map[string]webhooktest.Request{}
	for _, r := range e.All() {
		byID[r.Header.Get(outboxhttp.HeaderID)] = r
		if r.Path != "/hook" || r.Query != "tenant=a" {
			t.Errorf("request went to %s?%s, want /hook?tenant=a", r.Path, r.Query)
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
		if got := r.Header.Get(name); got != want {
			t.Errorf("message %s: header %s = %q, want %q", with.ID, name, got, want)
		}
	}
	r = byID[without.ID.String()]
	if got := r.Header.Get("Content-Type"); got != outboxhttp.ContentTypeDefault {
		t.Errorf("message %s without content-type sent as %q, want %q", without.ID, got, outboxhttp.ContentTypeDefault)
	}
	if _, ok := r.Header[outboxhttp.HeaderKey]; ok {
		t.Errorf("message %s with an empty key carries %s", without.ID, outboxhttp.HeaderKey)
	}
}

func TestTopicsGoToTheirURLsAndATopicWithoutOneFailsPermanently(t *testing.T) {
	t.Parallel()
	orders, fallback := webhooktest.NewEndpoint(t, nil), webhooktest.NewEndpoint(t, nil)
	routed := webhooktest.NewPublisher(t, outboxhttp.Config{URLs: map[string]string{"orders": orders.URL}})
	both := webhooktest.NewPublisher(t, outboxhttp.Config{URL: fallback.URL, URLs: map[string]string{"orders": orders.URL}})
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
	if n, m := len(orders.All()), len(fallback.All()); n != 1 || m != 1 {
		t.Fatalf("orders endpoint got %d requests, default endpoint %d; want 1 each", n, m)
	}
}

// A status that blames the endpoint's configuration (a wrong secret or URL)
// is retried and counts an attempt, so fixing the configuration within the
// backoff loses nothing; one that blames the message dead-letters it; one
// that blames the endpoint's state is retried.
func TestStatusesAreClassifiedByWhatTheyBlame(t *testing.T) {
	t.Parallel()
	const (
		permanent = "permanent"
		retried   = "retried, counting an attempt"
	)
	for status, want := range map[int]string{
		http.StatusBadRequest: permanent, http.StatusRequestEntityTooLarge: permanent, http.StatusUnprocessableEntity: permanent,
		http.StatusMovedPermanently: permanent, http.StatusFound: permanent, http.StatusPermanentRedirect: permanent,
		http.StatusUnauthorized: retried, http.StatusForbidden: retried, http.StatusNotFound: retried,
		http.StatusMethodNotAllowed: retried, http.StatusProxyAuthRequired: retried, http.StatusGone: retried,
		http.StatusRequestTimeout: retried, http.StatusTooManyRequests: retried, http.StatusInternalServerError: retried,
		http.StatusBadGateway: retried, http.StatusServiceUnavailable: retried, http.StatusGatewayTimeout: retried,
	} {
		e := webhooktest.NewEndpoint(t, func(w http.ResponseWriter, _ webhooktest.Request, _ int) int {
			if status >= 300 && status < 400 {
				w.Header().Set("Location", "/elsewhere?token=s3cret")
			}
			return status
		})
		p := webhooktest.NewPublisher(t, outboxhttp.Config{URL: e.URL, Logger: slog.New(slog.DiscardHandler)})
		m := publishertest.Messages("t", 1)[0]
		err := p.Publish(context.Background(), []outbox.Message{m})[0]
		got := retried
		if outbox.IsPermanent(err) {
			got = permanent
		}
		var pe *outboxhttp.PublishError
		switch {
		case err == nil || !errors.As(err, &pe):
			t.Errorf("status %d: %v, want a *PublishError", status, err)
		case pe.StatusCode != status || pe.ID != m.ID:
			t.Errorf("status %d: error %+v has the wrong status or id", status, pe)
		case got != want || outbox.IsUnavailable(err):
			t.Errorf("status %d: %v is %s (unavailable %v), want %s", status, err, got, outbox.IsUnavailable(err), want)
		case strings.Contains(err.Error(), "s3cret"):
			t.Errorf("status %d: %v shows the redirect's query", status, err)
		}
		if n := len(e.All()); n != 1 {
			t.Errorf("status %d: endpoint got %d requests, want 1 (redirects are not followed)", status, n)
		}
	}
}

// A wrong secret or URL fails every message the same way: the operator
// hears of it once per batch, at error level, with the status, the URL
// without credentials and what to check, and every message's error says it
// too (the relay stores it as the message's last error).
func TestConfigurationErrorIsLoggedOncePerBatchWithTheFix(t *testing.T) {
	t.Parallel()
	for _, status := range []int{http.StatusUnauthorized, http.StatusNotFound, http.StatusProxyAuthRequired} {
		e := webhooktest.NewEndpoint(t, func(http.ResponseWriter, webhooktest.Request, int) int { return status })
		var logs bytes.Buffer
		p := webhooktest.NewPublisher(t, outboxhttp.Config{
			URL:    strings.Replace(e.URL, "http://", "http://user:pa55word@", 1) + "/hook?token=s3cret",
			Logger: slog.New(slog.NewTextHandler(&logs, nil)),
		})
		batch := publishertest.Messages("t", 3)
		for i, err := range p.Publish(context.Background(), batch) {
			if err == nil || !strings.Contains(err.Error(), "check the webhook URL and secret") {
				t.Errorf("status %d, message %s: %v; want an error saying what to check", status, batch[i].ID, err)
			}
		}
		lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
		want := []string{"level=ERROR", "check the webhook URL and secret", "status=" + strconv.Itoa(status), "url=" + e.URL + "/hook", "messages=3"}
		if len(lines) != 1 {
			t.Errorf("status %d: %d log lines, want 1 for the batch: %q", status, len(lines), lines)
		}
		for _, w := range want {
			if !strings.Contains(lines[0], w) {
				t.Errorf("status %d: log %q does not say %q", status, lines[0], w)
			}
		}
		if strings.Contains(logs.String(), "pa55word") || strings.Contains(logs.String(), "s3cret") || strings.Contains(logs.String(), "user") {
			t.Errorf("status %d: log %q shows credentials or the query", status, logs.String())
		}
	}
	e := webhooktest.NewEndpoint(t, func(http.ResponseWriter, webhooktest.Request, int) int { return http.StatusBadRequest })
	var logs bytes.Buffer
	p := webhooktest.NewPublisher(t, outboxhttp.Config{URL: e.URL, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	p.Publish(context.Background(), publishertest.Messages("t", 2))
	if logs.Len() != 0 {
		t.Errorf("a message the endpoint rejects (400) is logged by the publisher: %q", logs.String())
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
		e := webhooktest.NewEndpoint(t, func(w http.ResponseWriter, _ webhooktest.Request, _ int) int {
			w.Header().Set("Retry-After", tc.header)
			return tc.status
		})
		p := webhooktest.NewPublisher(t, outboxhttp.Config{URL: e.URL, Sequential: true, MaxRetryAfter: 5 * time.Minute})
		batch := publishertest.Messages("t", 3)
		errs := p.Publish(context.Background(), batch)
		for i, err := range errs {
			d, ok := outbox.RetryAfterOf(err)
			if !ok || d < tc.min-time.Second || d > tc.max || outbox.IsPermanent(err) {
				t.Errorf("Retry-After %q, message %d: %v asks for %v (%v), want retryable after %v..%v", tc.header, i, err, d, ok, tc.min, tc.max)
			}
		}
		if n := len(e.All()); n != 1 {
			t.Errorf("Retry-After %q: endpoint got %d requests, want 1: the rest of the batch waits", tc.header, n)
		}
	}
}

func TestSequentialHoldsBackTheLaterMessagesOfAFailedKey(t *testing.T) {
	t.Parallel()
	failing := uuid.Must(uuid.NewV7())
	e := webhooktest.NewEndpoint(t, func(w http.ResponseWriter, r webhooktest.Request, _ int) int {
		if r.Header.Get(outboxhttp.HeaderID) == failing.String() {
			return http.StatusBadGateway
		}
		return http.StatusOK
	})
	p := webhooktest.NewPublisher(t, outboxhttp.Config{URL: e.URL, Sequential: true})
	batch := []outbox.Message{
		{ID: failing, Topic: "t", Key: "a"},
		{ID: uuid.Must(uuid.NewV7()), Topic: "t", Key: "b"},
		{ID: uuid.Must(uuid.NewV7()), Topic: "t", Key: "a"},
	}
	errs := p.Publish(context.Background(), batch)
	if errs[0] == nil || errs[1] != nil || errs[2] == nil || outbox.IsPermanent(errs[2]) {
		t.Fatalf("outcomes %v; want key a's first message failed, b delivered, a's second held back retryably", errs)
	}
	got := e.All()
	if len(got) != 2 || got[0].Header.Get(outboxhttp.HeaderID) != failing.String() || got[1].Header.Get(outboxhttp.HeaderKey) != "b" {
		t.Fatalf("endpoint got %d requests; want the failing one, then key b's, in order", len(got))
	}
}

func TestConcurrencyBoundsTheRequestsInFlight(t *testing.T) {
	t.Parallel()
	var (
		mu            sync.Mutex
		inFlight, top int
	)
	e := webhooktest.NewEndpoint(t, func(w http.ResponseWriter, _ webhooktest.Request, _ int) int {
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
	p := webhooktest.NewPublisher(t, outboxhttp.Config{URL: e.URL, Concurrency: 3})
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
	e := webhooktest.NewEndpoint(t, func(w http.ResponseWriter, _ webhooktest.Request, _ int) int {
		<-release
		return http.StatusOK
	})
	defer close(release)
	p := webhooktest.NewPublisher(t, outboxhttp.Config{URL: e.URL, Timeout: 100 * time.Millisecond})
	start := time.Now()
	err := p.Publish(context.Background(), publishertest.Messages("t", 1))[0]
	if err == nil || outbox.IsPermanent(err) || !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "Config.Timeout") {
		t.Fatalf("slow endpoint: %v, want a retryable timeout naming Config.Timeout", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("a 100ms timeout took %v", d)
	}
}

// A refused connection proves the Endpoint never got the request: the
// error is marked unavailable, so the relay counts no attempt. A timeout
// proves nothing (the Endpoint may have acted) and is not.
func TestRefusedConnectionIsUnavailableATimeoutIsNot(t *testing.T) {
	t.Parallel()
	p := webhooktest.NewPublisher(t, outboxhttp.Config{URL: webhooktest.ClosedURL(t)})
	err := p.Publish(context.Background(), publishertest.Messages("t", 1))[0]
	if !outbox.IsUnavailable(err) || outbox.IsPermanent(err) {
		t.Errorf("refused connection: %v; want an error marked outbox.Unavailable", err)
	}

	release := make(chan struct{})
	e := webhooktest.NewEndpoint(t, func(w http.ResponseWriter, _ webhooktest.Request, _ int) int {
		<-release
		return http.StatusOK
	})
	defer close(release)
	p = webhooktest.NewPublisher(t, outboxhttp.Config{URL: e.URL, Timeout: 100 * time.Millisecond})
	if err := p.Publish(context.Background(), publishertest.Messages("t", 1))[0]; err == nil || outbox.IsUnavailable(err) {
		t.Errorf("timeout: %v; want an ordinary failure, not unavailable", err)
	}
}

func TestErrorsNameTheURLWithoutCredentialsOrQuery(t *testing.T) {
	t.Parallel()
	e := webhooktest.NewEndpoint(t, func(http.ResponseWriter, webhooktest.Request, int) int { return http.StatusInternalServerError })
	closed := webhooktest.ClosedURL(t)
	for _, raw := range []string{
		strings.Replace(e.URL, "http://", "http://user:pa55word@", 1) + "/hook?token=s3cret#frag",
		strings.Replace(closed, "http://", "http://user:pa55word@", 1) + "?token=s3cret",
	} {
		p := webhooktest.NewPublisher(t, outboxhttp.Config{URL: raw})
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
	if got := e.All(); len(got) != 1 || got[0].Header.Get("Authorization") == "" {
		t.Errorf("user information of the URL was not sent as basic authentication")
	}
}

func TestCloseStopsPublishingRetryably(t *testing.T) {
	t.Parallel()
	e := webhooktest.NewEndpoint(t, nil)
	p := webhooktest.NewPublisher(t, outboxhttp.Config{URL: e.URL})
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	err := p.Publish(context.Background(), publishertest.Messages("t", 1))[0]
	if !errors.Is(err, outboxhttp.ErrClosed) || outbox.IsPermanent(err) {
		t.Fatalf("Publish after Close: %v, want retryable ErrClosed", err)
	}
	if n := len(e.All()); n != 0 {
		t.Fatalf("a closed publisher sent %d requests", n)
	}
}

func TestHeaderValueWithAControlCharacterFailsPermanently(t *testing.T) {
	t.Parallel()
	e := webhooktest.NewEndpoint(t, nil)
	p := webhooktest.NewPublisher(t, outboxhttp.Config{URL: e.URL})
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
		{outboxhttp.Config{Secret: webhooktest.Secret}, "URL"},
		{outboxhttp.Config{Secret: webhooktest.Secret, URL: "ftp://example.com/x"}, "URL"},
		{outboxhttp.Config{Secret: webhooktest.Secret, URL: "/relative"}, "URL"},
		{outboxhttp.Config{Secret: webhooktest.Secret, URLs: map[string]string{"orders": "https://user:pa55word@%zz"}}, `URLs["orders"]`},
		{outboxhttp.Config{Secret: webhooktest.Secret, URL: "https://example.com", Concurrency: -1}, "Concurrency"},
		{outboxhttp.Config{Secret: webhooktest.Secret, URL: "https://example.com", Timeout: -time.Second}, "Timeout"},
		{outboxhttp.Config{Secret: webhooktest.Secret, URL: "https://example.com", MaxRetryAfter: -time.Second}, "MaxRetryAfter"},
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

func TestNewRejectsASecretShorterThan16BytesNamingItsLengthAndTheFix(t *testing.T) {
	t.Parallel()
	_, err := outboxhttp.New(outboxhttp.Config{URL: "https://example.com/hook", Secret: []byte("fifteen bytes!!")})
	var ce *outbox.ConfigError
	if !errors.As(err, &ce) || !strings.Contains(ce.Field, "Secret") || !strings.Contains(err.Error(), "15 bytes") || !strings.Contains(err.Error(), "whsec_") {
		t.Fatalf("New with a 15-byte secret: %v; want a *outbox.ConfigError naming Secret, its 15 bytes and the whsec_ fix", err)
	}
	if strings.Contains(err.Error(), "fifteen") {
		t.Errorf("error %q shows the secret", err)
	}
	if _, err := outboxhttp.New(outboxhttp.Config{URL: "https://example.com/hook", Secret: []byte("sixteen bytes!!!")}); err != nil {
		t.Fatalf("New with a 16-byte secret: %v", err)
	}
}

// Some headers would let a message forge the signature, speak for the
// publisher's credentials or point the request elsewhere: a message that
// carries one fails permanently, alone, with the header named; the rest of
// the batch goes out.
func TestMessageHeadersCannotSetTheSignatureCredentialsOrHost(t *testing.T) {
	t.Parallel()
	e := webhooktest.NewEndpoint(t, nil)
	p := webhooktest.NewPublisher(t, outboxhttp.Config{URL: e.URL})
	forbidden := []string{"webhook-id", "Webhook-Timestamp", "WEBHOOK-SIGNATURE", "authorization", "Cookie", "proxy-authorization", "Host"}
	var batch []outbox.Message
	for _, name := range forbidden {
		batch = append(batch, outbox.Message{ID: uuid.Must(uuid.NewV7()), Topic: "t", Payload: []byte("{}"), Headers: map[string]string{name: "forged", "x-ok": "1"}})
	}
	fine := outbox.Message{ID: uuid.Must(uuid.NewV7()), Topic: "t", Payload: []byte("{}"), Headers: map[string]string{"x-ok": "1"}}
	batch = append(batch, fine)
	errs := p.Publish(context.Background(), batch)
	for i, name := range forbidden {
		var pe *outboxhttp.PublishError
		if err := errs[i]; !outbox.IsPermanent(err) || !errors.As(err, &pe) || pe.ID != batch[i].ID || !strings.Contains(err.Error(), strconv.Quote(name)) {
			t.Errorf("message %s with header %q: %v; want a permanent *PublishError naming the header", batch[i].ID, name, err)
		}
	}
	if err := errs[len(forbidden)]; err != nil {
		t.Errorf("message %s without such headers: %v", fine.ID, err)
	}
	got := e.All()
	if len(got) != 1 || got[0].Header.Get(outboxhttp.HeaderID) != fine.ID.String() {
		t.Fatalf("endpoint got %d requests; want only message %s", len(got), fine.ID)
	}
	for _, name := range []string{"Authorization", "Cookie", "Proxy-Authorization"} {
		if v := got[0].Header.Get(name); v != "" {
			t.Errorf("request carries %s %q", name, v)
		}
	}
}

func TestSequentialHoldsBackAnUnavailableKeyWithoutCountingAttempts(t *testing.T) {
	t.Parallel()
	p := webhooktest.NewPublisher(t, outboxhttp.Config{URL: webhooktest.ClosedURL(t), Sequential: true})
	batch := []outbox.Message{{ID: uuid.Must(uuid.NewV7()), Topic: "t", Key: "a"}, {ID: uuid.Must(uuid.NewV7()), Topic: "t", Key: "a"}}
	for i, err := range p.Publish(context.Background(), batch) {
		if !outbox.IsUnavailable(err) || outbox.IsPermanent(err) {
			t.Errorf("message %d of a key whose endpoint refuses connections: %v; want unavailable", i, err)
		}
	}
}

// TestRequestResentAfterAReusedConnectionFailedIsNotUnavailable has the
// Endpoint read a request on a kept-alive connection and die before it
// answers. net/http sends the request again on a new connection (it carries
// an Idempotency-Key, so it counts as safe to repeat), and that dial is
// refused: the error is a dial error, but the Endpoint may have acted on the
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
	p := webhooktest.NewPublisher(t, outboxhttp.Config{URL: "http://" + l.Addr().String() + "/hook"})
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
