package outboxhttp_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/webhooktest"
	"github.com/go-outbox/outbox/outboxhttp"
)

// signedDelivery returns a POST of body signed with secret under id.
func signedDelivery(t *testing.T, secret []byte, id, body string) *http.Request {
	t.Helper()
	r := httptest.NewRequest(http.MethodPost, "/hook", strings.NewReader(body))
	now := time.Now()
	r.Header.Set(outboxhttp.HeaderWebhookID, id)
	r.Header.Set(outboxhttp.HeaderWebhookTimestamp, strconv.FormatInt(now.Unix(), 10))
	r.Header.Set(outboxhttp.HeaderWebhookSignature, outboxhttp.Sign(secret, id, now, []byte(body)))
	r.Header.Set(outboxhttp.HeaderTopic, "orders")
	r.Header.Set(outboxhttp.HeaderKey, "o-1")
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("Traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	return r
}

func TestHandlerAnswersByWhatHappened(t *testing.T) {
	id := uuid.New().String()
	var got outbox.Message
	result := error(nil)
	h, err := outboxhttp.NewHandler(webhooktest.Secret, func(_ context.Context, m outbox.Message) error { got = m; return result },
		outboxhttp.HandlerOptions{MaxBody: 64})
	if err != nil {
		t.Fatal(err)
	}
	serve := func(r *http.Request) int {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w.Code
	}
	if code := serve(signedDelivery(t, webhooktest.Secret, id, `{"n":1}`)); code != http.StatusNoContent {
		t.Fatalf("a valid delivery: %d, want 204", code)
	}
	if got.ID.String() != id || got.Topic != "orders" || got.Key != "o-1" || string(got.Payload) != `{"n":1}` ||
		got.Headers["content-type"] != "application/json" || got.Headers["traceparent"] == "" || got.Headers["webhook-signature"] != "" {
		t.Fatalf("message %+v: want id, topic, key, payload and the application headers (not the webhook's own)", got)
	}
	for _, c := range []struct {
		name string
		req  *http.Request
		err  error
		want int
	}{
		{"another secret", signedDelivery(t, []byte("a different secret of 16+ bytes"), id, `{}`), nil, http.StatusUnauthorized},
		{"GET", httptest.NewRequest(http.MethodGet, "/hook", nil), nil, http.StatusMethodNotAllowed},
		{"body over MaxBody", signedDelivery(t, webhooktest.Secret, id, strings.Repeat("x", 65)), nil, http.StatusRequestEntityTooLarge},
		{"id not a message id", signedDelivery(t, webhooktest.Secret, "msg_1", `{}`), nil, http.StatusBadRequest},
		{"permanent failure", signedDelivery(t, webhooktest.Secret, id, `{}`), outbox.Permanent(errors.New("bad order")), http.StatusUnprocessableEntity},
		{"failure", signedDelivery(t, webhooktest.Secret, id, `{}`), errors.New("database down"), http.StatusServiceUnavailable},
	} {
		result = c.err
		if code := serve(c.req); code != c.want {
			t.Errorf("%s: %d, want %d", c.name, code, c.want)
		}
	}
	if _, err := outboxhttp.NewHandler([]byte("short"), func(context.Context, outbox.Message) error { return nil }, outboxhttp.HandlerOptions{}); err == nil {
		t.Error("NewHandler with a 5-byte secret: no error")
	}
}

// HandlerOptions.Consumer reaches the function as the consumer's name
// (outbox.ConsumerName), which outbox.ApplyOnce names its inbox after.
func TestHandlerGivesItsFunctionTheConsumersName(t *testing.T) {
	var consumer string
	var named bool
	h, err := outboxhttp.NewHandler(webhooktest.Secret, func(ctx context.Context, _ outbox.Message) error {
		consumer, named = outbox.ConsumerName(ctx)
		return nil
	}, outboxhttp.HandlerOptions{Consumer: "billing"})
	if err != nil {
		t.Fatal(err)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, signedDelivery(t, webhooktest.Secret, uuid.New().String(), `{}`))
	if w.Code != http.StatusNoContent || !named || consumer != "billing" {
		t.Fatalf("answer %d, consumer %q (named %v); want 204 and billing", w.Code, consumer, named)
	}
}
