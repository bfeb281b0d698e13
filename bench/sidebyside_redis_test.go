package bench

import (
	"context"
	"fmt"
	"log/slog"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/redistest"
	"github.com/go-outbox/outbox/outboxredis"
)

// BenchmarkSideBySideRedisStreams publishes batches of 100 messages to a
// Redis stream on the real server of TEST_REDIS_URL (skipped without it)
// through outboxredis.Publisher and through a bare go-redis pipeline of the
// same XADDs (the same fields: id, topic, key, payload), both on one client
// and both waiting for every entry's id in the reply. The stream is deleted
// every 50 batches, untimed.
func BenchmarkSideBySideRedisStreams(b *testing.B) {
	c := redistest.Client(b)
	stream := redistest.Stream(b, c, "outbox-bench.")
	pub, err := outboxredis.New(c, outboxredis.Config{Stream: stream, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = pub.Close() })
	sideBySide{
		publisher: func(ctx context.Context, msgs []outbox.Message) error {
			return firstError(msgs, pub.Publish(ctx, msgs))
		},
		bare: func(ctx context.Context, msgs []outbox.Message) error {
			return bareXAdd(ctx, c, stream, msgs)
		},
		clear:      func(ctx context.Context) error { return c.Del(ctx, stream).Err() },
		clearEvery: 50,
	}.run(b)
}

// bareXAdd is what an application would write without the publisher: one
// pipeline of XADDs, each confirmed by its entry id.
func bareXAdd(ctx context.Context, c redis.UniversalClient, stream string, msgs []outbox.Message) error {
	pipe := c.Pipeline()
	cmds := make([]*redis.StringCmd, len(msgs))
	for i, m := range msgs {
		cmds[i] = pipe.XAdd(ctx, &redis.XAddArgs{Stream: stream, ID: "*", Values: []any{
			outboxredis.FieldID, m.ID.String(), outboxredis.FieldTopic, m.Topic,
			outboxredis.FieldKey, m.Key, outboxredis.FieldPayload, m.Payload,
		}})
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return err
	}
	for i, cmd := range cmds {
		if cmd.Val() == "" {
			return fmt.Errorf("message %d (%s): no entry id in the reply", i, msgs[i].ID)
		}
	}
	return nil
}
