package main

import (
	"bytes"
	"context"
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/amqptest"
	"github.com/go-outbox/outbox/internal/pgtest"
	"github.com/go-outbox/outbox/outboxamqp"
	"github.com/go-outbox/outbox/publishertest"
)

func TestAMQPURLKeepsTheClientParametersAndTakesOutOurs(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		raw, url, exchange, key string
		permanent               bool
		confirm                 time.Duration
	}{
		{raw: "amqp://u:p@h:5672/", url: "amqp://u:p@h:5672/"},
		{raw: "amqp://u:p%40ss@h/prod?exchange=events", url: "amqp://u:p%40ss@h/prod", exchange: "events"},
		{raw: "AMQPS://h/%2F?exchange=e&routing_key=all&unroutable=dead&heartbeat=5&confirm_timeout=3s",
			url: "amqps://h/%2F?heartbeat=5", exchange: "e", key: "all", permanent: true, confirm: 3 * time.Second},
		{raw: "amqp://h?unroutable=retry&certfile=/c.pem&keyfile=/k.pem", url: "amqp://h?certfile=%2Fc.pem&keyfile=%2Fk.pem"},
	} {
		got, err := parseAMQPURL(tc.raw)
		if err != nil {
			t.Errorf("parseAMQPURL(%q): %v", tc.raw, err)
			continue
		}
		key := ""
		if got.cfg.RoutingKey != nil {
			key = got.cfg.RoutingKey(outbox.Message{Topic: "topic"})
		}
		if got.url != tc.url || got.cfg.Exchange != tc.exchange || key != tc.key ||
			got.cfg.UnroutablePermanent != tc.permanent || got.cfg.ConfirmTimeout != tc.confirm {
			t.Errorf("parseAMQPURL(%q) = url %q, exchange %q, routing key %q, unroutable permanent %v, confirm timeout %v; want %q, %q, %q, %v, %v",
				tc.raw, got.url, got.cfg.Exchange, key, got.cfg.UnroutablePermanent, got.cfg.ConfirmTimeout,
				tc.url, tc.exchange, tc.key, tc.permanent, tc.confirm)
		}
	}
}

// Not parallel: credentials in a --publisher URL are added to the command's
// list of secrets, which parallel tests read without a lock.
func TestAMQPURLErrorsSayWhatToWriteAndHideThePassword(t *testing.T) {
	for _, tc := range []struct{ raw, want string }{
		{"amqp://u:s3cret@/vhost", "no broker address"},
		{"amqp://u:s3cret@h?exchange=x&routing_key=", "routing_key is empty"},
		{"amqp://u:s3cret@h?unroutable=drop", "unroutable="},
		{"amqp://u:s3cret@h?confirm_timeout=soon", "confirm_timeout="},
		{"amqp://u:s3cret@h?exchnage=x", "unknown parameter"},
		{"amqp://u:s3cret@h?exchange=" + strings.Repeat("x", 256), "exchange:"},
		{"amqp://u:s3cret@h:port/", "percent-encode"},
	} {
		code, _, stderr := cli(t, "relay", "--publisher", tc.raw, "--database-url", "postgres://x@127.0.0.1:1/db")
		if code != 2 || !strings.Contains(stderr, tc.want) {
			t.Errorf("relay --publisher %s: exit %d, stderr %q; want exit 2 and %q", tc.raw, code, stderr, tc.want)
		}
		if strings.Contains(stderr, "s3cret") {
			t.Errorf("relay --publisher %s printed the password: %q", tc.raw, stderr)
		}
	}
}

