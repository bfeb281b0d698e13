package outboxamqp_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/amqptest"
	"github.com/go-outbox/outbox/internal/proxytest"
	"github.com/go-outbox/outbox/outboxamqp"
	"github.com/go-outbox/outbox/publishertest"
	"github.com/go-outbox/outbox/relaytest"
)

func TestPublisherConformance(t *testing.T) {
	t.Parallel()
	publishertest.Run(t, harness)
}

// The message arrives with its id as message-id, its topic as type, its key
// in a header, its content-type header as the content-type property,
// persistent, with a timestamp, to the exchange and routing key of the
// configuration.
func TestMessageCarriesIDTopicKeyContentTypeAndIsPersistent(t *testing.T) {
	t.Parallel()
	url := amqptest.URL(t)
	d := amqptest.Declare(t, url)
	consumer := amqptest.Consume(t, url, d.Queue)
	p := dial(t, url, outboxamqp.Config{
		Exchange:   d.Exchange,
		RoutingKey: func(m outbox.Message) string { return d.RoutingKey }, // every topic to the one bound key
	})
	m := outbox.Message{
		ID:        uuid.Must(uuid.NewV7()),
		Topic:     "orders.created",
		Key:       "order-42",
		Payload:   []byte(`{"id":42}`),
		Headers:   map[string]string{"Content-Type": "application/json", "traceparent": "00-abc-def-01", outboxamqp.HeaderKey: "impostor"},
		CreatedAt: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC),
	}
	if errs := p.Publish(ctxFor(t, 30*time.Second), []outbox.Message{m}); errs[0] != nil {
		t.Fatal(errs[0])
	}
	got, err := consumer.Next(ctxFor(t, 30*time.Second), 1)
	if err != nil {
		t.Fatal(err)
	}
	dv := got[0]
	for _, c := range []struct{ what, got, want string }{
		{"message-id", dv.MessageId, m.ID.String()},
		{"type", dv.Type, m.Topic},
		{"exchange", dv.Exchange, d.Exchange},
		{"routing key", dv.RoutingKey, d.RoutingKey},
		{"content-type", dv.ContentType, "application/json"},
		{"header " + outboxamqp.HeaderKey, fmt.Sprint(dv.Headers[outboxamqp.HeaderKey]), m.Key},
		{"header traceparent", fmt.Sprint(dv.Headers["traceparent"]), "00-abc-def-01"},
		{"body", string(dv.Body), string(m.Payload)},
	} {
		if c.got != c.want {
			t.Errorf("message %s: %s = %q, want %q", m.ID, c.what, c.got, c.want)
		}
	}
	if dv.DeliveryMode != amqp.Persistent {
		t.Errorf("message %s: delivery mode %d, want persistent (2)", m.ID, dv.DeliveryMode)
	}
	if !dv.Timestamp.Equal(m.CreatedAt) {
		t.Errorf("message %s: timestamp %v, want %v", m.ID, dv.Timestamp, m.CreatedAt)
	}
	if _, ok := dv.Headers["Content-Type"]; ok {
		t.Errorf("message %s: content type sent as a header too: %v", m.ID, dv.Headers)
	}
	back, err := outboxamqp.FromDelivery(dv)
	if err != nil {
		t.Fatal(err)
	}
	if back.ID != m.ID || back.Topic != m.Topic || back.Key != m.Key || back.Headers["content-type"] != "application/json" ||
		back.Headers["traceparent"] != "00-abc-def-01" || !back.CreatedAt.Equal(m.CreatedAt) {
		t.Errorf("FromDelivery = %+v, want the fields of %+v (content-type in lower case)", back, m)
	}
}

