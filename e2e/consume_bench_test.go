package e2e_test

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/amqptest"
	"github.com/go-outbox/outbox/internal/kafkatest"
	"github.com/go-outbox/outbox/internal/natstest"
	"github.com/go-outbox/outbox/internal/pgtest"
	"github.com/go-outbox/outbox/outboxamqp"
	"github.com/go-outbox/outbox/outboxkafka"
	"github.com/go-outbox/outbox/outboxnats"
	"github.com/go-outbox/outbox/outboxpg"
	"github.com/go-outbox/outbox/publishertest"
)

// consumeRoute is one broker ready for a consume benchmark: publish fills
// a fresh destination, consume reads it with the adapter until ctx ends.
type consumeRoute struct {
	publish func(b *testing.B, msgs []outbox.Message)
	consume func(ctx context.Context, fn func(context.Context, outbox.Message) error) error
}

// BenchmarkConsume measures messages per second through each consumer
// adapter, with a no-op handler applied through a PostgreSQL inbox (one
// transaction per message) against the same handler without one. b.N
// messages are published first, over 64 keys, and timed from the start of
// Consume to the last one handled:
//
//	go test -run '^$' -bench Consume -benchtime 20000x -count 3 ./e2e
func BenchmarkConsume(b *testing.B) {
	routes := []struct {
		name string
		new  func(b *testing.B) consumeRoute
	}{{"nats", natsRoute}, {"rabbitmq", amqpRoute}, {"kafka", kafkaRoute}}
	for _, route := range routes {
		for _, withInbox := range []bool{false, true} {
			b.Run(fmt.Sprintf("%s/inbox=%v", route.name, withInbox), func(b *testing.B) {
				benchmarkConsume(b, route.new(b), withInbox)
			})
		}
	}
}

func benchmarkConsume(b *testing.B, r consumeRoute, withInbox bool) {
	msgs := publishertest.Messages("bench.consumed", b.N)
	for i := range msgs {
		msgs[i].Key = fmt.Sprintf("k-%d", i%64)
	}
	r.publish(b, msgs)

	var handled atomic.Int64
	all := make(chan struct{})
	count := func() {
		if handled.Add(1) == int64(len(msgs)) {
			close(all)
		}
	}
	fn := func(context.Context, outbox.Message) error { count(); return nil }
	if withInbox {
		inbox := benchInbox(b)
		fn = inbox.Apply(func(context.Context, pgx.Tx, outbox.Message) error { count(); return nil })
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	b.ResetTimer()
	start := time.Now()
	go func() { done <- r.consume(ctx, fn) }()
	select {
	case <-all:
	case <-time.After(5 * time.Minute):
		b.Fatalf("%d of %d messages handled in 5 minutes", handled.Load(), len(msgs))
	}
	elapsed := time.Since(start)
	b.StopTimer()
	stop()
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(len(msgs))/elapsed.Seconds(), "msgs/s")
}

var quiet = slog.New(slog.DiscardHandler)

// benchInbox is an inbox on a fresh PostgreSQL inbox table.
func benchInbox(b *testing.B) *outbox.Inbox[pgx.Tx] {
	table, err := outboxpg.NewInboxTable(pgtest.Pool(b), outboxpg.InboxOptions{Schema: pgtest.Schema(b)})
	if err != nil {
		b.Fatal(err)
	}
	if err := table.Migrate(b.Context()); err != nil {
		b.Fatal(err)
	}
	inbox, err := outbox.NewInbox(table, "bench")
	if err != nil {
		b.Fatal(err)
	}
	return inbox
}

func publishAll(b testing.TB, p outbox.Publisher, msgs []outbox.Message) {
	for start := 0; start < len(msgs); start += 1000 {
		batch := msgs[start:min(start+1000, len(msgs))]
		for i, err := range p.Publish(b.Context(), batch) {
			if err != nil {
				b.Fatalf("publish %s: %v", batch[i].ID, err)
			}
		}
	}
}

func natsRoute(b *testing.B) consumeRoute {
	srv := natstest.Start(b)
	js := srv.JetStream(b)
	stream, prefix := natstest.NewStream(b, js, jetstream.StreamConfig{})
	return consumeRoute{
		publish: func(b *testing.B, msgs []outbox.Message) {
			p, err := outboxnats.Dial(srv.URL(), outboxnats.Config{SubjectPrefix: prefix, Stream: stream})
			if err != nil {
				b.Fatal(err)
			}
			defer p.Close()
			publishAll(b, p, msgs)
		},
		consume: func(ctx context.Context, fn func(context.Context, outbox.Message) error) error {
			return outboxnats.Consume(ctx, js, outboxnats.ConsumerConfig{Stream: stream, Durable: "bench", Logger: quiet}, fn)
		},
	}
}

func amqpRoute(b *testing.B) consumeRoute {
	url := amqptest.URL(b)
	d := amqptest.Declare(b, url)
	return consumeRoute{
		publish: func(b *testing.B, msgs []outbox.Message) {
			p, err := outboxamqp.Dial(url, outboxamqp.Config{Exchange: d.Exchange, Logger: quiet})
			if err != nil {
				b.Fatal(err)
			}
			defer p.Close()
			for i := range msgs {
				msgs[i].Topic = d.RoutingKey
			}
			publishAll(b, p, msgs)
		},
		consume: func(ctx context.Context, fn func(context.Context, outbox.Message) error) error {
			return outboxamqp.Consume(ctx, url, outboxamqp.ConsumerConfig{Queue: d.Queue, Name: "bench", Logger: quiet}, fn)
		},
	}
}

func kafkaRoute(b *testing.B) consumeRoute {
	c := kafkatest.Start(b)
	topic := c.Topic(b, 4, nil)
	return consumeRoute{
		publish: func(b *testing.B, msgs []outbox.Message) {
			p, err := outboxkafka.Dial(c.Seeds(), outboxkafka.Config{})
			if err != nil {
				b.Fatal(err)
			}
			defer p.Close()
			for i := range msgs {
				msgs[i].Topic = topic
			}
			publishAll(b, p, msgs)
		},
		consume: func(ctx context.Context, fn func(context.Context, outbox.Message) error) error {
			return outboxkafka.Consume(ctx, c.Seeds(), outboxkafka.ConsumerConfig{Group: "bench", Topics: []string{topic}, DeadLetterTopic: topic + ".dead", Logger: quiet}, fn)
		},
	}
}
