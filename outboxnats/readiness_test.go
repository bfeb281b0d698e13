package outboxnats_test

import (
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/go-outbox/outbox/internal/natstest"
	"github.com/go-outbox/outbox/internal/readytest"
	"github.com/go-outbox/outbox/outboxnats"
)

// Readiness follows the stream: nil while consuming, the fix while the
// stream is missing, nil again once it is back, and stopped once Consume
// returned.
func TestReadinessSaysWhyWhileTheStreamIsMissingAndIsNilWhileConsuming(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	admin := srv.JetStream(t)
	stream, prefix := newStream(t, admin, jetstream.StreamConfig{})
	ready := &outboxnats.Readiness{}
	if err := ready.Ready(); err == nil || !strings.Contains(err.Error(), "not started") {
		t.Fatalf("Ready() before Consume = %v, want an error saying it has not started", err)
	}
	r := startConsume(t, srv.JetStream(t), outboxnats.ConsumerConfig{Stream: stream, Durable: "billing", Readiness: ready,
		BackoffBase: 10 * time.Millisecond, BackoffMax: 50 * time.Millisecond})
	readytest.WaitReady(t, ready, "ready while consuming")

	if err := admin.DeleteStream(ctxFor(t, 10*time.Second), stream); err != nil {
		t.Fatal(err)
	}
	readytest.WaitNotReady(t, ready, "not ready while the stream is missing", "billing", stream, "not found", "not consuming since")
	if _, err := admin.CreateStream(ctxFor(t, 10*time.Second), jetstream.StreamConfig{Name: stream, Subjects: []string{prefix + ">"}}); err != nil {
		t.Fatal(err)
	}
	readytest.WaitReady(t, ready, "ready once the stream is back")
	r.cancel()
	readytest.WaitNotReady(t, ready, "stopped once Consume returned", "billing", "stopped")
}

// A server that stops makes the consumer not ready, saying the connection
// is lost, until nats.go reconnects to it.
func TestReadinessSaysTheConnectionIsLostWhileTheServerIsDown(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	admin := srv.JetStream(t)
	stream, _ := newStream(t, admin, jetstream.StreamConfig{})
	ready := &outboxnats.Readiness{}
	startConsume(t, srv.JetStream(t), outboxnats.ConsumerConfig{Stream: stream, Durable: "billing", Readiness: ready,
		BackoffBase: 10 * time.Millisecond, BackoffMax: 50 * time.Millisecond})
	readytest.WaitReady(t, ready, "ready while consuming")

	srv.Shutdown()
	readytest.WaitNotReady(t, ready, "not ready while the server is down", "billing", "connection")
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	readytest.WaitReady(t, ready, "ready once the server is back")
}