// By default a message no queue is bound for is retried: it fails alone,
// retryably, and says why.
func TestUnroutableMessageIsRetryableByDefaultAndFailsAlone(t *testing.T) {
	t.Parallel()
	url := amqptest.URL(t)
	d := amqptest.Declare(t, url)
	consumer := amqptest.Consume(t, url, d.Queue)
	p := dial(t, url, outboxamqp.Config{Exchange: d.Exchange})
	good := publishertest.Messages(d.RoutingKey, 2)
	unbound := publishertest.Messages("nobody.listens", 1)[0]
	batch := []outbox.Message{good[0], unbound, good[1]}
	errs := p.Publish(ctxFor(t, 30*time.Second), batch)
	if errs[0] != nil || errs[2] != nil {
		t.Fatalf("routable messages failed: %v, %v", errs[0], errs[2])
	}
	switch err := errs[1]; {
	case err == nil:
		t.Fatalf("unroutable message %s reported published", unbound.ID)
	case outbox.IsPermanent(err):
		t.Fatalf("unroutable message %s: %v is permanent; by default it must be retryable", unbound.ID, err)
	case !errors.Is(err, outboxamqp.ErrUnroutable) || !strings.Contains(err.Error(), "NO_ROUTE") || !strings.Contains(err.Error(), unbound.ID.String()):
		t.Fatalf("unroutable message %s: %v; want ErrUnroutable naming the message and NO_ROUTE", unbound.ID, err)
	}
	var pe *outboxamqp.PublishError
	if !errors.As(errs[1], &pe) || pe.ID != unbound.ID || pe.RoutingKey != "nobody.listens" || pe.Exchange != d.Exchange {
		t.Fatalf("error %v: want a *PublishError with the id, exchange and routing key", errs[1])
	}
	if _, err := consumer.Next(ctxFor(t, 30*time.Second), 2); err != nil {
		t.Fatal(err)
	}
}

// A missing exchange is a configuration problem: the batch fails retryably
// with the broker's 404, and once the exchange exists the same publisher
// delivers (the channel the broker closed is replaced).
func TestMissingExchangeFailsRetryablyAndPublishingResumesOnceItExists(t *testing.T) {
	t.Parallel()
	url := amqptest.URL(t)
	d := amqptest.Declare(t, url)
	consumer := amqptest.Consume(t, url, d.Queue)
	missing := d.Exchange + "-later"
	p := open(t, url, outboxamqp.Config{Exchange: missing}) // Dial would refuse it
	batch := publishertest.Messages(d.RoutingKey, 3)
	for i, err := range p.Publish(ctxFor(t, 30*time.Second), batch) {
		if err == nil || outbox.IsPermanent(err) || !strings.Contains(err.Error(), "404") {
			t.Fatalf("message %s to a missing exchange: %v; want a retryable error with the broker's 404", batch[i].ID, err)
		}
	}

	ch, err := amqptest.Dial(t, url).Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.ExchangeDeclare(missing, amqp.ExchangeDirect, false, true, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.QueueBind(d.Queue, d.RoutingKey, missing, false, nil); err != nil {
		t.Fatal(err)
	}
	for i, err := range p.Publish(ctxFor(t, 30*time.Second), batch) {
		if err != nil {
			t.Fatalf("message %s after the exchange was declared: %v", batch[i].ID, err)
		}
	}
	if _, err := consumer.Next(ctxFor(t, 30*time.Second), 3); err != nil {
		t.Fatal(err)
	}
}

// The connection drops while the broker holds a whole batch whose confirms
// have not reached the publisher: every message is reported retryable, none
// published, although the broker has them (the retry makes duplicates,
// which the consumer's inbox drops; counting them published could lose
// them). The next batch reconnects and goes through.
func TestMessagesInFlightWhenTheConnectionDropsAreRetryableNeverPublished(t *testing.T) {
	t.Parallel()
	d, consumer, proxy, p := behindProxy(t)

	proxy.Hold() // from now on the broker's confirms stay in the proxy
	batch := publishertest.Messages(d.RoutingKey, 50)
	result := make(chan []error, 1)
	go func() { result <- p.Publish(ctxFor(t, time.Minute), batch) }()
	if _, err := consumer.Next(ctxFor(t, 30*time.Second), len(batch)); err != nil {
		t.Fatalf("the broker did not get the batch: %v", err)
	}
	proxy.Cut()
	var errs []error
	select {
	case errs = <-result:
	case <-time.After(30 * time.Second):
		t.Fatal("Publish did not return within 30s of the connection dropping")
	}
	for i, err := range errs {
		switch {
		case err == nil:
			t.Errorf("message %s reported published, but its confirm never reached the publisher", batch[i].ID)
		case outbox.IsPermanent(err):
			t.Errorf("message %s: %v is permanent; a dropped connection must be retryable", batch[i].ID, err)
		case !errors.Is(err, outboxamqp.ErrNotConfirmed):
			t.Errorf("message %s: %v, want ErrNotConfirmed", batch[i].ID, err)
		}
	}

	again := publishertest.Messages(d.RoutingKey, 5)
	for i, err := range p.Publish(ctxFor(t, 30*time.Second), again) {
		if err != nil {
			t.Fatalf("message %s after the drop: %v; the publisher must reconnect", again[i].ID, err)
		}
	}
	if _, err := consumer.Next(ctxFor(t, 30*time.Second), len(again)); err != nil {
		t.Fatal(err)
	}
}

// A broker that stops confirming (here: confirms held back) costs a batch at
// most its context: the messages are retryable, and the channel with
// confirms still owed is not reused, so a late confirm or return cannot be
// taken for the next batch's.
func TestConfirmsThatDoNotComeFailTheBatchRetryablyAtTheDeadline(t *testing.T) {
	t.Parallel()
	d, consumer, proxy, p := behindProxy(t)

	proxy.Hold()
	// Unroutable, so that a return arrives for it once released.
	batch := publishertest.Messages("nobody.listens", 5)
	start := time.Now()
	errs := p.Publish(ctxFor(t, 500*time.Millisecond), batch)
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("Publish took %v with a 500ms context", took)
	}
	for i, err := range errs {
		if err == nil || outbox.IsPermanent(err) || !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("message %s without confirm: %v; want a retryable deadline error", batch[i].ID, err)
		}
	}
	proxy.Release()
	// The same ids again, now routable: the old channel's late returns must
	// not count against them.
	for i := range batch {
		batch[i].Topic = d.RoutingKey
	}
	for i, err := range p.Publish(ctxFor(t, 30*time.Second), batch) {
		if err != nil {
			t.Errorf("message %s on retry: %v", batch[i].ID, err)
		}
	}
	if _, err := consumer.Next(ctxFor(t, 30*time.Second), len(batch)); err != nil {
		t.Fatal(err)
	}
}

