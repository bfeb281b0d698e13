package bench

import (
	"context"
	"fmt"
	"log/slog"
	"os"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/natstest"
	"github.com/go-outbox/outbox/outboxnats"
)

// nats: an embedded NATS server with JetStream, started per run with its
// files in a fresh temp directory (file storage, the server's default
// durability), and a stream capturing the drain's subjects. The publisher
// waits for JetStream's acknowledgement of every message, with the
// message id as Nats-Msg-Id for broker-side deduplication.
func init() {
	RegisterPublisher("nats", func(ctx context.Context) (outbox.Publisher, func(), error) {
		dir, err := os.MkdirTemp("", "outbox-bench-nats-")
		if err != nil {
			return nil, nil, err
		}
		srv, err := natstest.Run(server.Options{StoreDir: dir, NoLog: true})
		if err != nil {
			_ = os.RemoveAll(dir)
			return nil, nil, err
		}
		stop := func() {
			srv.Shutdown()
			_ = os.RemoveAll(dir)
		}
		pub, err := outboxnats.Dial(srv.URL(), outboxnats.Config{Stream: "BENCH", Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			stop()
			return nil, nil, err
		}
		if _, err := pub.JetStream().CreateOrUpdateStream(ctx, jetstream.StreamConfig{
			Name: "BENCH", Subjects: []string{"bench.>"}, Storage: jetstream.FileStorage,
		}); err != nil {
			_ = pub.Close()
			stop()
			return nil, nil, fmt.Errorf("create stream: %w", err)
		}
		return pub, func() { _ = pub.Close(); stop() }, nil
	})
}
