package outboxaws_test

import (
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/awstest"
	"github.com/go-outbox/outbox/outboxaws"
	"github.com/go-outbox/outbox/publishertest"
	"github.com/go-outbox/outbox/relaytest"
)

// No server to connect to proves the batch did not leave: the relay counts
// no attempt and pauses until SQS answers.
func TestNoServerListeningIsUnavailableNotPermanent(t *testing.T) {
	t.Parallel()
	srv := awstest.Start(t)
	queue := srv.Queue(t, "outboxaws-down-", nil)
	p := newSQS(t, srv, queue, outboxaws.Config{})
	srv.Stop()
	batch := publishertest.Messages("orders", 2)
	for i, err := range p.Publish(ctxFor(t, 10*time.Second), batch) {
		if !outbox.IsUnavailable(err) || outbox.IsPermanent(err) {
			t.Errorf("message %s with no server listening: %v; want an unavailable (no attempt) error", batch[i].ID, err)
		}
	}
}

// A queue that does not exist is a configuration error: retryable, counting
// an attempt, with the fix logged once, and Check says so at start.
func TestMissingQueueIsRetryableLogsTheFixOnceAndFailsCheck(t *testing.T) {
	t.Parallel()
	srv := awstest.Start(t)
	missing := srv.URL + "/" + awstest.AccountID + "/" + awstest.Name("outboxaws-missing-")
	logs := &relaytest.LogCapture{}
	p := newSQS(t, srv, missing, outboxaws.Config{Logger: slog.New(logs)})
	for range 2 {
		m := publishertest.Messages("orders", 1)
		err := p.Publish(ctxFor(t, 10*time.Second), m)[0]
		if err == nil || outbox.IsPermanent(err) || outbox.IsUnavailable(err) || !errors.Is(err, outboxaws.ErrNotFound) {
			t.Fatalf("message %s to a missing queue: %v; want a retryable ErrNotFound that counts an attempt", m[0].ID, err)
		}
	}
	if n := strings.Count(logs.String(), "create the queue"); n != 1 {
		t.Errorf("the fix was logged %d times for two batches, want once; logged:\n%s", n, logs)
	}
	if !logs.Has(slog.LevelError, missing, "create the queue") {
		t.Errorf("no ERROR log naming the queue and the fix; logged:\n%s", logs)
	}
	if err := p.Check(ctxFor(t, 5*time.Second)); !errors.Is(err, outboxaws.ErrNotFound) || !strings.Contains(err.Error(), "create") {
		t.Errorf("Check of a missing queue = %v, want ErrNotFound with the fix", err)
	}
	byName := newSQS(t, srv, awstest.Name("outboxaws-missing-"), outboxaws.Config{Logger: slog.New(logs)})
	if err := byName.Check(ctxFor(t, 5*time.Second)); !errors.Is(err, outboxaws.ErrNotFound) {
		t.Errorf("Check of a missing queue by name = %v, want ErrNotFound", err)
	}
}

// A queue given by name is looked up, checked and published to.
func TestQueueGivenByNameIsLookedUpChecksAndPublishes(t *testing.T) {
	t.Parallel()
	srv := awstest.Start(t)
	queue := srv.Queue(t, "outboxaws-byname-", nil)
	p := newSQS(t, srv, queue[strings.LastIndex(queue, "/")+1:], outboxaws.Config{})
	if err := p.Check(ctxFor(t, 5*time.Second)); err != nil {
		t.Fatalf("Check: %v", err)
	}
	m := publishertest.Messages("orders", 1)
	if err := p.Publish(ctxFor(t, 10*time.Second), m)[0]; err != nil {
		t.Fatalf("message %s: %v", m[0].ID, err)
	}
	if _, err := awstest.Receive(ctxFor(t, 10*time.Second), srv.SQSClient(), queue, 1); err != nil {
		t.Fatal(err)
	}
}

// Access denied never gets better by waiting: not unavailable, but a
// retryable failure counting an attempt, with the fix logged. (goaws has no
// IAM: the refusal is injected.)
func TestAccessDeniedIsRetryableNotUnavailableAndLogsTheFix(t *testing.T) {
	t.Parallel()
	srv := awstest.Start(t)
	queue := srv.Queue(t, "outboxaws-denied-", nil)
	srv.FailRequests(func(string) (string, int) { return "AccessDenied", 403 })
	logs := &relaytest.LogCapture{}
	p := newSQS(t, srv, queue, outboxaws.Config{Logger: slog.New(logs)})
	m := publishertest.Messages("orders", 1)
	err := p.Publish(ctxFor(t, 10*time.Second), m)[0]
	if err == nil || outbox.IsUnavailable(err) || outbox.IsPermanent(err) || !errors.Is(err, outboxaws.ErrAccessDenied) {
		t.Fatalf("message %s refused access: %v; want a retryable ErrAccessDenied that counts an attempt", m[0].ID, err)
	}
	if !logs.Has(slog.LevelError, "sqs:SendMessage") {
		t.Errorf("no ERROR log with the fix; logged:\n%s", logs)
	}
	if err := p.Check(ctxFor(t, 5*time.Second)); !errors.Is(err, outboxaws.ErrAccessDenied) {
		t.Errorf("Check refused access = %v, want ErrAccessDenied", err)
	}
}