// A broker (or network path) that stops answering while a batch needs a new
// channel costs the batch its context, not the heartbeat timeout: opening a
// channel is an RPC amqp091 waits for without a deadline, and a relay whose
// Publish outlives its lease lets another relay publish the same messages.
// The connection is torn down, so later batches dial again.
func TestChannelOpenThatIsNeverAnsweredEndsWithTheContext(t *testing.T) {
	t.Parallel()
	d, consumer, proxy, p := behindProxy(t)

	proxy.Stall()
	// The first batch takes the idle channel and abandons it at its
	// deadline; the second needs a new one.
	for i, what := range []string{"on the idle channel", "on a new channel"} {
		batch := publishertest.Messages(d.RoutingKey, 3)
		start := time.Now()
		errs := p.Publish(ctxFor(t, 500*time.Millisecond), batch)
		if took := time.Since(start); took > 3*time.Second {
			t.Errorf("batch %d (%s) took %v with a 500ms context", i+1, what, took.Round(time.Millisecond))
		}
		for j, err := range errs {
			if err == nil || outbox.IsPermanent(err) || !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("batch %d (%s), message %s: %v; want a retryable deadline error", i+1, what, batch[j].ID, err)
			}
		}
	}
	// What the stall held is dropped, as by a network that never recovers.
	proxy.Cut()
	batch := publishertest.Messages(d.RoutingKey, 3)
	waitFor(t, 30*time.Second, "a batch to go through after the stall", func() bool {
		for _, err := range p.Publish(ctxFor(t, 5*time.Second), batch) {
			if err != nil {
				return false
			}
		}
		return true
	})
	if _, err := consumer.Next(ctxFor(t, 30*time.Second), len(batch)); err != nil {
		t.Fatal(err)
	}
}

