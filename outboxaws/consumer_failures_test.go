package outboxaws_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/awstest"
	"github.com/go-outbox/outbox/outboxaws"
	"github.com/go-outbox/outbox/publishertest"
)

// A queue that does not exist is logged at ERROR level with the fix once,
// however often the consumer tries again, and readiness says so; once the
// queue is created the consumer receives from it, logs that it is back and
// is ready.
func TestAMissingQueueIsLoggedOnceWithTheFixAndReadinessSaysSoUntilItExists(t *testing.T) {
	t.Parallel()
	srv := awstest.Start(t)
	c := srv.SQSConsumerClient(t)
	name := awstest.Name("outboxaws-missing-")
	queue := srv.URL + "/" + awstest.AccountID + "/" + name
	r := startConsume(t, c, outboxaws.ConsumerSQSConfig{Queue: queue, Name: "billing", ParkQueue: queue + "-parked"}, nil)
	r.WaitFor(t, "several receives failing", func() bool { return r.CountLogs(slog.LevelDebug, "cannot receive") >= 3 })
	if n := r.CountLogs(slog.LevelError, "create the queue", name); n != 1 {
		t.Errorf("the missing queue was logged at ERROR level %d times, want once; logs:\n%s", n, r.Logs)
	}
	if err := r.ready.Ready(); err == nil || !strings.Contains(err.Error(), "create the queue") || !strings.Contains(err.Error(), name) {
		t.Errorf("Ready() = %v while the queue is missing, want why, with the fix", err)
	}
	out, err := c.CreateQueue(ctxFor(t, 5*time.Second), &sqs.CreateQueueInput{QueueName: aws.String(name)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = c.DeleteQueue(context.Background(), &sqs.DeleteQueueInput{QueueUrl: out.QueueUrl}) })
	batch := publishertest.Messages("orders.created", 1)
	publishSQS(t, srv, aws.ToString(out.QueueUrl), batch...)
	r.WaitHandled(t, batch...)
	r.WaitFor(t, "ready", func() bool { return r.ready.Ready() == nil })
	if !r.Logs.Has(slog.LevelInfo, "is back") {
		t.Errorf("no INFO log that the consumer is back; logs:\n%s", r.Logs)
	}
}

// Refused credentials are logged at ERROR level with the permissions to
// grant, once, and the consumer goes on trying.
func TestAccessDeniedIsLoggedOnceWithThePermissionsToGrant(t *testing.T) {
	t.Parallel()
	srv := awstest.Start(t)
	queue := srv.Queue(t, "outboxaws-consume-", nil)
	srv.FailRequests(func(action string) (string, int) {
		if action == "ReceiveMessage" {
			return "AccessDenied", 403
		}
		return "", 0
	})
	r := startConsume(t, srv.SQSConsumerClient(t), outboxaws.ConsumerSQSConfig{Queue: queue, Name: "billing", ParkQueue: queue + "-parked"}, nil)
	r.WaitFor(t, "several receives refused", func() bool { return r.CountLogs(slog.LevelDebug, "cannot receive") >= 3 })
	if n := r.CountLogs(slog.LevelError, "sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:ChangeMessageVisibility"); n != 1 {
		t.Errorf("access denied was logged at ERROR level with the permissions %d times, want once; logs:\n%s", n, r.Logs)
	}
	if err := r.ready.Ready(); err == nil || !strings.Contains(err.Error(), "credentials") {
		t.Errorf("Ready() = %v while access is denied, want why", err)
	}
	srv.FailRequests(nil)
	r.WaitFor(t, "ready once access is granted", func() bool { return r.ready.Ready() == nil })
}

