package outboxnats_test

import (
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/go-outbox/outbox/internal/natstest"
	"github.com/go-outbox/outbox/outboxnats"
)

// waitReady polls ready until it is nil, failing the test after 20s.
func waitReady(t *testing.T, ready *outboxnats.Readiness, what string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		err := ready.Ready()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after 20s waiting for %s: Ready() = %v", what, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitNotReady polls ready until its error holds every one of words.
func waitNotReady(t *testing.T, ready *outboxnats.Readiness, what string, words ...string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		err := ready.Ready()
		if err != nil && containsAll(err.Error(), words) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after 20s waiting for %s: Ready() = %v, want an error holding %q", what, err, words)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func containsAll(s string, words []string) bool {
	for _, w := range words {
		if !strings.Contains(s, w) {
			return false
		}
	}
	return true
}

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
	waitReady(t, ready, "ready while consuming")

	if err := admin.DeleteStream(ctxFor(t, 10*time.Second), stream); err != nil {
		t.Fatal(err)
	}
	waitNotReady(t, ready, "not ready while the stream is missing", "billing", stream, "not found", "not consuming since")
	if _, err := admin.CreateStream(ctxFor(t, 10*time.Second), jetstream.StreamConfig{Name: stream, Subjects: []string{prefix + ">"}}); err != nil {
		t.Fatal(err)
	}
	waitReady(t, ready, "ready once the stream is back")
	r.cancel()
	waitNotReady(t, ready, "stopped once Consume returned", "billing", "stopped")
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
	waitReady(t, ready, "ready while consuming")

	srv.Shutdown()
	waitNotReady(t, ready, "not ready while the server is down", "billing", "connection")
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	waitReady(t, ready, "ready once the server is back")
}
