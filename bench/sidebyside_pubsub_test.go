package bench

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"cloud.google.com/go/pubsub/v2/pstest"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/outboxpubsub"
)

// BenchmarkSideBySidePubSub publishes batches of 100 messages to a topic of
// pstest, the client library's in-process fake, through
// outboxpubsub.Publisher (without ordering keys, its default) and through a
// bare pubsub.Publisher of the same client with the default publish
// settings, publishing the same data and attributes (outbox-message-id,
// outbox-topic, outbox-key) and waiting on every result's Get. The fake's
// messages are cleared every 50 batches, untimed.
func BenchmarkSideBySidePubSub(b *testing.B) {
	const project, topic = "outbox-bench", "bench"
	srv := pstest.NewServer()
	b.Cleanup(func() { _ = srv.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := pubsub.NewClient(ctx, project,
		option.WithEndpoint(srv.Addr), option.WithoutAuthentication(),
		option.WithGRPCDialOption(grpc.WithTransportCredentials(insecure.NewCredentials())))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = c.Close() })
	if _, err := c.TopicAdminClient.CreateTopic(ctx, &pubsubpb.Topic{Name: "projects/" + project + "/topics/" + topic}); err != nil {
		b.Fatal(err)
	}
	pub, err := outboxpubsub.New(c, outboxpubsub.Config{Topic: topic, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = pub.Close() })
	bare := c.Publisher(topic)
	b.Cleanup(bare.Stop)
	sideBySide{
		publisher: func(ctx context.Context, msgs []outbox.Message) error {
			return firstError(msgs, pub.Publish(ctx, msgs))
		},
		bare: func(ctx context.Context, msgs []outbox.Message) error {
			return barePubSub(ctx, bare, msgs)
		},
		clear: func(context.Context) error {
			srv.ClearMessages()
			return nil
		},
		clearEvery: 50,
	}.run(b)
}

// barePubSub is what an application would write without the publisher:
// Publish each message, then Get each result.
func barePubSub(ctx context.Context, t *pubsub.Publisher, msgs []outbox.Message) error {
	results := make([]*pubsub.PublishResult, len(msgs))
	for i, m := range msgs {
		results[i] = t.Publish(ctx, &pubsub.Message{Data: m.Payload, Attributes: map[string]string{
			outboxpubsub.AttrID: m.ID.String(), outboxpubsub.AttrTopic: m.Topic, outboxpubsub.AttrKey: m.Key,
		}})
	}
	for i, r := range results {
		if _, err := r.Get(ctx); err != nil {
			return fmt.Errorf("message %d (%s): %w", i, msgs[i].ID, err)
		}
	}
	return nil
}