// Throttling, of the request or of one entry, is retryable after
// Config.ThrottleDelay. (goaws never throttles: it is injected.)
func TestThrottlingIsRetryableAfterTheThrottleDelay(t *testing.T) {
	t.Parallel()
	srv := awstest.Start(t)
	queue := srv.Queue(t, "outboxaws-throttle-", nil)
	p := newSQS(t, srv, queue, outboxaws.Config{ThrottleDelay: 3 * time.Second})
	m := publishertest.Messages("orders", 2)
	srv.FailRequests(func(string) (string, int) { return "RequestThrottled", 400 })
	err := p.Publish(ctxFor(t, 10*time.Second), m[:1])[0]
	if d, ok := outbox.RetryAfterOf(err); !ok || d != 3*time.Second || outbox.IsPermanent(err) {
		t.Errorf("message %s throttled: %v (delay %v); want retryable after 3s", m[0].ID, err, d)
	}
	srv.FailRequests(nil)
	srv.FailEntries(func(_ string, e awstest.Entry) (string, bool) {
		if e.Attributes[outboxaws.AttrID] == m[1].ID.String() {
			return "ThrottlingException", true
		}
		return "", false
	})
	errs := p.Publish(ctxFor(t, 10*time.Second), m)
	if errs[0] != nil {
		t.Errorf("message %s: %v", m[0].ID, errs[0])
	}
	if d, ok := outbox.RetryAfterOf(errs[1]); !ok || d != 3*time.Second || outbox.IsPermanent(errs[1]) {
		t.Errorf("message %s whose entry was throttled: %v (delay %v); want retryable after 3s", m[1].ID, errs[1], d)
	}
}

// An entry the service failed on its side is retryable; one refused as the
// sender's fault is permanent. Either fails its message alone.
func TestRefusedEntryFailsItsMessageAloneRetryablyUnlessTheSendersFault(t *testing.T) {
	t.Parallel()
	srv := awstest.Start(t)
	queue := srv.Queue(t, "outboxaws-entry-", nil)
	p := newSQS(t, srv, queue, outboxaws.Config{})
	m := publishertest.Messages("orders", 3)
	srv.FailEntries(func(_ string, e awstest.Entry) (string, bool) {
		switch e.Attributes[outboxaws.AttrID] {
		case m[0].ID.String():
			return "InternalError", false
		case m[1].ID.String():
			return "InvalidParameterValue", true
		}
		return "", false
	})
	errs := p.Publish(ctxFor(t, 10*time.Second), m)
	var ee *outboxaws.EntryError
	if errs[0] == nil || outbox.IsPermanent(errs[0]) || !errors.As(errs[0], &ee) || ee.Code != "InternalError" {
		t.Errorf("message %s failed by the service: %v; want a retryable EntryError", m[0].ID, errs[0])
	}
	if !outbox.IsPermanent(errs[1]) || !errors.As(errs[1], &ee) || ee.Code != "InvalidParameterValue" {
		t.Errorf("message %s refused as the sender's fault: %v; want a permanent EntryError", m[1].ID, errs[1])
	}
	if errs[2] != nil {
		t.Errorf("message %s: %v", m[2].ID, errs[2])
	}
}

// No reply fails the batch retryably at Config.Timeout, not at the caller's
// longer deadline.
func TestNoReplyWithinTimeoutIsRetryableAndPrompt(t *testing.T) {
	t.Parallel()
	srv := awstest.Start(t)
	queue := srv.Queue(t, "outboxaws-stall-", nil)
	srv.Stall(time.Minute)
	p := newSQS(t, srv, queue, outboxaws.Config{Timeout: 300 * time.Millisecond})
	m := publishertest.Messages("orders", 2)
	start := time.Now()
	errs := p.Publish(ctxFor(t, 30*time.Second), m)
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Publish took %v with Timeout 300ms", d)
	}
	for i, err := range errs {
		if err == nil || outbox.IsPermanent(err) || outbox.IsUnavailable(err) || !strings.Contains(err.Error(), "Config.Timeout") {
			t.Errorf("message %s without reply: %v; want a retryable error naming Config.Timeout", m[i].ID, err)
		}
	}
}