// SQS unreachable passes by itself: WARN, no ERROR, readiness says so, and
// ConsumeSQS goes on until its context ends.
func TestUnreachableSQSIsAWarningAndReadinessSaysSo(t *testing.T) {
	t.Parallel()
	c := sqs.New(sqs.Options{
		BaseEndpoint: aws.String(awstest.ClosedURL(t)), Region: awstest.Region,
		Credentials: credentials.NewStaticCredentialsProvider("test", "test", ""),
	}, awstest.SQSProtocol, func(o *sqs.Options) { o.RetryMaxAttempts = 1 })
	queue := "http://localhost/" + awstest.AccountID + "/orders"
	r := startConsume(t, c, outboxaws.ConsumerSQSConfig{Queue: queue, Name: "billing", ParkQueue: queue + "-parked"}, nil)
	r.WaitFor(t, "several receives failing", func() bool { return r.CountLogs(slog.LevelWarn, "cannot reach SQS") >= 3 })
	if r.CountLogs(slog.LevelError) != 0 {
		t.Errorf("an unreachable SQS was logged at ERROR level; logs:\n%s", r.Logs)
	}
	if err := r.ready.Ready(); err == nil || !strings.Contains(err.Error(), "unreachable") {
		t.Errorf("Ready() = %v while SQS is unreachable, want why", err)
	}
}

// ConsumeSQS returns nil promptly when its context ends, a long poll of 20s
// in flight, and readiness then says it stopped.
func TestConsumeSQSReturnsPromptlyWhenItsContextEndsDuringALongPoll(t *testing.T) {
	t.Parallel()
	srv := awstest.Start(t)
	queue := srv.Queue(t, "outboxaws-consume-", nil)
	polls := &longPolls{next: srv.SQSConsumerClient(t).Options().HTTPClient}
	c := sqs.New(srv.SQSConsumerClient(t).Options(), awstest.SQSProtocol, func(o *sqs.Options) { o.HTTPClient = polls })
	r := startConsume(t, c, outboxaws.ConsumerSQSConfig{Queue: queue, Name: "billing", ParkQueue: queue + "-parked", WaitTime: 20 * time.Second}, nil)
	r.WaitFor(t, "a 20s long poll in flight", func() bool { return polls.inFlight.Load() > 0 })
	start := time.Now()
	if err := r.Stop(t); err != nil {
		t.Fatalf("ConsumeSQS: %v", err)
	}
	took := time.Since(start)
	t.Logf("ConsumeSQS returned %v after its context ended", took)
	if took > 2*time.Second {
		t.Errorf("ConsumeSQS took %v to return after its context ended, want well under the 20s long poll", took)
	}
	if err := r.ready.Ready(); err == nil || !strings.Contains(err.Error(), "stopped") {
		t.Errorf("Ready() = %v after ConsumeSQS returned, want stopped", err)
	}
}

// On a FIFO queue a group's messages reach the handler in the order sent,
// a failing one retried in place before the next.
func TestAFIFOQueuesGroupIsHandledInOrderAcrossARetry(t *testing.T) {
	t.Parallel()
	srv := awstest.Start(t)
	queue := srv.Queue(t, "outboxaws-consume-.fifo", map[string]string{"FifoQueue": "true"})
	var batch []outbox.Message
	for i := range 12 {
		m := publishertest.Messages("orders.created", 1)[0]
		m.Key = fmt.Sprintf("k%d", i%2)
		batch = append(batch, m)
	}
	publishSQS(t, srv, queue, batch[:10]...)
	publishSQS(t, srv, queue, batch[10:]...)
	r := startConsume(t, srv.SQSConsumerClient(t), outboxaws.ConsumerSQSConfig{Queue: queue, Name: "billing", ParkQueue: queue + "-parked", VisibilityTimeout: time.Second, BackoffMax: 200 * time.Millisecond},
		func(m outbox.Message, try int) error {
			if m.ID == batch[2].ID && try < 3 {
				return errors.New("database busy (injected)")
			}
			return nil
		})
	r.WaitHandled(t, batch...)
	got := map[string][]string{}
	for _, id := range r.HandledIDs() {
		for _, m := range batch {
			if m.ID == id {
				got[m.Key] = append(got[m.Key], id.String())
			}
		}
	}
	want := map[string][]string{}
	for _, m := range batch {
		want[m.Key] = append(want[m.Key], m.ID.String())
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("handled per group %v, want each once in the order sent %v", got, want)
	}
}

