package outboxamqp_test

import (
	"errors"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/amqptest"
	"github.com/go-outbox/outbox/outboxamqp"
	"github.com/go-outbox/outbox/publishertest"
)

// freshName returns a name no other test uses.
func freshName() string {
	return "outbox-test-topology-" + strconv.FormatInt(time.Now().UnixNano(), 36) + "-" + strconv.Itoa(rand.IntN(1e6))
}

// fresh deletes queues and exchanges when the test ends.
func fresh(t *testing.T, url string, queues, exchanges []string) {
	t.Helper()
	t.Cleanup(func() {
		conn, err := amqp.Dial(url)
		if err != nil {
			t.Errorf("clean up: %v", err)
			return
		}
		defer conn.Close()
		for _, q := range queues {
			if ch, err := conn.Channel(); err == nil {
				_, _ = ch.QueueDelete(q, false, false, false)
				_ = ch.Close()
			}
		}
		for _, x := range exchanges {
			if x == "" {
				continue
			}
			if ch, err := conn.Channel(); err == nil {
				_ = ch.ExchangeDelete(x, false, false)
				_ = ch.Close()
			}
		}
	})
}

// DeclareQueue declares the exchange it binds the queue to when it does not
// exist (a durable topic exchange), so a relay publishing to it finds the
// queue bound.
func TestDeclareQueueDeclaresAMissingExchangeAsADurableTopicExchange(t *testing.T) {
	t.Parallel()
	url := amqptest.URL(t)
	name := freshName()
	fresh(t, url, []string{name}, []string{name + ".events"})
	q := outboxamqp.Queue{Name: name, Exchange: name + ".events", Bindings: []string{"orders.*"}}
	if err := outboxamqp.DeclareQueue(ctxFor(t, 30*time.Second), url, q); err != nil {
		t.Fatalf("DeclareQueue with exchange %s missing: %v; want the exchange declared", q.Exchange, err)
	}
	for i, err := range dial(t, url, outboxamqp.Config{Exchange: q.Exchange}).Publish(ctxFor(t, 30*time.Second), publishertest.Messages("orders.created", 2)) {
		if err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
	}
	if n := queueDepth(t, url, q.Name); n != 2 {
		t.Fatalf("queue %s holds %d messages; want the 2 published with routing key orders.created (bound with orders.* on a topic exchange)", q.Name, n)
	}
}

// A message Consume parks on the broker (rejected without requeue) reaches
// DeadLetterQueue, through DeadLetterExchange or, without one, straight
// through the default exchange; declaring again finds everything there.
func TestDeclareQueueDeclaresTheDeadLetterQueueThatParkedMessagesReach(t *testing.T) {
	t.Parallel()
	url := amqptest.URL(t)
	for _, viaExchange := range []bool{true, false} {
		name := freshName()
		q := outboxamqp.Queue{Name: name, Exchange: name + ".events", Bindings: []string{"orders.created"}, DeadLetterQueue: name + ".parked"}
		if viaExchange {
			q.DeadLetterExchange = name + ".dlx"
		}
		fresh(t, url, []string{q.Name, q.DeadLetterQueue}, []string{q.Exchange, q.DeadLetterExchange})
		got, err := outboxamqp.Declare(ctxFor(t, 30*time.Second), url, q)
		if err != nil {
			t.Fatalf("Declare(%+v): %v", q, err)
		}
		want := []outboxamqp.Declared{{Action: "created", Kind: "exchange", Name: q.Exchange}}
		if viaExchange {
			want = append(want, outboxamqp.Declared{Action: "created", Kind: "exchange", Name: q.DeadLetterExchange})
		}
		want = append(want, outboxamqp.Declared{Action: "created", Kind: "queue", Name: q.DeadLetterQueue})
		if viaExchange {
			want = append(want, outboxamqp.Declared{Action: "bound", Kind: "binding", Name: q.DeadLetterQueue + " <- " + q.DeadLetterExchange + " (" + q.DeadLetterQueue + ")"})
		}
		want = append(want, outboxamqp.Declared{Action: "created", Kind: "queue", Name: q.Name}, outboxamqp.Declared{Action: "bound", Kind: "binding", Name: q.Name + " <- " + q.Exchange + " (orders.created)"})
		if !slices.Equal(got, want) {
			t.Fatalf("Declare = %+v;\nwant %+v", got, want)
		}

		for i, err := range dial(t, url, outboxamqp.Config{Exchange: q.Exchange}).Publish(ctxFor(t, 30*time.Second), publishertest.Messages("orders.created", 1)) {
			if err != nil {
				t.Fatalf("publish %d: %v", i, err)
			}
		}
		ch, err := amqptest.Dial(t, url).Channel()
		if err != nil {
			t.Fatal(err)
		}
		m, ok, err := ch.Get(q.Name, false)
		if err != nil || !ok {
			t.Fatalf("get from %s: %v (got one: %t)", q.Name, err, ok)
		}
		if err := m.Reject(false); err != nil {
			t.Fatal(err)
		}
		waitForDepth(t, url, q.DeadLetterQueue, 1)

		got, err = outboxamqp.Declare(ctxFor(t, 30*time.Second), url, q)
		if err != nil {
			t.Fatalf("Declare again: %v", err)
		}
		for _, d := range got {
			if d.Action == "created" {
				t.Fatalf("Declare again = %+v; want every exchange and queue found existing", got)
			}
		}
	}
}