// Relay workers publish concurrently through one publisher: each batch gets
// its own channel and its own outcomes.
func TestConcurrentBatchesAreConfirmedIndependently(t *testing.T) {
	t.Parallel()
	url := amqptest.URL(t)
	d := amqptest.Declare(t, url)
	consumer := amqptest.Consume(t, url, d.Queue)
	p := dial(t, url, outboxamqp.Config{Exchange: d.Exchange})
	const workers, batches, size = 6, 5, 20
	var wg sync.WaitGroup
	var mu sync.Mutex
	var unbound []error
	for range workers {
		wg.Go(func() {
			for range batches {
				batch := publishertest.Messages(d.RoutingKey, size)
				batch[size/2].Topic = "nobody.listens" // one unroutable message per batch
				errs := p.Publish(ctxFor(t, 30*time.Second), batch)
				for i, err := range errs {
					if i == size/2 {
						mu.Lock()
						unbound = append(unbound, err)
						mu.Unlock()
						continue
					}
					if err != nil {
						t.Errorf("message %s: %v", batch[i].ID, err)
					}
				}
			}
		})
	}
	wg.Wait()
	for _, err := range unbound {
		if !errors.Is(err, outboxamqp.ErrUnroutable) {
			t.Errorf("unroutable message: %v, want ErrUnroutable", err)
		}
	}
	if _, err := consumer.Next(ctxFor(t, 30*time.Second), workers*batches*(size-1)); err != nil {
		t.Fatal(err)
	}
}

// Errors name the broker, never the password: connection errors, the
// broker's refusal of the credentials, and URLs that do not parse.
func TestErrorsNameTheBrokerWithoutThePassword(t *testing.T) {
	t.Parallel()
	url := amqptest.URL(t)
	const secret = "s3cret-pw"

	closed := strings.Replace(amqptest.ClosedURL(t), "guest:guest@", "relay:"+secret+"@", 1)
	p := open(t, closed, outboxamqp.Config{})
	addr := closed[len("amqp://relay:"+secret+"@"):]
	errs := p.Publish(ctxFor(t, 10*time.Second), publishertest.Messages("t", 1))
	if msg := errs[0].Error(); !strings.Contains(msg, "amqp://relay@"+addr) || strings.Contains(msg, secret) {
		t.Errorf("error %q: want the broker amqp://relay@%s and no password", msg, addr)
	}

	wrong := strings.Replace(url, "guest:guest@", "guest:"+secret+"@", 1)
	_, err := outboxamqp.Dial(wrong, outboxamqp.Config{Logger: relaytest.TestLogger(t)})
	if err == nil || strings.Contains(err.Error(), secret) || !strings.Contains(err.Error(), "amqp://guest@") {
		t.Errorf("Dial with a wrong password: %v; want an error naming amqp://guest@... without the password", err)
	}

	for _, raw := range []string{
		"amqp://user:" + secret + "@host:notaport/",
		"amqp://user:" + secret + "@ho st/",
		"http://user:" + secret + "@host/",
	} {
		_, err := outboxamqp.Open(raw, outboxamqp.Config{})
		if err == nil || strings.Contains(err.Error(), secret) {
			t.Errorf("Open(%q): %v; want an error without the password", strings.ReplaceAll(raw, secret, "***"), err)
		}
	}
}

func TestConfigErrorsNameTheFieldAndTheFix(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		cfg   outboxamqp.Config
		field string
	}{
		{outboxamqp.Config{ConfirmTimeout: -1}, "outboxamqp.Config.ConfirmTimeout"},
		{outboxamqp.Config{DialTimeout: -1}, "outboxamqp.Config.DialTimeout"},
		{outboxamqp.Config{Exchange: strings.Repeat("x", 256)}, "outboxamqp.Config.Exchange"},
	} {
		err := tc.cfg.Validate()
		var ce *outbox.ConfigError
		if !errors.As(err, &ce) || ce.Field != tc.field || ce.Fix == "" || !errors.Is(err, outbox.ErrInvalidConfig) {
			t.Errorf("Validate(%+v) = %v; want a ConfigError for %s", tc.cfg, err, tc.field)
		}
		if _, err := outboxamqp.Open("amqp://localhost/", tc.cfg); !errors.As(err, &ce) {
			t.Errorf("Open with %s invalid: %v, want the ConfigError", tc.field, err)
		}
	}
}

