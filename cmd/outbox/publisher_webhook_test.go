package main

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/pgtest"
	"github.com/go-outbox/outbox/outboxhttp"
)

// webhookRequest is what a test endpoint received.
type webhookRequest struct {
	uri    string
	id     string
	header http.Header
	body   []byte
}

// webhookEndpoint records requests and answers 204 after delay.
func webhookEndpoint(t *testing.T, delay time.Duration) (*httptest.Server, func() []webhookRequest) {
	t.Helper()
	var (
		mu  sync.Mutex
		got []webhookRequest
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		select {
		case <-time.After(delay):
		case <-r.Context().Done():
			return
		}
		mu.Lock()
		got = append(got, webhookRequest{uri: r.RequestURI, id: r.Header.Get(outboxhttp.HeaderID), header: r.Header.Clone(), body: body})
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	return srv, func() []webhookRequest {
		mu.Lock()
		defer mu.Unlock()
		return append([]webhookRequest(nil), got...)
	}
}

func TestWebhookURLKeepsItsQueryAndTakesOutboxParameters(t *testing.T) {
	t.Parallel()
	const secret = "webhook-test-secret"
	srv, received := webhookEndpoint(t, 0)
	p, err := webhookPublisher(srv.URL+"/hook?tenant=a&outbox_timeout=2s&outbox_concurrency=2&outbox_sequential=true&b=x%20y", secret)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	msg := outbox.Message{ID: uuid.Must(uuid.NewV7()), Topic: "orders.created", Payload: []byte(`{"id":1}`)}
	if err := p.Publish(context.Background(), []outbox.Message{msg})[0]; err != nil {
		t.Fatal(err)
	}
	got := received()
	if len(got) != 1 || got[0].uri != "/hook?tenant=a&b=x%20y" {
		t.Fatalf("endpoint received %+v, want one request to /hook?tenant=a&b=x%%20y", got)
	}
	if err := outboxhttp.Verify([]byte(secret), got[0].header, got[0].body, 0); err != nil {
		t.Fatalf("request not signed with the secret: %v", err)
	}
}

func TestWebhookTimeoutParameterBoundsEachRequest(t *testing.T) {
	t.Parallel()
	srv, _ := webhookEndpoint(t, 10*time.Second)
	p, err := webhookPublisher(srv.URL+"/hook?outbox_timeout=150ms", "sixteen bytes!!!")
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	start := time.Now()
	err = p.Publish(context.Background(), []outbox.Message{{ID: uuid.Must(uuid.NewV7()), Topic: "t"}})[0]
	if !errors.Is(err, context.DeadlineExceeded) || outbox.IsPermanent(err) || !strings.Contains(err.Error(), "150ms") {
		t.Fatalf("slow endpoint: %v, want a retryable timeout after 150ms", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("timed out after %v, want about 150ms", d)
	}
}

func TestWebhookURLErrorsSayWhatToDoAndHideSecrets(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		raw, secret, want string
	}{
		{"https://user:pa55word@example.com/hook?token=s3cret", "", envWebhookSecret},
		{"https://user:pa55word@example.com/hook?token=s3cret", "short", "whsec_"},
		{"https://example.com/hook?token=s3cret&outbox_timeout=soon", "sixteen bytes!!!", "positive duration"},
		{"https://example.com/hook?token=s3cret&outbox_timeout=-1s", "sixteen bytes!!!", "positive duration"},
		{"https://example.com/hook?token=s3cret&outbox_concurrency=0", "sixteen bytes!!!", "positive number"},
		{"https://example.com/hook?token=s3cret&outbox_sequential=maybe", "sixteen bytes!!!", "true or false"},
		{"https://example.com/hook?token=s3cret&outbox_timout=5s", "sixteen bytes!!!", "unknown parameter"},
		{"https://user:pa55word@/hook?token=s3cret", "sixteen bytes!!!", "name the host"},
		{"https://user:pa55word@example.com:port/hook?token=s3cret", "sixteen bytes!!!", "cannot be parsed"},
	} {
		_, err := webhookPublisher(tc.raw, tc.secret)
		var ue usageError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want a usage error saying %q", tc.raw, err, tc.want)
			continue
		}
		if msg := err.Error(); strings.Contains(msg, "s3cret") || strings.Contains(msg, "pa55word") {
			t.Errorf("%s: error %q shows a secret", tc.raw, msg)
		}
	}
}