// waitForDepth waits until queue holds n messages.
func waitForDepth(t *testing.T, url, queue string, n int) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for got := queueDepth(t, url, queue); got != n; got = queueDepth(t, url, queue) {
		if time.Now().After(deadline) {
			t.Fatalf("queue %s holds %d messages; want %d", queue, got, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// An exchange that exists is used whatever its type while ExchangeType is
// empty; set, another type is refused with an error naming the exchange
// and the fix.
func TestDeclareQueueUsesAnExistingExchangeUnlessItsTypeWasAskedAndDiffers(t *testing.T) {
	t.Parallel()
	url := amqptest.URL(t)
	d := amqptest.Declare(t, url) // a direct exchange
	q := outboxamqp.Queue{Name: d.Queue + ".typed", Exchange: d.Exchange, Bindings: []string{d.RoutingKey}}
	fresh(t, url, []string{q.Name}, nil)
	got, err := outboxamqp.Declare(ctxFor(t, 30*time.Second), url, q)
	if err != nil || len(got) == 0 || got[0] != (outboxamqp.Declared{Action: "exists", Kind: "exchange", Name: d.Exchange}) {
		t.Fatalf("Declare over the direct exchange %s = %+v, %v; want it found existing", d.Exchange, got, err)
	}
	q.ExchangeType = "fanout"
	_, err = outboxamqp.Declare(ctxFor(t, 30*time.Second), url, q)
	var amqpErr *amqp.Error
	if !errors.As(err, &amqpErr) || amqpErr.Code != amqp.PreconditionFailed || !strings.Contains(err.Error(), "exchange "+d.Exchange) || !strings.Contains(err.Error(), "ExchangeType") {
		t.Fatalf("Declare with ExchangeType fanout over the direct exchange: %v; want 406 naming exchange %s and ExchangeType", err, d.Exchange)
	}
}

func TestDeclareQueueRefusesADeadLetterQueueItsMessagesCannotReach(t *testing.T) {
	t.Parallel()
	for _, q := range []outboxamqp.Queue{
		{Name: "billing", DeadLetterQueue: "billing"},
		{Name: "billing", DeadLetterQueue: "billing.parked", DeadLetterRoutingKey: "other"},
	} {
		var cfgErr *outbox.ConfigError
		if err := outboxamqp.DeclareQueue(t.Context(), "amqp://guest:guest@127.0.0.1:1/", q); !errors.As(err, &cfgErr) {
			t.Errorf("DeclareQueue(%+v) = %v; want a *outbox.ConfigError before connecting", q, err)
		}
	}
	args := outboxamqp.Queue{Name: "billing", DeadLetterQueue: "billing.parked"}.Arguments()
	if args["x-dead-letter-exchange"] != "" || args["x-dead-letter-routing-key"] != "billing.parked" {
		t.Fatalf("Arguments() with DeadLetterQueue only = %v; want the default exchange and the dead-letter queue's name as routing key", args)
	}
}
