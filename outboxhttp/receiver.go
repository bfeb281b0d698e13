package outboxhttp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/go-outbox/outbox"
)

// MaxBodyDefault is HandlerOptions.MaxBody when zero: the outbox's default
// payload limit.
const MaxBodyDefault = outbox.MaxPayloadBytesDefault

// ErrBodyTooLarge is wrapped by FromRequest's error for a body over its
// limit.
var ErrBodyTooLarge = errors.New("outboxhttp: request body too large")

// transportHeaders are request headers that belong to HTTP or to the
// webhook itself, not to the message: FromRequest leaves them out of
// Message.Headers.
var transportHeaders = map[string]bool{
	"Accept-Encoding": true, "Connection": true, "Content-Length": true, "Host": true, "User-Agent": true,
	"Transfer-Encoding": true, "Te": true, "Trailer": true, "Upgrade": true, "Keep-Alive": true,
	HeaderID: true, HeaderIdempotencyKey: true, HeaderKey: true, HeaderTopic: true,
	HeaderWebhookID: true, HeaderWebhookSignature: true, HeaderWebhookTimestamp: true,
}

// FromRequest verifies a webhook request's signature (see Verify) and
// returns the message it carries: the id is the signed webhook-id, Topic and
// Key come from their headers, the payload is the body (at most maxBody
// bytes), and Headers holds the other headers, content-type included, under
// lower-case names (HTTP does not keep the case the message had; the outbox's
// own headers, ce-type or traceparent, are lower-case, so a consumer finds
// them as written). A bad or missing signature is an error
// wrapping ErrInvalidSignature.
func FromRequest(r *http.Request, secret []byte, tolerance time.Duration, maxBody int64) (outbox.Message, error) {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
	if err != nil {
		return outbox.Message{}, fmt.Errorf("outboxhttp: read the request body: %w", err)
	}
	if int64(len(body)) > maxBody {
		return outbox.Message{}, fmt.Errorf("%w: over %d bytes", ErrBodyTooLarge, maxBody)
	}
	if err := Verify(secret, r.Header, body, tolerance); err != nil {
		return outbox.Message{}, err
	}
	id, err := uuid.Parse(r.Header.Get(HeaderWebhookID))
	if err != nil {
		return outbox.Message{}, fmt.Errorf("outboxhttp: %s %q is not a message id: %w", HeaderWebhookID, r.Header.Get(HeaderWebhookID), err)
	}
	m := outbox.Message{ID: id, Topic: r.Header.Get(HeaderTopic), Key: r.Header.Get(HeaderKey), Payload: body, Headers: map[string]string{}}
	for name, values := range r.Header {
		if !transportHeaders[name] && len(values) > 0 {
			m.Headers[strings.ToLower(name)] = strings.Join(values, ", ")
		}
	}
	return m, nil
}

// HandlerOptions configures a Handler. The zero value verifies with the
// default tolerance and body limit and logs to slog.Default().
type HandlerOptions struct {
	// Tolerance is how far a request's timestamp may be from now; see
	// Verify. Default VerifyToleranceDefault.
	Tolerance time.Duration
	// MaxBody refuses larger bodies with 413. Default MaxBodyDefault.
	MaxBody int64
	// Logger receives refused requests and handler failures. Default
	// slog.Default().
	Logger *slog.Logger
	// Observer, if set, is told of every message handled (outboxotel
	// continues the message's trace there); Consumer names the consumer
	// for it, and for outbox.ApplyOnce, whose inbox it names.
	Observer outbox.ConsumeObserver
	Consumer string
}

// Handler is the receiving end of a webhook: an http.Handler that verifies
// each request's signature, hands the message to its function, and answers
// 204 only once the function returned nil, so that the sender retries
// anything not applied. With outbox.Inbox.Apply the function applies each message
// once, in the consumer's transaction, and a redelivery after a lost answer
// is acknowledged without applying it again.
//
// Answers: 204 applied (or applied before); 401 bad signature; 405 not a
// POST; 413 body too large; 400 a malformed id; 422 the function returned a
// permanent error (outbox.Permanent: the outbox's webhook publisher
// dead-letters the message at once); 503 any other error (it retries).
type Handler struct {
	secret []byte
	fn     func(ctx context.Context, m outbox.Message) error
	opts   HandlerOptions
}

// NewHandler returns a Handler that verifies with secret (at least
// SecretMinLength bytes; see ParseSecret) and applies messages with fn.
func NewHandler(secret []byte, fn func(ctx context.Context, m outbox.Message) error, opts HandlerOptions) (*Handler, error) {
	if len(secret) < SecretMinLength {
		return nil, &outbox.ConfigError{Field: "outboxhttp.NewHandler secret", Value: fmt.Sprintf("%d bytes", len(secret)),
			Fix: fmt.Sprintf("use the sender's secret, at least %d bytes (outboxhttp.ParseSecret reads whsec_ + base64)", SecretMinLength)}
	}
	if fn == nil {
		return nil, &outbox.ConfigError{Field: "outboxhttp.NewHandler fn", Value: "nil", Fix: "pass the function that applies a message, e.g. inbox.Apply(apply)"}
	}
	if opts.Tolerance <= 0 {
		opts.Tolerance = VerifyToleranceDefault
	}
	if opts.MaxBody <= 0 {
		opts.MaxBody = MaxBodyDefault
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	return &Handler{secret: append([]byte(nil), secret...), fn: fn, opts: opts}, nil
}

// ServeHTTP handles one delivery.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "webhook deliveries are POST requests", http.StatusMethodNotAllowed)
		return
	}
	m, err := FromRequest(r, h.secret, h.opts.Tolerance, h.opts.MaxBody)
	switch {
	case errors.Is(err, ErrInvalidSignature):
		h.opts.Logger.Warn("outboxhttp: webhook request refused: bad signature (check that sender and receiver share the secret)", slog.Any("error", err))
		http.Error(w, "invalid signature", http.StatusUnauthorized)
		return
	case errors.Is(err, ErrBodyTooLarge):
		http.Error(w, err.Error(), http.StatusRequestEntityTooLarge)
		return
	case err != nil:
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	ctx := r.Context()
	if h.opts.Consumer != "" {
		ctx = outbox.WithConsumerName(ctx, h.opts.Consumer) // for outbox.ApplyOnce
	}
	done := func(error) {}
	if h.opts.Observer != nil {
		ctx, done = h.opts.Observer.Consuming(ctx, h.opts.Consumer, m)
	}
	err = h.fn(ctx, m)
	done(err)
	if err != nil {
		status := http.StatusServiceUnavailable
		if outbox.IsPermanent(err) {
			status = http.StatusUnprocessableEntity
		}
		h.opts.Logger.Error("outboxhttp: webhook message not applied", slog.String("message_id", m.ID.String()), slog.String("topic", m.Topic),
			slog.Int("status", status), slog.Any("error", err))
		http.Error(w, "not applied: "+err.Error(), status)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
