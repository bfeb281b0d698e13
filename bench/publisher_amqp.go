package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/outboxamqp"
)

// EnvAMQPURL names the RabbitMQ broker the amqp destination publishes to.
// scripts/bench starts a throwaway broker and sets it; without it the amqp
// destination is not registered.
const EnvAMQPURL = "BENCH_AMQP_URL"

// amqp: RabbitMQ through outboxamqp (persistent messages, publisher confirms
// awaited, mandatory routing), each run to a fresh durable classic queue
// through the default exchange, deleted after the run.
func init() {
	url := os.Getenv(EnvAMQPURL)
	if url == "" {
		return
	}
	RegisterPublisher("amqp", func(context.Context) (outbox.Publisher, func(), error) {
		conn, err := amqp.Dial(url)
		if err != nil {
			return nil, nil, fmt.Errorf("connect to RabbitMQ: %w", err)
		}
		ch, err := conn.Channel()
		if err != nil {
			_ = conn.Close()
			return nil, nil, err
		}
		var b [6]byte
		_, _ = rand.Read(b[:])
		queue := "outbox-bench-" + hex.EncodeToString(b[:])
		if _, err := ch.QueueDeclare(queue, true, false, false, false, amqp.Table{"x-queue-type": "classic"}); err != nil {
			_ = conn.Close()
			return nil, nil, fmt.Errorf("declare queue %s: %w", queue, err)
		}
		pub, err := outboxamqp.Dial(url, outboxamqp.Config{
			Logger:     slog.New(slog.DiscardHandler),
			RoutingKey: func(outbox.Message) string { return queue },
		})
		if err != nil {
			_ = conn.Close()
			return nil, nil, err
		}
		return pub, func() {
			_ = pub.Close()
			_, _ = ch.QueueDelete(queue, false, false, false)
			_ = conn.Close()
		}, nil
	})
}
