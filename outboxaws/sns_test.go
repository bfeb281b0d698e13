package outboxaws_test

import (
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sns"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/awstest"
	"github.com/go-outbox/outbox/outboxaws"
	"github.com/go-outbox/outbox/publishertest"
	"github.com/go-outbox/outbox/relaytest"
)

// newSNS returns a publisher on srv's client for topic, closed when the test
// ends.
func newSNS(t *testing.T, srv *awstest.Server, topic string, cfg outboxaws.Config) *outboxaws.SNSPublisher {
	t.Helper()
	p, err := outboxaws.NewSNS(srv.SNSClient(), topic, cfg)
	if err != nil {
		t.Fatalf("NewSNS: %v", err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// snsHarness gives the conformance suite a fresh topic on goaws with a queue
// subscribed with raw message delivery, read back. goaws refuses nothing an
// SNS publish carries, so the invalid message is one the publisher refuses
// before sending: a header SNS would refuse as an attribute name.
func snsHarness(t *testing.T) publishertest.Harness {
	srv := awstest.Start(t)
	topic := srv.Topic(t, "outboxaws-snsconf-")
	queue := srv.Queue(t, "outboxaws-snsconf-", nil)
	srv.Subscribe(t, topic, queue, true)
	const msgTopic = "orders.created"
	return publishertest.Harness{
		Publisher: newSNS(t, srv, topic, outboxaws.Config{}),
		Topic:     msgTopic,
		Receive:   receiver(srv, queue),
		Unreachable: func(t *testing.T) outbox.Publisher {
			p, err := outboxaws.OpenSNS(ctxFor(t, 5*time.Second), topic, outboxaws.Config{}, func(o *sns.Options) {
				o.BaseEndpoint = aws.String(awstest.ClosedURL(t))
				// Not the SDK's chain, which would ask the machine's
				// instance metadata service.
				o.Credentials = credentials.NewStaticCredentialsProvider("test", "test", "")
			})
			if err != nil {
				t.Fatalf("OpenSNS with no server: %v", err)
			}
			return p
		},
		Invalid: func() outbox.Message {
			m := publishertest.Messages(msgTopic, 1)[0]
			m.Headers = map[string]string{"has space": "x"}
			return m
		},
	}
}

func TestSNSPublisherConformance(t *testing.T) {
	t.Parallel()
	publishertest.Run(t, snsHarness)
}

// A queue subscribed with raw delivery gets the payload as the body and the
// id, topic, key and headers as attributes under their own names, as from
// the SQS publisher.
func TestSNSMessageReachesARawSubscriptionWithPayloadAsBodyAndAttributes(t *testing.T) {
	t.Parallel()
	srv := awstest.Start(t)
	topic := srv.Topic(t, "outboxaws-snsshape-")
	queue := srv.Queue(t, "outboxaws-snsshape-", nil)
	srv.Subscribe(t, topic, queue, true)
	p := newSNS(t, srv, topic, outboxaws.Config{})
	m := publishertest.Messages("orders.created", 1)[0]
	m.Key, m.Headers = "order-7", map[string]string{"traceparent": "00-abc-01"}
	m.Payload = []byte(`{"total":12}`)
	if err := p.Publish(ctxFor(t, 10*time.Second), []outbox.Message{m})[0]; err != nil {
		t.Fatalf("Publish %s: %v", m.ID, err)
	}
	ms, err := awstest.Receive(ctxFor(t, 10*time.Second), srv.SQSClient(), queue, 1)
	if err != nil {
		t.Fatal(err)
	}
	if body := aws.ToString(ms[0].Body); body != `{"total":12}` {
		t.Errorf("body of %s = %q, want the payload as it is", m.ID, body)
	}
	want := map[string]string{"outbox-id": m.ID.String(), "outbox-topic": "orders.created", "outbox-key": "order-7", "traceparent": "00-abc-01"}
	if len(ms[0].MessageAttributes) != len(want) {
		t.Errorf("message %s has attributes %v, want %v", m.ID, ms[0].MessageAttributes, want)
	}
	for k, v := range want {
		if got := aws.ToString(ms[0].MessageAttributes[k].StringValue); got != v {
			t.Errorf("message %s: attribute %q = %q, want %q", m.ID, k, got, v)
		}
	}
}

// SNS fans out: every queue subscribed to the topic gets every message.
func TestEveryQueueSubscribedToTheTopicGetsEveryMessage(t *testing.T) {
	t.Parallel()
	srv := awstest.Start(t)
	topic := srv.Topic(t, "outboxaws-fanout-")
	queues := []string{srv.Queue(t, "outboxaws-fanout-a-", nil), srv.Queue(t, "outboxaws-fanout-b-", nil)}
	for _, q := range queues {
		srv.Subscribe(t, topic, q, true)
	}
	p := newSNS(t, srv, topic, outboxaws.Config{})
	batch := publishertest.Messages("orders", 25)
	for i, err := range p.Publish(ctxFor(t, 10*time.Second), batch) {
		if err != nil {
			t.Fatalf("message %s: %v", batch[i].ID, err)
		}
	}
	for _, q := range queues {
		got, err := receiver(srv, q)(ctxFor(t, 30*time.Second), len(batch))
		if err != nil {
			t.Fatalf("queue %s: %v", q, err)
		}
		ids := map[string]bool{}
		for _, r := range got {
			ids[r.ID] = true
		}
		for _, m := range batch {
			if !ids[m.ID.String()] {
				t.Errorf("queue %s lacks message %s", q, m.ID)
			}
		}
	}
}

// Messages adding up to more than a request's 256 KiB go in several
// requests: AWS would refuse the whole request, and no retry would change it.
func TestBatchOverTheRequestSizeLimitIsSplitAndEveryMessagePublished(t *testing.T) {
	t.Parallel()
	srv := awstest.Start(t)
	topic := srv.Topic(t, "outboxaws-snsbig-")
	queue := srv.Queue(t, "outboxaws-sqsbig-", nil)
	batch := publishertest.Messages("orders", 10)
	for i := range batch {
		batch[i].Payload = []byte(strings.Repeat("x", 60<<10))
	}
	for name, p := range map[string]outbox.Publisher{
		"SNS": newSNS(t, srv, topic, outboxaws.Config{}),
		"SQS": newSQS(t, srv, queue, outboxaws.Config{}),
	} {
		for i, err := range p.Publish(ctxFor(t, 10*time.Second), batch) {
			if err != nil {
				t.Errorf("%s: message %s of a 600 KiB batch: %v", name, batch[i].ID, err)
			}
		}
	}
}

// On a FIFO topic a message's group is its key (the default group without
// one) and its deduplication id the outbox id, which SNS uses to drop the
// same message published again. (goaws keeps no FIFO order nor
// deduplication of its own: what was sent is recorded.)
func TestFIFOTopicGroupsByKeyAndDeduplicatesByID(t *testing.T) {
	t.Parallel()
	srv := awstest.Start(t)
	topic := srv.Topic(t, "outboxaws-snsfifo-.fifo")
	var mu sync.Mutex
	var sent []awstest.Entry
	srv.FailEntries(func(_ string, e awstest.Entry) (string, bool) {
		mu.Lock()
		defer mu.Unlock()
		sent = append(sent, e)
		return "", false
	})
	p := newSNS(t, srv, topic, outboxaws.Config{DefaultGroupID: "no-key"})
	m := publishertest.Messages("orders", 2)
	m[0].Key, m[1].Key = "order-7", ""
	for i, err := range p.Publish(ctxFor(t, 10*time.Second), m) {
		if err != nil {
			t.Fatalf("message %s: %v", m[i].ID, err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(sent) != 2 {
		t.Fatalf("%d entries sent, want 2", len(sent))
	}
	for i, want := range []string{"order-7", "no-key"} {
		if sent[i].GroupID != want || sent[i].DeduplicationID != m[i].ID.String() {
			t.Errorf("message %s sent with group %q and deduplication id %q, want %q and its id", m[i].ID, sent[i].GroupID, sent[i].DeduplicationID, want)
		}
	}
}

// A topic that does not exist is a configuration error: retryable, counting
// an attempt, with the fix logged once, and Check says so at start with the
// command that creates it.
func TestMissingTopicIsRetryableLogsTheFixOnceAndFailsCheck(t *testing.T) {
	t.Parallel()
	srv := awstest.Start(t)
	missing := "arn:aws:sns:" + awstest.Region + ":" + awstest.AccountID + ":" + awstest.Name("outboxaws-missing-")
	logs := &relaytest.LogCapture{}
	p := newSNS(t, srv, missing, outboxaws.Config{Logger: slog.New(logs)})
	for range 2 {
		m := publishertest.Messages("orders", 1)
		err := p.Publish(ctxFor(t, 10*time.Second), m)[0]
		if err == nil || outbox.IsPermanent(err) || outbox.IsUnavailable(err) || !errors.Is(err, outboxaws.ErrNotFound) {
			t.Fatalf("message %s to a missing topic: %v; want a retryable ErrNotFound that counts an attempt", m[0].ID, err)
		}
	}
	if n := strings.Count(logs.String(), "create the topic"); n != 1 {
		t.Errorf("the fix was logged %d times for two batches, want once; logged:\n%s", n, logs)
	}
	err := p.Check(ctxFor(t, 5*time.Second))
	if !errors.Is(err, outboxaws.ErrNotFound) || !strings.Contains(err.Error(), "aws sns create-topic --name outboxaws-missing-") {
		t.Errorf("Check of a missing topic = %v, want ErrNotFound with the command that creates it", err)
	}
	if err := newSNS(t, srv, srv.Topic(t, "outboxaws-there-"), outboxaws.Config{}).Check(ctxFor(t, 5*time.Second)); err != nil {
		t.Errorf("Check of a topic that exists: %v", err)
	}
}

// The failure policy, the same as SQS's: access denied is retryable with
// the fix logged, throttling retryable after the delay, an entry refused as
// the sender's fault permanent and one the service failed retryable, each
// failing its own message alone.
func TestSNSFailuresAreClassifiedLikeSQSs(t *testing.T) {
	t.Parallel()
	srv := awstest.Start(t)
	topic := srv.Topic(t, "outboxaws-snspolicy-")
	logs := &relaytest.LogCapture{}
	p := newSNS(t, srv, topic, outboxaws.Config{Logger: slog.New(logs), ThrottleDelay: 3 * time.Second})

	srv.FailRequests(func(string) (string, int) { return "AuthorizationError", 403 })
	m := publishertest.Messages("orders", 1)
	err := p.Publish(ctxFor(t, 10*time.Second), m)[0]
	if err == nil || outbox.IsUnavailable(err) || outbox.IsPermanent(err) || !errors.Is(err, outboxaws.ErrAccessDenied) {
		t.Errorf("message %s refused access: %v; want a retryable ErrAccessDenied", m[0].ID, err)
	}
	if !logs.Has(slog.LevelError, "sns:Publish") {
		t.Errorf("no ERROR log with the fix; logged:\n%s", logs)
	}
	if err := p.Check(ctxFor(t, 5*time.Second)); !errors.Is(err, outboxaws.ErrAccessDenied) {
		t.Errorf("Check refused access = %v, want ErrAccessDenied", err)
	}

	srv.FailRequests(func(string) (string, int) { return "Throttled", 400 })
	err = p.Publish(ctxFor(t, 10*time.Second), m)[0]
	if d, ok := outbox.RetryAfterOf(err); !ok || d != 3*time.Second || outbox.IsPermanent(err) {
		t.Errorf("message %s throttled: %v (delay %v); want retryable after 3s", m[0].ID, err, d)
	}
	srv.FailRequests(nil)

	batch := publishertest.Messages("orders", 4)
	srv.FailEntries(func(_ string, e awstest.Entry) (string, bool) {
		switch e.Attributes[outboxaws.AttrID] {
		case batch[0].ID.String():
			return "InternalError", false
		case batch[1].ID.String():
			return "InvalidParameter", true
		case batch[2].ID.String():
			return "Throttled", false
		}
		return "", false
	})
	errs := p.Publish(ctxFor(t, 10*time.Second), batch)
	var ee *outboxaws.EntryError
	if errs[0] == nil || outbox.IsPermanent(errs[0]) || !errors.As(errs[0], &ee) || ee.Code != "InternalError" {
		t.Errorf("message %s failed by the service: %v; want a retryable EntryError", batch[0].ID, errs[0])
	}
	if !outbox.IsPermanent(errs[1]) || !errors.As(errs[1], &ee) || ee.Code != "InvalidParameter" {
		t.Errorf("message %s refused as the sender's fault: %v; want a permanent EntryError", batch[1].ID, errs[1])
	}
	if d, ok := outbox.RetryAfterOf(errs[2]); !ok || d != 3*time.Second {
		t.Errorf("message %s whose entry was throttled: %v; want retryable after 3s", batch[2].ID, errs[2])
	}
	if errs[3] != nil {
		t.Errorf("message %s: %v", batch[3].ID, errs[3])
	}
}

// No reply fails the batch retryably at Config.Timeout.
func TestSNSNoReplyWithinTimeoutIsRetryableAndPrompt(t *testing.T) {
	t.Parallel()
	srv := awstest.Start(t)
	topic := srv.Topic(t, "outboxaws-snsstall-")
	srv.Stall(time.Minute)
	p := newSNS(t, srv, topic, outboxaws.Config{Timeout: 300 * time.Millisecond})
	m := publishertest.Messages("orders", 2)
	start := time.Now()
	errs := p.Publish(ctxFor(t, 30*time.Second), m)
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Publish took %v with Timeout 300ms", d)
	}
	for i, err := range errs {
		if err == nil || outbox.IsPermanent(err) || !strings.Contains(err.Error(), "Config.Timeout") {
			t.Errorf("message %s without reply: %v; want a retryable error naming Config.Timeout", m[i].ID, err)
		}
	}
}

func TestNewSNSRefusesWhatIsNotATopicARN(t *testing.T) {
	t.Parallel()
	srv := awstest.Start(t)
	for _, arn := range []string{"", "orders", "arn:aws:sqs:us-east-1:123456789012:orders", "arn:aws:sns:us-east-1:123456789012", "https://sns.us-east-1.amazonaws.com/orders"} {
		var ce *outbox.ConfigError
		if _, err := outboxaws.NewSNS(srv.SNSClient(), arn, outboxaws.Config{}); !errors.As(err, &ce) || !strings.Contains(ce.Fix, "arn:aws:sns:REGION:ACCOUNT:NAME") {
			t.Errorf("NewSNS(%q) = %v, want a ConfigError showing the ARN's shape", arn, err)
		}
	}
}

func TestSNSPublisherDoesNotClaimToKeepKeyOrder(t *testing.T) {
	t.Parallel()
	srv := awstest.Start(t)
	var p outbox.Publisher = newSNS(t, srv, "arn:aws:sns:us-east-1:123456789012:orders", outboxaws.Config{})
	if _, ok := p.(outbox.KeyOrderKeeper); ok {
		t.Fatal("the SNS publisher is an outbox.KeyOrderKeeper, but a refused entry does not stop the later ones of its key")
	}
}