// On a FIFO queue a message's group is its key (the default group without
// one) and its deduplication id the outbox id: the same message sent again
// is dropped by SQS.
func TestFIFOQueueGroupsByKeyAndDeduplicatesByID(t *testing.T) {
	t.Parallel()
	srv := awstest.Start(t)
	queue := srv.Queue(t, "outboxaws-fifo-.fifo", map[string]string{"FifoQueue": "true"})
	var mu sync.Mutex
	var groups []string
	srv.FailEntries(func(_ string, e awstest.Entry) (string, bool) {
		mu.Lock()
		defer mu.Unlock()
		groups = append(groups, e.GroupID)
		return "", false
	})
	p := newSQS(t, srv, queue, outboxaws.Config{DefaultGroupID: "no-key"})
	m := publishertest.Messages("orders", 2)
	m[0].Key, m[1].Key = "order-7", ""
	for i, err := range p.Publish(ctxFor(t, 10*time.Second), m) {
		if err != nil {
			t.Fatalf("message %s: %v", m[i].ID, err)
		}
	}
	mu.Lock()
	if len(groups) != 2 || groups[0] != "order-7" || groups[1] != "no-key" {
		t.Errorf("groups sent %v, want [order-7 no-key]", groups)
	}
	mu.Unlock()
	if err := p.Publish(ctxFor(t, 10*time.Second), m[:1])[0]; err != nil {
		t.Fatalf("message %s again: %v", m[0].ID, err)
	}
	ms, _ := awstest.Receive(ctxFor(t, 2*time.Second), srv.SQSClient(), queue, 3)
	if len(ms) != 2 {
		t.Errorf("the FIFO queue gave %d messages after 2 sent and one sent again, want 2 (deduplicated by id)", len(ms))
	}
}

// The requests of a batch go at once, and an entry refused does not stop a
// later entry of its key: the publisher must not claim to keep key order,
// so the relay hands it a key's messages in waves.
func TestSQSPublisherDoesNotClaimToKeepKeyOrder(t *testing.T) {
	t.Parallel()
	srv := awstest.Start(t)
	var p outbox.Publisher = newSQS(t, srv, srv.URL+"/q", outboxaws.Config{})
	if _, ok := p.(outbox.KeyOrderKeeper); ok {
		t.Fatal("the SQS publisher is an outbox.KeyOrderKeeper, but a refused entry does not stop the later ones of its key")
	}
}

func TestConfigErrorsNameTheField(t *testing.T) {
	t.Parallel()
	srv := awstest.Start(t)
	for field, cfg := range map[string]outboxaws.Config{
		"outboxaws.Config.MaxMessageSize": {MaxMessageSize: 2 << 20},
		"outboxaws.Config.ThrottleDelay":  {ThrottleDelay: -time.Second},
		"outboxaws.Config.Timeout":        {Timeout: -time.Second},
		"outboxaws.Config.DefaultGroupID": {DefaultGroupID: "has space"},
	} {
		var ce *outbox.ConfigError
		if err := cfg.Validate(); !errors.As(err, &ce) || ce.Field != field || ce.Fix == "" {
			t.Errorf("Validate(%+v) = %v, want a ConfigError naming %s with a fix", cfg, err, field)
		}
		if _, err := outboxaws.NewSQS(srv.SQSClient(), "q", cfg); !errors.Is(err, outbox.ErrInvalidConfig) {
			t.Errorf("NewSQS with %s invalid = %v, want the ConfigError", field, err)
		}
	}
}

// An entry refused because the queue's KMS key cannot be used is a
// configuration error: retryable (fixing the key loses nothing), not
// permanent, and logged at ERROR with the fix, once.
func TestAnEntryRefusedForAnUnusableKMSKeyIsRetryableAndLoggedWithTheFix(t *testing.T) {
	t.Parallel()
	srv := awstest.Start(t)
	queue := srv.Queue(t, "outboxaws-kms-", nil)
	logs := &relaytest.LogCapture{}
	p := newSQS(t, srv, queue, outboxaws.Config{Logger: slog.New(logs)})
	srv.FailEntries(func(string, awstest.Entry) (string, bool) { return "KMS.DisabledException", true })
	for range 2 {
		errs := p.Publish(ctxFor(t, 10*time.Second), publishertest.Messages("orders", 1))
		if errs[0] == nil || outbox.IsPermanent(errs[0]) || !strings.Contains(errs[0].Error(), "KMS key") {
			t.Fatalf("an entry refused for a disabled KMS key: %v; want a retryable error naming the KMS key", errs[0])
		}
	}
	if n := strings.Count(logs.String(), "check the KMS key"); n != 1 || !logs.Has(slog.LevelError, "check the KMS key") {
		t.Errorf("the KMS fix was logged %d times for two batches; want once, at ERROR level:\n%s", n, logs)
	}
}