// Each configuration mistake is refused before anything is received, with
// a *outbox.ConfigError naming the field.
func TestConsumeSQSRefusesABadConfigurationNamingTheField(t *testing.T) {
	t.Parallel()
	ok := outboxaws.ConsumerSQSConfig{Queue: "orders", Name: "billing", ParkQueue: "orders-parked"}
	for _, tc := range []struct {
		field  string
		change func(*outboxaws.ConsumerSQSConfig)
	}{
		{"Queue", func(c *outboxaws.ConsumerSQSConfig) { c.Queue = "" }},
		{"Name", func(c *outboxaws.ConsumerSQSConfig) { c.Name = "" }},
		{"ParkQueue", func(c *outboxaws.ConsumerSQSConfig) { c.ParkQueue = "" }},
		{"ParkQueue", func(c *outboxaws.ConsumerSQSConfig) { c.ParkQueue = "orders" }},
		{"MaxDeliver", func(c *outboxaws.ConsumerSQSConfig) { c.MaxDeliver = -1 }},
		{"VisibilityTimeout", func(c *outboxaws.ConsumerSQSConfig) { c.VisibilityTimeout = 1500 * time.Millisecond }},
		{"VisibilityTimeout", func(c *outboxaws.ConsumerSQSConfig) { c.VisibilityTimeout = 13 * time.Hour }},
		{"WaitTime", func(c *outboxaws.ConsumerSQSConfig) { c.WaitTime = 21 * time.Second }},
		{"WaitTime", func(c *outboxaws.ConsumerSQSConfig) { c.WaitTime = -time.Second }},
		{"Concurrency", func(c *outboxaws.ConsumerSQSConfig) { c.Concurrency = -2 }},
		{"BackoffBase", func(c *outboxaws.ConsumerSQSConfig) { c.BackoffBase = -time.Millisecond }},
		{"BackoffMax", func(c *outboxaws.ConsumerSQSConfig) { c.VisibilityTimeout, c.BackoffMax = time.Second, time.Second }},
	} {
		cfg := ok
		tc.change(&cfg)
		err := outboxaws.ConsumeSQS(t.Context(), &sqs.Client{}, cfg, func(context.Context, outbox.Message) error { return nil })
		var cfgErr *outbox.ConfigError
		if !errors.As(err, &cfgErr) || cfgErr.Field != "outboxaws.ConsumerSQSConfig."+tc.field || cfgErr.Fix == "" {
			t.Errorf("ConsumeSQS with a bad %s: %v; want a *outbox.ConfigError naming outboxaws.ConsumerSQSConfig.%s with a fix", tc.field, err, tc.field)
		}
	}
	var cfgErr *outbox.ConfigError
	if err := outboxaws.ConsumeSQS(t.Context(), nil, ok, nil); !errors.As(err, &cfgErr) {
		t.Errorf("ConsumeSQS with a nil client: %v, want a *outbox.ConfigError", err)
	}
}

// longPolls counts the ReceiveMessage requests with a WaitTimeSeconds of 20
// in flight.
type longPolls struct {
	next     sqs.HTTPClient
	inFlight atomic.Int32
}

func (p *longPolls) Do(req *http.Request) (*http.Response, error) {
	body, err := io.ReadAll(req.Body)
	if err != nil {
		return nil, err
	}
	req.Body = io.NopCloser(bytes.NewReader(body))
	if bytes.Contains(body, []byte("Action=ReceiveMessage")) && bytes.Contains(body, []byte("WaitTimeSeconds=20")) {
		p.inFlight.Add(1)
		defer p.inFlight.Add(-1)
	}
	return p.next.Do(req)
}
