package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/outboxamqp"
)

// BenchmarkSideBySideRabbitMQ publishes batches of 100 persistent messages
// to a durable classic queue through the default exchange, on the
// RabbitMQ of TEST_AMQP_URL (skipped without it), through
// outboxamqp.Publisher and through a bare amqp091-go channel in confirm
// mode: the same publishings (message id, type, timestamp, the key header),
// mandatory, sent at once, then every publisher confirm awaited. Each side
// has its own connection, as an application has. The queue is purged every
// 50 batches, untimed.
func BenchmarkSideBySideRabbitMQ(b *testing.B) {
	url := os.Getenv("TEST_AMQP_URL")
	if url == "" {
		b.Skip("TEST_AMQP_URL is not set: eval \"$(scripts/rabbitmq-up)\"")
	}
	conn, err := amqp.Dial(url)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		b.Fatal(err)
	}
	var suffix [6]byte
	_, _ = rand.Read(suffix[:])
	queue := "outbox-side-" + hex.EncodeToString(suffix[:])
	if _, err := ch.QueueDeclare(queue, true, false, false, false, amqp.Table{"x-queue-type": "classic"}); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _, _ = ch.QueueDelete(queue, false, false, false) })
	if err := ch.Confirm(false); err != nil {
		b.Fatal(err)
	}
	returned := ch.NotifyReturn(make(chan amqp.Return, sideBatch))
	pub, err := outboxamqp.Dial(url, outboxamqp.Config{Logger: slog.New(slog.DiscardHandler), RoutingKey: func(outbox.Message) string { return queue }})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = pub.Close() })
	sideBySide{
		publisher: func(ctx context.Context, msgs []outbox.Message) error {
			return firstError(msgs, pub.Publish(ctx, msgs))
		},
		bare: func(ctx context.Context, msgs []outbox.Message) error {
			return barePublishConfirmed(ctx, ch, returned, queue, msgs)
		},
		clear: func(context.Context) error {
			_, err := ch.QueuePurge(queue, false)
			return err
		},
		clearEvery: 50,
	}.run(b)
}

// barePublishConfirmed is what an application would write without the
// publisher: every message published, mandatory, with a deferred confirm,
// then every confirm awaited; a returned (unroutable) message fails.
func barePublishConfirmed(ctx context.Context, ch *amqp.Channel, returned <-chan amqp.Return, queue string, msgs []outbox.Message) error {
	confirms := make([]*amqp.DeferredConfirmation, len(msgs))
	for i, m := range msgs {
		dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", queue, true, false, amqp.Publishing{
			Headers: amqp.Table{outboxamqp.HeaderKey: m.Key}, DeliveryMode: amqp.Persistent,
			MessageId: m.ID.String(), Timestamp: m.CreatedAt, Type: m.Topic, Body: m.Payload,
		})
		if err != nil {
			return fmt.Errorf("message %d (%s): %w", i, m.ID, err)
		}
		confirms[i] = dc
	}
	for i, dc := range confirms {
		acked, err := dc.WaitContext(ctx)
		if err != nil || !acked {
			return fmt.Errorf("message %d (%s): acked %v: %w", i, msgs[i].ID, acked, errors.Join(err, errors.New("not confirmed")))
		}
	}
	select {
	case r := <-returned:
		return fmt.Errorf("message %s returned: %s", r.MessageId, r.ReplyText)
	default:
		return nil // RabbitMQ sends a return before its message's confirm
	}
}
