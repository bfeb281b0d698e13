package amqptest_test

import (
	"context"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/go-outbox/outbox/internal/amqptest"
)

func TestClosedURLRefusesConnections(t *testing.T) {
	t.Parallel()
	url := amqptest.ClosedURL(t)
	if !strings.HasPrefix(url, "amqp://guest:guest@127.0.0.1:") {
		t.Fatalf("ClosedURL() = %q", url)
	}
	if _, err := amqp.Dial(url); err == nil {
		t.Fatalf("connected to %s", url)
	}
}

// The consumer sees what is published to its queue, in order.
func TestDeclareAndConsume(t *testing.T) {
	t.Parallel()
	url := amqptest.URL(t)
	d := amqptest.Declare(t, url)
	c := amqptest.Consume(t, url, d.Queue)
	ch, err := amqptest.Dial(t, url).Channel()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, body := range []string{"a", "b", "c"} {
		if err := ch.PublishWithContext(ctx, d.Exchange, d.RoutingKey, true, false, amqp.Publishing{Body: []byte(body)}); err != nil {
			t.Fatal(err)
		}
	}
	got, err := c.Next(ctx, 3)
	if err != nil {
		t.Fatal(err)
	}
	if string(got[0].Body)+string(got[1].Body)+string(got[2].Body) != "abc" {
		t.Fatalf("received %q %q %q, want a b c", got[0].Body, got[1].Body, got[2].Body)
	}
}

// A queue watch counts the messages waiting in the queue.
func TestQueueWatchCountsReadyMessages(t *testing.T) {
	t.Parallel()
	url := amqptest.URL(t)
	d := amqptest.Declare(t, url)
	w := amqptest.WatchQueue(t, url, d.Queue)
	if n, err := w.Ready(); err != nil || n != 0 {
		t.Fatalf("Ready() of a new queue = %d, %v; want 0", n, err)
	}
	ch, err := amqptest.Dial(t, url).Channel()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for range 3 {
		if err := ch.PublishWithContext(ctx, d.Exchange, d.RoutingKey, true, false, amqp.Publishing{Body: []byte("x")}); err != nil {
			t.Fatal(err)
		}
	}
	for {
		n, err := w.Ready()
		if err == nil && n == 3 {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("Ready() = %d, %v; want 3", n, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
