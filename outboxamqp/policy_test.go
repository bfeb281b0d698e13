package outboxamqp_test

import (
	"bytes"
	"log/slog"
	neturl "net/url"
	"os"
	"os/exec"
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
	"github.com/go-outbox/outbox/relaytest"
)

// Credentials the broker refuses never get better by waiting: the batch is
// not "unavailable" (which would retry it forever without counting), but a
// retryable failure counting an attempt, with the fix logged and no
// password anywhere.
func TestRefusedLoginIsRetryableNotUnavailableAndLogsTheFix(t *testing.T) {
	t.Parallel()
	// The broker's user with a password it refuses, whatever the URL's
	// user (AMQP's default, guest, when it names none).
	u, err := neturl.Parse(amqptest.URL(t))
	if err != nil {
		t.Fatalf("%s cannot be parsed as a URL", amqptest.EnvURL)
	}
	user := "guest"
	if u.User != nil && u.User.Username() != "" {
		user = u.User.Username()
	}
	u.User = neturl.UserPassword(user, "wr0ng-pw")
	bad := u.String()
	logs := &relaytest.LogCapture{}
	p := open(t, bad, outboxamqp.Config{Logger: slog.New(logs)})
	batch := publishertest.Messages("orders.created", 2)
	for i, err := range p.Publish(ctxFor(t, 10*time.Second), batch) {
		if err == nil || outbox.IsUnavailable(err) || outbox.IsPermanent(err) {
			t.Fatalf("message %s with a wrong password: %v; want a retryable error that counts an attempt", batch[i].ID, err)
		}
		if strings.Contains(err.Error(), "wr0ng-pw") {
			t.Errorf("message %s: the error shows the password: %v", batch[i].ID, err)
		}
	}
	if !logs.Has(slog.LevelError, "user and password") {
		t.Errorf("no ERROR log with the fix; logged:\n%s", logs)
	}
	if strings.Contains(logs.String(), "wr0ng-pw") {
		t.Errorf("the password was logged:\n%s", logs)
	}
}

// A missing exchange fails the batch retryably (see
// TestMissingExchangeFailsRetryablyAndPublishingResumesOnceItExists) and
// tells the operator at ERROR level what to declare.
func TestMissingExchangeLogsTheFix(t *testing.T) {
	t.Parallel()
	url := amqptest.URL(t)
	logs := &relaytest.LogCapture{}
	missing := "outbox-test-missing-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	p := open(t, url, outboxamqp.Config{Exchange: missing, Logger: slog.New(logs)})
	batch := publishertest.Messages("orders.created", 2)
	for i, err := range p.Publish(ctxFor(t, 10*time.Second), batch) {
		if err == nil || outbox.IsUnavailable(err) || outbox.IsPermanent(err) {
			t.Fatalf("message %s to a missing exchange: %v; want a retryable error that counts an attempt", batch[i].ID, err)
		}
	}
	if !logs.Has(slog.LevelError, missing, "declare") {
		t.Errorf("no ERROR log naming exchange %s and the fix; logged:\n%s", missing, logs)
	}
}

// RabbitMQ closes the channel when a message is over its max_message_size,
// which would fail every message of the batch. The oversized messages alone
// fail, permanently; the others are published.
//
// Not parallel: it lowers the broker's limit for every channel opened
// meanwhile, so it takes the broker for itself.
func TestMessagesOverTheBrokersMaxMessageSizeArePermanentAndSpareTheirBatch(t *testing.T) {
	b := amqptest.Restartable(t) // only for exclusive use of the broker: it is not restarted
	const limit = 64 << 10
	setMaxMessageSize(t, limit)
	d := amqptest.Declare(t, b.URL)
	consumer := amqptest.Consume(t, b.URL, d.Queue)
	p := open(t, b.URL, outboxamqp.Config{Exchange: d.Exchange})

	batch := publishertest.Messages(d.RoutingKey, 6)
	oversized := map[int]bool{1: true, 4: true}
	for i := range oversized {
		batch[i].Payload = bytes.Repeat([]byte{'x'}, limit+1)
	}
	var want []string
	for i, err := range p.Publish(ctxFor(t, 10*time.Second), batch) {
		switch {
		case oversized[i] && !outbox.IsPermanent(err):
			t.Errorf("message %s over max_message_size: %v; want a permanent error", batch[i].ID, err)
		case oversized[i] && !strings.Contains(err.Error(), "max_message_size"):
			t.Errorf("message %s: %v does not name max_message_size", batch[i].ID, err)
		case !oversized[i] && err != nil:
			t.Errorf("message %s of the same batch, within the limit: %v; want it published", batch[i].ID, err)
		case !oversized[i]:
			want = append(want, batch[i].ID.String())
		}
	}
	// A later batch meets the same limit.
	again := publishertest.Messages(d.RoutingKey, 2)
	again[0].Payload = bytes.Repeat([]byte{'x'}, limit+1)
	errs := p.Publish(ctxFor(t, 10*time.Second), again)
	if !outbox.IsPermanent(errs[0]) || errs[1] != nil {
		t.Errorf("next batch: %v; want the oversized message permanent and the other published", errs)
	}
	want = append(want, again[1].ID.String())

	var got []string
	err := consumer.WaitFor(ctxFor(t, 10*time.Second), func(all []amqp.Delivery) bool {
		got = got[:0]
		for _, d := range all {
			if !slices.Contains(got, d.MessageId) {
				got = append(got, d.MessageId)
			}
		}
		return len(got) >= len(want)
	})
	slices.Sort(got)
	slices.Sort(want)
	if err != nil || !slices.Equal(got, want) {
		t.Fatalf("queue holds messages %v (%v), want %v", got, err, want)
	}
}

// setMaxMessageSize sets the broker's max_message_size (read by every
// channel when it opens) to n bytes until the test ends.
func setMaxMessageSize(t *testing.T, n int) {
	t.Helper()
	base := os.Getenv("TEST_RABBITMQ_BASE")
	if base == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("TEST_RABBITMQ_BASE is not set; scripts/test sets it with the broker it starts")
		}
		t.Skip("TEST_RABBITMQ_BASE is not set: run this test through scripts/test or after eval \"$(scripts/rabbitmq-up)\"")
	}
	eval := func(expr string) string {
		cmd := exec.Command("bash", "-c", `. "$TEST_RABBITMQ_BASE/env" && exec /usr/lib/rabbitmq/bin/rabbitmqctl eval "$0"`, expr)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("rabbitmqctl eval %s: %v\n%s", expr, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	// One call each way: every rabbitmqctl run starts an Erlang VM (about
	// a second).
	old := eval(`{ok, Old} = application:get_env(rabbit, max_message_size), ok = application:set_env(rabbit, max_message_size, ` + strconv.Itoa(n) + `), Old.`)
	t.Cleanup(func() { eval("application:set_env(rabbit, max_message_size, " + old + ").") })
}