// Not parallel: see TestAMQPURLErrorsSayWhatToWriteAndHideThePassword.
func TestRelayRefusesToStartWhenRabbitMQRefusesTheConfiguration(t *testing.T) {
	url := amqptest.URL(t)
	d := amqptest.Declare(t, url)
	uri, err := amqp.ParseURI(url)
	if err != nil {
		t.Fatal(err)
	}
	broker := net.JoinHostPort(uri.Host, strconv.Itoa(uri.Port))
	for _, tc := range []struct{ name, publisher, want string }{
		{"wrong password", strings.Replace(url, "guest:guest@", "guest:s3cret-pw@", 1) + "?exchange=" + d.Exchange, "403"},
		{"missing exchange", url + "?exchange=" + d.Exchange + "-missing", `exchange "` + d.Exchange + `-missing"`},
	} {
		code, _, stderr := cli(t, "relay", "--publisher", tc.publisher, "--database-url", "postgres://x@127.0.0.1:1/db")
		// The broker is named by its address (the user name may be
		// redacted too: with guest:guest it equals the password).
		if code != 1 || !strings.Contains(stderr, tc.want) || !strings.Contains(stderr, "@"+broker+"/") {
			t.Errorf("%s: exit %d, stderr %q; want exit 1 naming the broker %s without password, and %q", tc.name, code, stderr, broker, tc.want)
		}
		if strings.Contains(stderr, "s3cret-pw") {
			t.Errorf("%s: the password was printed: %q", tc.name, stderr)
		}
	}
}

func TestRelayPublishesToRabbitMQ(t *testing.T) {
	t.Parallel()
	dbURL, schema := pgtest.URL(t), pgtest.Schema(t)
	amqpURL := amqptest.URL(t)
	d := amqptest.Declare(t, amqpURL)
	consumer := amqptest.Consume(t, amqpURL, d.Queue)

	db := []string{"--database-url", dbURL, "--schema", schema}
	with := func(args ...string) []string { return append(append([]string{}, args...), db...) }
	mustCLI(t, with("migrate", "up")...)
	var ids []string
	for _, key := range []string{"o-1", "o-2", "o-1"} {
		ids = append(ids, strings.TrimSpace(mustCLI(t, with("send", "--topic", "orders.created", "--key", key,
			"--header", "content-type=application/json", "--payload", `{"key":"`+key+`"}`)...)))
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	relayCtx, stopRelay := context.WithCancel(ctx)
	var stderr bytes.Buffer
	done := make(chan int, 1)
	// Every topic goes to the queue's binding key.
	publisher := amqpURL + "?exchange=" + d.Exchange + "&routing_key=" + d.RoutingKey
	go func() {
		done <- run(relayCtx, with("relay", "--publisher", publisher, "--poll-interval", "100ms"), &bytes.Buffer{}, &stderr)
	}()
	got, err := consumer.Next(ctx, len(ids))
	stopRelay()
	if code := <-done; code != 0 {
		t.Errorf("relay exited with %d: %s", code, stderr.String())
	}
	if err != nil {
		t.Fatalf("%v; relay stderr: %s", err, stderr.String())
	}
	var gotIDs []string
	for _, dv := range got {
		m, err := outboxamqp.FromDelivery(dv)
		if err != nil {
			t.Fatal(err)
		}
		if m.Topic != "orders.created" || dv.RoutingKey != d.RoutingKey || m.Headers["content-type"] != "application/json" || string(m.Payload) != `{"key":"`+m.Key+`"}` {
			t.Errorf("message %s arrived as topic %q, routing key %q, headers %v, payload %q", m.ID, m.Topic, dv.RoutingKey, m.Headers, m.Payload)
		}
		gotIDs = append(gotIDs, m.ID.String())
	}
	slices.Sort(gotIDs)
	slices.Sort(ids)
	if !slices.Equal(gotIDs, ids) {
		t.Fatalf("RabbitMQ received messages %v, want %v", gotIDs, ids)
	}
}

// The relay starts while RabbitMQ is unreachable: its batches fail
// retryably until the broker is there.
func TestAMQPPublisherStartsWhileTheBrokerIsUnreachable(t *testing.T) {
	t.Parallel()
	pub, err := openAMQP(amqptest.ClosedURL(t) + "?exchange=events")
	if err != nil {
		t.Fatalf("openAMQP with no broker: %v", err)
	}
	defer pub.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if errs := pub.Publish(ctx, publishertest.Messages("created", 1)); errs[0] == nil || outbox.IsPermanent(errs[0]) {
		t.Fatalf("publish with no broker: %v, want a retryable error", errs[0])
	}
}