// The relay command publishes to a webhook with the secret from the
// environment. Not parallel: it sets an environment variable.
func TestRelayPublishesToAWebhookSignedWithTheSecretFromTheEnvironment(t *testing.T) {
	const secret = "env-secret-for-the-webhook-test"
	t.Setenv(envWebhookSecret, secret)
	url, schema := pgtest.URL(t), pgtest.Schema(t)
	db := []string{"--database-url", url, "--schema", schema}
	with := func(args ...string) []string { return append(append([]string{}, args...), db...) }
	mustCLI(t, with("migrate", "up")...)
	id := strings.TrimSpace(mustCLI(t, with("send", "--topic", "orders.created", "--payload", `{"id":7}`)...))

	srv, received := webhookEndpoint(t, 0)
	ctx, stopRelay := context.WithTimeout(context.Background(), time.Minute)
	defer stopRelay()
	var stderr bytes.Buffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, with("relay", "--publisher", srv.URL+"/hook?token=s3cret&outbox_timeout=5s", "--poll-interval", "100ms", "--log-level", "debug"), &bytes.Buffer{}, &stderr)
	}()
	deadline := time.Now().Add(30 * time.Second)
	for len(received()) == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	stopRelay()
	if code := <-done; code != 0 {
		t.Errorf("relay exited with %d: %s", code, stderr.String())
	}
	got := received()
	if len(got) != 1 || got[0].id != id || got[0].uri != "/hook?token=s3cret" {
		t.Fatalf("endpoint received %+v, want message %s at /hook?token=s3cret", got, id)
	}
	if err := outboxhttp.Verify([]byte(secret), got[0].header, got[0].body, 0); err != nil {
		t.Fatalf("message %s: %v", id, err)
	}
	if logs := stderr.String(); strings.Contains(logs, secret) || strings.Contains(logs, "s3cret") {
		t.Fatalf("relay logs show a secret: %s", logs)
	}
}

// specSigned reports whether the request r received carries a Standard
// Webhooks signature made with key: computed here from the specification,
// with no code of outboxhttp.
func specSigned(key []byte, r webhookRequest) bool {
	id, ts := r.header.Get("webhook-id"), r.header.Get("webhook-timestamp")
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(id + "." + ts + "."))
	mac.Write(r.body)
	want := "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil))
	return id != "" && ts != "" && slices.Contains(strings.Fields(r.header.Get("webhook-signature")), want)
}

func TestWebhookSecretWithWhsecPrefixIsTheBase64DecodedKey(t *testing.T) {
	t.Parallel()
	key := []byte("thirty-two bytes of a random key")
	for _, tc := range []struct {
		secret string
		key    []byte
	}{
		{"whsec_" + base64.StdEncoding.EncodeToString(key), key},
		{"whsec_" + base64.RawStdEncoding.EncodeToString(key[:31]), key[:31]}, // unpadded, as some providers print it
	} {
		secret, want := tc.secret, tc.key
		srv, received := webhookEndpoint(t, 0)
		p, err := webhookPublisher(srv.URL+"/hook", secret)
		if err != nil {
			t.Fatalf("%s...: %v", secret[:10], err)
		}
		defer p.Close()
		msg := outbox.Message{ID: uuid.Must(uuid.NewV7()), Topic: "orders.created", Payload: []byte(`{"id":1}`)}
		if err := p.Publish(context.Background(), []outbox.Message{msg})[0]; err != nil {
			t.Fatal(err)
		}
		if got := received(); len(got) != 1 || !specSigned(want, got[0]) {
			t.Fatalf("secret %s...: request %+v is not signed with the base64-decoded key", secret[:10], got)
		}
	}
}

func TestWebhookPlainSecretOfAtLeast16BytesIsUsedByteForByte(t *testing.T) {
	t.Parallel()
	const secret = "a plain shared secret"
	srv, received := webhookEndpoint(t, 0)
	p, err := webhookPublisher(srv.URL+"/hook", secret)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := p.Publish(context.Background(), []outbox.Message{{ID: uuid.Must(uuid.NewV7()), Topic: "t", Payload: []byte("x")}})[0]; err != nil {
		t.Fatal(err)
	}
	if got := received(); len(got) != 1 || !specSigned([]byte(secret), got[0]) {
		t.Fatalf("request %+v is not signed with the secret's bytes", got)
	}
}

func TestWebhookSecretErrorsSayWhichFormatIsExpectedWithoutShowingIt(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		secret string
		want   []string
	}{
		{"tooshort-s3cret", []string{envWebhookSecret, "15 bytes", "whsec_", "at least 16"}},
		{"whsec_not*base64-s3cret", []string{envWebhookSecret, "whsec_", "base64"}},
		{"whsec_" + base64.StdEncoding.EncodeToString([]byte("s3cret")), []string{envWebhookSecret, "6 bytes", "at least 16"}},
		{"whsec_", []string{envWebhookSecret, "whsec_", "base64"}},
	} {
		_, err := webhookPublisher("https://example.com/hook", tc.secret)
		var ue usageError
		if !errors.As(err, &ue) {
			t.Errorf("secret %q: %v, want a usage error", tc.secret, err)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("secret %q: %v, want it to say %q", tc.secret, err, w)
			}
		}
		if strings.Contains(err.Error(), "s3cret") || strings.Contains(err.Error(), "czNjcmV0") {
			t.Errorf("error %q shows the secret", err)
		}
	}
}
