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

// NewStream gives each stream a fresh name and subjects; a Reader reads it
// from the start, each Next where the previous stopped.
func TestNewStreamAndReaderReadInOrderAcrossCalls(t *testing.T) {
	t.Parallel()
	js := natstest.Start(t).JetStream(t)
	name, prefix := natstest.NewStream(t, js, jetstream.StreamConfig{})
	other, otherPrefix := natstest.NewStream(t, js, jetstream.StreamConfig{})
	if name == other || prefix == otherPrefix {
		t.Fatalf("two streams share a name or prefix: %s %s, %s %s", name, prefix, other, otherPrefix)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, body := range []string{"a", "b", "c"} {
		if _, err := js.Publish(ctx, prefix+"x", []byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	r := natstest.NewReader(js, name)
	first, err := r.Next(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	rest, err := r.Next(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	got := string(first[0].Data()) + string(first[1].Data()) + string(rest[0].Data())
	if got != "abc" {
		t.Fatalf("read %q, want abc", got)
	}
	short, cancelShort := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancelShort()
	if more, err := r.Next(short, 1); err == nil || len(more) != 0 {
		t.Fatalf("Next past the end: %d messages, %v; want none and an error", len(more), err)
	}
}
