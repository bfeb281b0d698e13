// Package webhooktest is a webhook receiver for tests of the outboxhttp
// publisher: an httptest server that records every request and answers with
// the status a test picks, and the publishertest harness built on it. It is
// shared by outboxhttp's tests and the PostgreSQL end-to-end tests in outboxpg
// (another module, so that the root module needs no PostgreSQL driver).
package webhooktest

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/outboxhttp"
	"github.com/go-outbox/outbox/publishertest"
)

// Secret signs every request of publishers made by NewPublisher: 32 bytes,
// "whsec_dGVzdC1zZWNyZXQtMDEyMzQ1Njc4OWFiY2RlZjAxMjM=" as Standard Webhooks
// libraries write it.
var Secret = []byte("test-secret-0123456789abcdef0123")

// Request is one request an Endpoint received.
type Request struct {
	At     time.Time
	Path   string
	Query  string
	Header http.Header
	Body   []byte
	// SignatureErr is what outboxhttp.Verify said of the request's
	// Standard Webhooks signature with Secret: nil when it is valid.
	SignatureErr error
}

// Endpoint is a webhook receiver that records every Request and answers with
// the status its respond function picks (200 when nil).
type Endpoint struct {
	*httptest.Server
	mu       sync.Mutex
	requests []Request
	Arrived  chan struct{} // gets a value per Request, never blocks the handler
	respond  func(w http.ResponseWriter, r Request, n int) int
}

// NewEndpoint starts an Endpoint that answers with the status respond picks
// (200 when respond is nil; n counts earlier requests for the same message),
// and closes it when the test ends.
func NewEndpoint(t *testing.T, respond func(w http.ResponseWriter, r Request, n int) int) *Endpoint {
	t.Helper()
	e := &Endpoint{Arrived: make(chan struct{}, 100_000), respond: respond}
	e.Server = httptest.NewServer(http.HandlerFunc(e.serve))
	t.Cleanup(e.Close)
	return e
}

func (e *Endpoint) serve(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	req := Request{At: time.Now(), Path: r.URL.Path, Query: r.URL.RawQuery, Header: r.Header.Clone(), Body: body}
	req.SignatureErr = outboxhttp.Verify(Secret, req.Header, body, 0)
	e.mu.Lock()
	n := 0 // earlier requests for the same message
	for _, old := range e.requests {
		if old.Header.Get(outboxhttp.HeaderID) == req.Header.Get(outboxhttp.HeaderID) {
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
	e.Arrived <- struct{}{}
}

// bufferedBody holds what a respond function writes until the status is
// sent.
type bufferedBody struct {
	http.ResponseWriter
	buf bytes.Buffer
}

func (b *bufferedBody) Write(p []byte) (int, error) { return b.buf.Write(p) }

// All returns the requests received so far, in arrival order.
func (e *Endpoint) All() []Request {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]Request(nil), e.requests...)
}

// NewPublisher returns a webhook publisher for cfg, signing with Secret
// unless cfg.Secret is set, and closes it when the test ends.
func NewPublisher(t *testing.T, cfg outboxhttp.Config) *outboxhttp.Publisher {
	t.Helper()
	if cfg.Secret == nil {
		cfg.Secret = Secret
	}
	p, err := outboxhttp.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// ClosedURL returns a URL on the loopback where nothing listens.
func ClosedURL(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return "http://" + addr + "/hook"
}

// Harness serves one publishertest run: an Endpoint that accepts every
// message except those of the topic "rejected", which it answers with 400,
// and those without a valid signature, which it answers with 401 (and the
// suite, waiting for them, fails).
func Harness(t *testing.T) publishertest.Harness {
	e := NewEndpoint(t, func(w http.ResponseWriter, r Request, _ int) int {
		if r.Header.Get(outboxhttp.HeaderTopic) == "rejected" {
			return http.StatusBadRequest
		}
		if r.SignatureErr != nil {
			return http.StatusUnauthorized
		}
		return http.StatusOK
	})
	cfg := outboxhttp.Config{URL: e.URL + "/hook"}
	delivered := 0 // accepted requests already returned by Receive
	return publishertest.Harness{
		Publisher: NewPublisher(t, cfg),
		Topic:     "orders.created",
		Receive: func(ctx context.Context, n int) ([]publishertest.Received, error) {
			var out []publishertest.Received
			for len(out) < n {
				var accepted []Request
				for _, r := range e.All() {
					if r.Header.Get(outboxhttp.HeaderTopic) != "rejected" && r.SignatureErr == nil {
						accepted = append(accepted, r)
					}
				}
				for ; delivered < len(accepted) && len(out) < n; delivered++ {
					out = append(out, ToReceived(accepted[delivered]))
				}
				if len(out) == n {
					break
				}
				select {
				case <-e.Arrived:
				case <-ctx.Done():
					return out, ctx.Err()
				}
			}
			return out, nil
		},
		Unreachable: func(t *testing.T) outbox.Publisher {
			return NewPublisher(t, outboxhttp.Config{URL: ClosedURL(t)})
		},
		Invalid: func() outbox.Message {
			return publishertest.Messages("rejected", 1)[0]
		},
	}
}

// ToReceived turns a request into what the publishertest suite compares.
func ToReceived(r Request) publishertest.Received {
	headers := map[string]string{}
	for name := range r.Header {
		// HTTP canonicalises names; outbox headers are case-sensitive
		// strings, and the suite's are lower case.
		headers[strings.ToLower(name)] = r.Header.Get(name)
	}
	return publishertest.Received{
		ID:      r.Header.Get(outboxhttp.HeaderID),
		Topic:   r.Header.Get(outboxhttp.HeaderTopic),
		Key:     r.Header.Get(outboxhttp.HeaderKey),
		Payload: r.Body,
		Headers: headers,
	}
}
