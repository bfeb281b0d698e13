package natstest_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/go-outbox/outbox/internal/natstest"
)

func TestServerKeepsStreamsAndAddressAcrossARestartAndClientsReconnect(t *testing.T) {
	t.Parallel()
	s := natstest.Start(t)
	url := s.URL()
	js := s.JetStream(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "KEEP", Subjects: []string{"keep.>"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, "keep.a", []byte("before")); err != nil {
		t.Fatal(err)
	}

	s.Shutdown()
	if s.Running() || s.Server() != nil {
		t.Fatal("server still running after Shutdown")
	}
	s.Shutdown() // a second Shutdown is a no-op
	s.Restart(t)
	if s.URL() != url {
		t.Fatalf("URL after restart = %s, want %s", s.URL(), url)
	}

	// The old connection reconnects by itself and the stream kept its message.
	var ack *jetstream.PubAck
	for {
		var err error
		if ack, err = js.Publish(ctx, "keep.b", []byte("after")); err == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("publish after restart: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if ack.Sequence != 2 {
		t.Fatalf("sequence after restart = %d, want 2 (the first message kept)", ack.Sequence)
	}
}

func TestRunRequiresAStoreDir(t *testing.T) {
	t.Parallel()
	if _, err := natstest.Run(server.Options{}); err == nil {
		t.Fatal("Run without StoreDir succeeded")
	}
}

func TestStartWithAppliesOptions(t *testing.T) {
	t.Parallel()
	s := natstest.StartWith(t, server.Options{MaxPayload: 2048})
	nc := s.Connect(t)
	if got := nc.MaxPayload(); got != 2048 {
		t.Fatalf("MaxPayload = %d, want 2048", got)
	}
}