// Messages the relay cannot send at all fail alone and permanently: no id,
// or a routing key AMQP cannot carry.
func TestMessagesAMQPCannotCarryFailPermanentlyAndAlone(t *testing.T) {
	t.Parallel()
	url := amqptest.URL(t)
	d := amqptest.Declare(t, url)
	consumer := amqptest.Consume(t, url, d.Queue)
	p := dial(t, url, outboxamqp.Config{Exchange: d.Exchange})
	batch := publishertest.Messages(d.RoutingKey, 4)
	batch[1].ID = uuid.Nil
	batch[2].Topic = strings.Repeat("k", 256)
	errs := p.Publish(ctxFor(t, 30*time.Second), batch)
	if errs[0] != nil || errs[3] != nil {
		t.Fatalf("valid messages failed: %v, %v", errs[0], errs[3])
	}
	if !outbox.IsPermanent(errs[1]) {
		t.Errorf("message without id: %v, want permanent", errs[1])
	}
	if !outbox.IsPermanent(errs[2]) || !errors.Is(errs[2], outboxamqp.ErrInvalidRoutingKey) {
		t.Errorf("256-byte routing key: %v, want permanent ErrInvalidRoutingKey", errs[2])
	}
	if _, err := consumer.Next(ctxFor(t, 30*time.Second), 2); err != nil {
		t.Fatal(err)
	}
}

// Dial checks the configuration against the broker: a missing exchange or
// refused credentials fail it, naming the broker without the password.
func TestDialFailsForAMissingExchangeOrWrongCredentials(t *testing.T) {
	t.Parallel()
	url := amqptest.URL(t)
	d := amqptest.Declare(t, url)
	_, err := outboxamqp.Dial(url, outboxamqp.Config{Exchange: d.Exchange + "-missing", Logger: relaytest.TestLogger(t)})
	var amqpErr *amqp.Error
	if !errors.As(err, &amqpErr) || amqpErr.Code != amqp.NotFound || !strings.Contains(err.Error(), d.Exchange+"-missing") {
		t.Errorf("Dial with a missing exchange: %v; want the broker's 404 naming the exchange", err)
	}
	_, err = outboxamqp.Dial(strings.Replace(url, "guest:guest@", "guest:wrong-pw@", 1), outboxamqp.Config{Logger: relaytest.TestLogger(t)})
	if !errors.As(err, &amqpErr) || amqpErr.Code != amqp.AccessRefused || strings.Contains(err.Error(), "wrong-pw") {
		t.Errorf("Dial with a wrong password: %v; want the broker's 403 without the password", err)
	}
	p := dial(t, url, outboxamqp.Config{Exchange: d.Exchange})
	if err := p.Ping(ctxFor(t, 10*time.Second)); err != nil {
		t.Errorf("Ping of a good configuration: %v", err)
	}
}

// behindProxy declares an exchange and queue, consumes the queue directly,
// and dials a publisher through a proxy the test can stall or hold.
func behindProxy(t *testing.T) (amqptest.Destination, *amqptest.Consumer, *proxytest.Proxy, *outboxamqp.Publisher) {
	t.Helper()
	url := amqptest.URL(t)
	d := amqptest.Declare(t, url)
	consumer := amqptest.Consume(t, url, d.Queue)
	proxy := proxytest.ForURL(t, url)
	return d, consumer, proxy, dial(t, proxy.URL(url), outboxamqp.Config{Exchange: d.Exchange})
}

// With no broker to connect to, nothing of a batch leaves: every message
// fails as unavailable, so the relay counts no attempt however long the
// outage lasts.
func TestNoBrokerToConnectToIsUnavailable(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close() // nothing listens there now
	p, err := outboxamqp.Open("amqp://guest:guest@"+addr+"/", outboxamqp.Config{Exchange: "orders", Logger: relaytest.TestLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	batch := publishertest.Messages("orders.created", 3)
	for i, err := range p.Publish(ctxFor(t, 5*time.Second), batch) {
		if !outbox.IsUnavailable(err) || outbox.IsPermanent(err) {
			t.Errorf("message %s with no broker: %v; want an error marked outbox.Unavailable", batch[i].ID, err)
		}
	}
}
