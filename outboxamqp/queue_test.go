package outboxamqp_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/amqptest"
	"github.com/go-outbox/outbox/outboxamqp"
	"github.com/go-outbox/outbox/publishertest"
)

// DeclareQueue declares a durable quorum queue with a single active
// consumer, bound to the exchange; declaring it again changes nothing (its
// messages stay), and declaring it with other arguments is refused with an
// error that names the queue and says why.
func TestDeclareQueueIsIdempotentAndRefusesToChangeAQueuesArguments(t *testing.T) {
	t.Parallel()
	url := amqptest.URL(t)
	d := amqptest.Declare(t, url)
	q := outboxamqp.Queue{Name: d.Queue + ".sac", Exchange: d.Exchange, Bindings: []string{d.RoutingKey}, SingleActiveConsumer: true}
	ch, err := amqptest.Dial(t, url).Channel()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = ch.QueueDelete(q.Name, false, false, false) })
	if err := outboxamqp.DeclareQueue(ctxFor(t, 30*time.Second), url, q); err != nil {
		t.Fatalf("DeclareQueue: %v", err)
	}
	for i, err := range dial(t, url, outboxamqp.Config{Exchange: d.Exchange}).Publish(ctxFor(t, 30*time.Second), publishertest.Messages(d.RoutingKey, 3)) {
		if err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
	}
	if err := outboxamqp.DeclareQueue(ctxFor(t, 30*time.Second), url, q); err != nil {
		t.Fatalf("DeclareQueue again: %v", err)
	}
	if n := queueDepth(t, url, q.Name); n != 3 {
		t.Fatalf("queue %s holds %d messages after being declared again; want the 3 published", q.Name, n)
	}

	plain := q
	plain.SingleActiveConsumer = false
	err = outboxamqp.DeclareQueue(ctxFor(t, 30*time.Second), url, plain)
	var amqpErr *amqp.Error
	if !errors.As(err, &amqpErr) || amqpErr.Code != amqp.PreconditionFailed || !strings.Contains(err.Error(), q.Name) || !strings.Contains(err.Error(), "cannot change them in place") {
		t.Fatalf("DeclareQueue without SingleActiveConsumer over the queue declared with it: %v; want 406 PRECONDITION_FAILED naming queue %s and saying the arguments cannot change in place", err, q.Name)
	}
}

func TestQueueArgumentsAreAQuorumQueueUnlessClassic(t *testing.T) {
	t.Parallel()
	got := outboxamqp.Queue{Name: "billing", SingleActiveConsumer: true, DeadLetterRoutingKey: "billing.parked"}.Arguments()
	want := amqp.Table{"x-queue-type": "quorum", "x-single-active-consumer": true, "x-dead-letter-exchange": "", "x-dead-letter-routing-key": "billing.parked"}
	if len(got) != len(want) {
		t.Fatalf("Arguments() = %v; want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Fatalf("Arguments() = %v; want %v", got, want)
		}
	}
	if got := (outboxamqp.Queue{Name: "billing", Classic: true}).Arguments(); len(got) != 1 || got["x-queue-type"] != "classic" {
		t.Fatalf("Arguments() of a classic queue = %v; want only x-queue-type classic", got)
	}
}

func TestDeclareQueueRefusesAQueueWithoutNameOrBindingsWithoutExchange(t *testing.T) {
	t.Parallel()
	for _, q := range []outboxamqp.Queue{{}, {Name: "billing", Bindings: []string{"orders"}}} {
		var cfgErr *outbox.ConfigError
		if err := outboxamqp.DeclareQueue(t.Context(), "amqp://guest:guest@127.0.0.1:1/", q); !errors.As(err, &cfgErr) {
			t.Errorf("DeclareQueue(%+v) = %v; want a *outbox.ConfigError before connecting", q, err)
		}
	}
}
