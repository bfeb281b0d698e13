package bench

import (
	"context"
	"fmt"
	"log/slog"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/natstest"
	"github.com/go-outbox/outbox/outboxnats"
)

// BenchmarkSideBySideNATS publishes batches of 100 messages to a JetStream
// stream (file storage) on an embedded nats-server through
// outboxnats.Publisher and through a bare nats.go client of the same
// library: one PublishMsgAsync per message with the same headers
// (Nats-Msg-Id, Outbox-Topic, Outbox-Key, the expected stream) on the same
// subject, then a wait for every PubAck. Both share one connection. The
// stream is purged every 50 batches, untimed.
func BenchmarkSideBySideNATS(b *testing.B) {
	dir := b.TempDir()
	srv, err := natstest.Run(server.Options{StoreDir: dir, NoLog: true})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(srv.Shutdown)
	nc, err := nats.Connect(srv.URL())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	stream, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "SIDE", Subjects: []string{"side.>"}, Storage: jetstream.FileStorage})
	if err != nil {
		b.Fatal(err)
	}
	pub, err := outboxnats.New(js, outboxnats.Config{SubjectPrefix: "side.", Stream: "SIDE", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = pub.Close() })
	sideBySide{
		publisher: func(ctx context.Context, msgs []outbox.Message) error {
			return firstError(msgs, pub.Publish(ctx, msgs))
		},
		bare: func(ctx context.Context, msgs []outbox.Message) error {
			return barePublishAsync(ctx, js, "side.", msgs)
		},
		clear:      func(ctx context.Context) error { return stream.Purge(ctx) },
		clearEvery: 50,
	}.run(b)
}

// barePublishAsync is what an application would write without the
// publisher: every message sent asynchronously with its id for
// deduplication, expecting stream SIDE as the publisher with Config.Stream
// does, then every acknowledgement awaited.
func barePublishAsync(ctx context.Context, js jetstream.JetStream, prefix string, msgs []outbox.Message) error {
	futures := make([]jetstream.PubAckFuture, len(msgs))
	for i, m := range msgs {
		msg := nats.NewMsg(prefix + m.Topic)
		msg.Data = m.Payload
		msg.Header.Set(jetstream.MsgIDHeader, m.ID.String())
		msg.Header.Set(outboxnats.HeaderTopic, m.Topic)
		msg.Header.Set(outboxnats.HeaderKey, m.Key)
		f, err := js.PublishMsgAsync(msg, jetstream.WithExpectStream("SIDE"))
		if err != nil {
			return fmt.Errorf("message %d (%s): %w", i, m.ID, err)
		}
		futures[i] = f
	}
	for i, f := range futures {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			return fmt.Errorf("message %d (%s): %w", i, msgs[i].ID, err)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}
