package main

import (
	"bytes"
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/go-outbox/outbox/internal/awstest"
	"github.com/go-outbox/outbox/internal/pgtest"
	"github.com/go-outbox/outbox/outboxaws"
)

func TestSQSAndSNSURLsNameTheQueueOrTopicRegionAndEndpoint(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		raw, dest, region, endpoint string
		timeout                     time.Duration
	}{
		{raw: "sqs://sqs.eu-west-1.amazonaws.com/123456789012/orders", dest: "https://sqs.eu-west-1.amazonaws.com/123456789012/orders"},
		{raw: "sqs://orders.fifo?region=eu-west-1&timeout=3s", dest: "orders.fifo", region: "eu-west-1", timeout: 3 * time.Second},
		{raw: "sqs://localhost:4566/000000000000/orders?endpoint=http://localhost:4566&region=us-east-1", dest: "http://localhost:4566/000000000000/orders", region: "us-east-1", endpoint: "http://localhost:4566"},
		{raw: "sns:arn:aws:sns:eu-west-1:123456789012:orders", dest: "arn:aws:sns:eu-west-1:123456789012:orders", region: "eu-west-1"},
		{raw: "sns://arn:aws:sns:us-east-1:000000000000:orders.fifo?endpoint=http://localhost:4566&region=us-east-1", dest: "arn:aws:sns:us-east-1:000000000000:orders.fifo", region: "us-east-1", endpoint: "http://localhost:4566"},
	} {
		parse := parseSQSURL
		if strings.HasPrefix(tc.raw, "sns:") {
			parse = parseSNSURL
		}
		got, err := parse(tc.raw)
		if err != nil {
			t.Errorf("parse %q: %v", tc.raw, err)
			continue
		}
		if got.dest != tc.dest || got.region != tc.region || got.endpoint != tc.endpoint || got.cfg.Timeout != tc.timeout {
			t.Errorf("parse %q = %+v; want destination %q, region %q, endpoint %q, timeout %v", tc.raw, got, tc.dest, tc.region, tc.endpoint, tc.timeout)
		}
	}
}

