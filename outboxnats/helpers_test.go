package outboxnats_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/go-outbox/outbox/internal/natstest"
	"github.com/go-outbox/outbox/outboxnats"
	"github.com/go-outbox/outbox/publishertest"
	"github.com/go-outbox/outbox/relaytest"
)

// newStream creates a stream with a fresh name; see natstest.NewStream.
func newStream(t *testing.T, js jetstream.JetStream, cfg jetstream.StreamConfig) (name, prefix string) {
	t.Helper()
	return natstest.NewStream(t, js, cfg)
}

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// dial returns a publisher on a connection of its own, closed when the test
// ends.
func dial(t *testing.T, srv *natstest.Server, cfg outboxnats.Config) *outboxnats.Publisher {
	t.Helper()
	cfg.ConnectOptions = append(natstest.ClientOptions(), cfg.ConnectOptions...)
	if cfg.Logger == nil {
		cfg.Logger = relaytest.TestLogger(t)
	}
	p, err := outboxnats.Dial(srv.URL(), cfg)
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// receiver reads a stream from its start; each call continues where the
// previous one stopped.
func receiver(js jetstream.JetStream, stream string) func(ctx context.Context, n int) ([]publishertest.Received, error) {
	r := natstest.NewReader(js, stream)
	return func(ctx context.Context, n int) ([]publishertest.Received, error) {
		msgs, err := r.Next(ctx, n)
		out := make([]publishertest.Received, len(msgs))
		for i, m := range msgs {
			out[i] = received(m)
		}
		return out, err
	}
}

func received(m jetstream.Msg) publishertest.Received {
	h := map[string]string{}
	for k, v := range m.Headers() {
		if len(v) > 0 {
			h[k] = v[0]
		}
	}
	return publishertest.Received{
		ID:      h[outboxnats.HeaderMsgID],
		Topic:   h[outboxnats.HeaderTopic],
		Key:     h[outboxnats.HeaderKey],
		Payload: m.Data(),
		Headers: h,
	}
}

// waitFor polls cond until it holds or the timeout passes.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