// Not parallel: credentials in a --publisher URL are added to the command's
// list of secrets, which parallel tests read without a lock.
func TestAWSURLErrorsSayWhatToWriteAndPrintNoCredentials(t *testing.T) {
	awsTestEnv(t)
	for _, tc := range []struct{ raw, want string }{
		{"sqs://AKIAX:s3cret@sqs.eu-west-1.amazonaws.com/1/orders", "AWS_ACCESS_KEY_ID"},
		{"sns://AKIAX:s3cret@arn:aws:sns:eu-west-1:1:orders", "AWS_ACCESS_KEY_ID"},
		{"sqs://", "no queue"},
		{"sqs://sqs.eu-west-1.amazonaws.com/orders", "/ACCOUNT/NAME"},
		{"sqs://orders", "no region"},
		{"sqs://orders?region=eu-west-1&endpoint=localhost:4566", "endpoint="},
		{"sqs://orders?region=eu-west-1&acks=all", "unknown parameter"},
		{"sns:orders", "sns:arn:aws:sns:REGION:ACCOUNT:NAME"},
		{"sns:arn:aws:sqs:eu-west-1:1:orders", "not a topic's ARN"},
		{"sns:arn:aws:sns:eu-west-1:1:orders?region=us-east-1", "the topic is in eu-west-1"},
		{"sns:arn:aws:sns:eu-west-1:1:orders?timeout=soon", "timeout="},
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

// awsTestEnv gives the SDK's chain test credentials and nothing of the
// machine's (no shared files, no instance metadata, no region), and makes
// the CLI's SQS clients speak goaws's protocol.
func awsTestEnv(t *testing.T) {
	dir := t.TempDir()
	for k, v := range map[string]string{
		"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test", "AWS_SESSION_TOKEN": "",
		"AWS_PROFILE": "", "AWS_REGION": "", "AWS_DEFAULT_REGION": "", "AWS_EC2_METADATA_DISABLED": "true",
		"AWS_CONFIG_FILE": filepath.Join(dir, "config"), "AWS_SHARED_CREDENTIALS_FILE": filepath.Join(dir, "credentials"),
		"AWS_ENDPOINT_URL": "", "AWS_ENDPOINT_URL_SQS": "", "AWS_ENDPOINT_URL_SNS": "",
	} {
		t.Setenv(k, v)
	}
	sqsClientOptions = append(sqsClientOptions[:0:0], awstest.SQSProtocol)
	t.Cleanup(func() { sqsClientOptions = nil })
}

// Not parallel (environment). SQS and SNS create nothing on send: a missing
// queue or topic fails the start with the command that creates it, rather
// than failing every batch until an operator reads the log.
func TestRelayRefusesToStartWhenTheQueueOrTopicIsMissing(t *testing.T) {
	awsTestEnv(t)
	srv := awstest.Start(t)
	queue := awstest.Name("outbox-cli-missing-")
	topic := "arn:aws:sns:" + awstest.Region + ":" + awstest.AccountID + ":" + awstest.Name("outbox-cli-missing-")
	for _, tc := range []struct{ raw, want string }{
		{"sqs://" + queue + "?region=" + awstest.Region + "&endpoint=" + srv.URL, "aws sqs create-queue"},
		{"sqs://localhost:4100/" + awstest.AccountID + "/" + queue + "?region=" + awstest.Region + "&endpoint=" + srv.URL, "aws sqs create-queue"},
		{"sns:" + topic + "?endpoint=" + srv.URL, "aws sns create-topic --name outbox-cli-missing-"},
	} {
		code, _, stderr := cli(t, "relay", "--publisher", tc.raw, "--database-url", "postgres://x@127.0.0.1:1/db")
		if code != 1 || !strings.Contains(stderr, tc.want) || strings.Contains(stderr, "starting") {
			t.Errorf("relay --publisher %s with nothing there: exit %d, stderr %q; want exit 1 naming the fix (%s)", tc.raw, code, stderr, tc.want)
		}
	}
}

// Not parallel (environment). Credentials AWS refuses outright fail the
// start; a permission the check lacks does not (the credentials may still
// publish).
func TestRelayRefusesToStartWithCredentialsAWSRefusesButNotForAPermissionTheCheckLacks(t *testing.T) {
	awsTestEnv(t)
	srv := awstest.Start(t)
	queue := srv.Queue(t, "outbox-cli-denied-", nil)
	raw := "sqs://" + queue[strings.LastIndex(queue, "/")+1:] + "?region=" + awstest.Region + "&endpoint=" + srv.URL
	srv.FailRequests(func(string) (string, int) { return "InvalidClientTokenId", 403 })
	if p, err := openSQS(raw); err == nil || !strings.Contains(err.Error(), "InvalidClientTokenId") {
		t.Errorf("openSQS with credentials AWS does not know: %v, %v; want the start refused", p, err)
	}
	srv.FailRequests(func(action string) (string, int) {
		if action == "GetQueueAttributes" {
			return "AccessDenied", 403
		}
		return "", 0
	})
	p, err := openSQS(raw)
	if err != nil {
		t.Fatalf("openSQS with credentials that may not read the queue's attributes: %v; want a warning and a start", err)
	}
	_ = p.Close()
}

// Not parallel (environment). The relay starts while AWS does not answer:
// its batches fail until it does.
func TestAWSPublishersStartWhileAWSIsUnreachable(t *testing.T) {
	awsTestEnv(t)
	closed := awstest.ClosedURL(t)
	for _, raw := range []string{
		"sqs://orders?region=eu-west-1&endpoint=" + closed,
		"sns:arn:aws:sns:eu-west-1:123456789012:orders?endpoint=" + closed,
	} {
		p, err := openPublisher(raw, nil)
		if err != nil {
			t.Errorf("--publisher %s with nothing listening: %v; the relay must start and retry while AWS is unreachable", raw, err)
			continue
		}
		_ = p.Close()
	}
}

// Not parallel (environment). The relay publishes what was written to an
// SQS queue, and to an SNS topic whose raw-delivery subscription gets it.
func TestRelayPublishesToSQSAndToSNS(t *testing.T) {
	awsTestEnv(t)
	srv := awstest.Start(t)
	queue := srv.Queue(t, "outbox-cli-sqs-", nil)
	topic := srv.Topic(t, "outbox-cli-sns-")
	subscribed := srv.Queue(t, "outbox-cli-sub-", nil)
	srv.Subscribe(t, topic, subscribed, true)
	for _, tc := range []struct{ publisher, readFrom string }{
		{"sqs://" + queue[strings.LastIndex(queue, "/")+1:] + "?region=" + awstest.Region + "&endpoint=" + srv.URL, queue},
		{"sns:" + topic + "?endpoint=" + srv.URL, subscribed},
	} {
		url, schema := pgtest.URL(t), pgtest.Schema(t)
		db := []string{"--database-url", url, "--schema", schema}
		with := func(args ...string) []string { return append(append([]string{}, args...), db...) }
		mustCLI(t, with("migrate", "up")...)
		var ids []string
		for _, key := range []string{"o-1", "o-2"} {
			ids = append(ids, strings.TrimSpace(mustCLI(t, with("send", "--topic", "created", "--key", key, "--payload", `{"key":"`+key+`"}`)...)))
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		relayCtx, stopRelay := context.WithCancel(ctx)
		var stderr bytes.Buffer
		done := make(chan int, 1)
		go func() {
			done <- run(relayCtx, with("relay", "--publisher", tc.publisher, "--poll-interval", "100ms"), &bytes.Buffer{}, &stderr)
		}()
		ms, err := awstest.Receive(ctx, srv.SQSClient(), tc.readFrom, len(ids))
		stopRelay()
		if code := <-done; code != 0 {
			t.Errorf("relay --publisher %s exited with %d: %s", tc.publisher, code, stderr.String())
		}
		cancel()
		if err != nil {
			t.Fatalf("relay --publisher %s: %v; relay stderr: %s", tc.publisher, err, stderr.String())
		}
		var got []string
		for _, m := range ms {
			attr := func(name string) string { return aws.ToString(m.MessageAttributes[name].StringValue) }
			if attr(outboxaws.AttrTopic) != "created" || aws.ToString(m.Body) != `{"key":"`+attr(outboxaws.AttrKey)+`"}` {
				t.Errorf("relay --publisher %s: message %s has body %q and attributes %v; want topic created and its key's payload", tc.publisher, attr(outboxaws.AttrID), aws.ToString(m.Body), m.MessageAttributes)
			}
			got = append(got, attr(outboxaws.AttrID))
		}
		slices.Sort(got)
		slices.Sort(ids)
		if !slices.Equal(got, ids) {
			t.Errorf("relay --publisher %s: %s holds %v, want %v", tc.publisher, tc.readFrom, got, ids)
		}
	}
}
