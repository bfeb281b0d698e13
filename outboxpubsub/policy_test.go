package outboxpubsub_test

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"cloud.google.com/go/pubsub/v2/pstest"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/outboxpubsub"
	"github.com/go-outbox/outbox/publishertest"
	"github.com/go-outbox/outbox/relaytest"
)

// No server to connect to proves the batch did not leave: the relay counts
// no attempt and pauses until Pub/Sub answers.
func TestNoServerListeningIsUnavailableNotPermanent(t *testing.T) {
	t.Parallel()
	p := open(t, closedAddr(t), "pubsub://"+project+"/orders", outboxpubsub.Config{})
	batch := publishertest.Messages("orders", 2)
	for i, err := range p.Publish(ctxFor(t, 10*time.Second), batch) {
		if !outbox.IsUnavailable(err) || outbox.IsPermanent(err) {
			t.Errorf("message %s with no server listening: %v; want an unavailable (no attempt) error", batch[i].ID, err)
		}
	}
}

// A topic that does not exist is a configuration error the operator fixes
// by creating it: retryable (counting an attempt) with the fix logged, and
// published once the topic exists. Check says so at start.
func TestMissingTopicIsRetryableLogsTheFixAndPublishesOnceTheTopicExists(t *testing.T) {
	t.Parallel()
	srv := server(t, nil)
	logs := &relaytest.LogCapture{}
	p := open(t, srv.Addr, "pubsub://"+project, outboxpubsub.Config{Logger: slog.New(logs)})
	if err := p.Check(ctxFor(t, 5*time.Second), "orders"); !errors.Is(err, outboxpubsub.ErrTopicNotFound) || !strings.Contains(err.Error(), "gcloud pubsub topics create orders") {
		t.Errorf("Check of a missing topic = %v, want ErrTopicNotFound naming the gcloud command", err)
	}
	m := publishertest.Messages("orders", 1)
	err := p.Publish(ctxFor(t, 10*time.Second), m)[0]
	if err == nil || outbox.IsPermanent(err) || outbox.IsUnavailable(err) || !errors.Is(err, outboxpubsub.ErrTopicNotFound) {
		t.Fatalf("message %s to a missing topic: %v; want a retryable ErrTopicNotFound that counts an attempt", m[0].ID, err)
	}
	if !logs.Has(slog.LevelError, "orders", "gcloud pubsub topics create") {
		t.Errorf("no ERROR log naming the topic and the fix; logged:\n%s", logs)
	}
	_ = p.Publish(ctxFor(t, 10*time.Second), m)
	if n := strings.Count(logs.String(), "cannot publish"); n != 1 {
		t.Errorf("the missing topic was logged %d times in two batches, want once per ConfigErrorLogInterval:\n%s", n, logs)
	}
	createTopic(t, srv, "orders")
	if err := p.Check(ctxFor(t, 5*time.Second), "orders"); err != nil {
		t.Errorf("Check once the topic exists = %v", err)
	}
	if err := p.Publish(ctxFor(t, 10*time.Second), m)[0]; err != nil {
		t.Fatalf("message %s once the topic exists: %v", m[0].ID, err)
	}
}

// failWith makes the fake refuse every publish request with code while on
// is set.
func failWith(code codes.Code, on *atomic.Bool) reactor {
	return func(any) error {
		if on.Load() {
			return status.Error(code, "injected by the test")
		}
		return nil
	}
}

// Refused permission never gets better by waiting, but an operator fixes it:
// retryable, counting an attempt, with the fix logged.
func TestPermissionDeniedIsRetryableNotUnavailableAndLogsTheFix(t *testing.T) {
	t.Parallel()
	var on atomic.Bool
	on.Store(true)
	srv := server(t, failWith(codes.PermissionDenied, &on))
	createTopic(t, srv, "orders")
	logs := &relaytest.LogCapture{}
	p := open(t, srv.Addr, "pubsub://"+project+"/orders", outboxpubsub.Config{Logger: slog.New(logs)})
	m := publishertest.Messages("orders", 1)
	err := p.Publish(ctxFor(t, 10*time.Second), m)[0]
	if err == nil || outbox.IsPermanent(err) || outbox.IsUnavailable(err) || !errors.Is(err, outboxpubsub.ErrPermissionDenied) {
		t.Fatalf("message %s with permission denied: %v; want a retryable ErrPermissionDenied", m[0].ID, err)
	}
	if !logs.Has(slog.LevelError, "roles/pubsub.publisher") {
		t.Errorf("no ERROR log with the fix; logged:\n%s", logs)
	}
	on.Store(false)
	if err := p.Publish(ctxFor(t, 10*time.Second), m)[0]; err != nil {
		t.Fatalf("message %s once permitted: %v", m[0].ID, err)
	}
}

// A quota exceeded asks the relay to wait Config.ThrottleDelay.
func TestResourceExhaustedIsRetryableAfterTheThrottleDelay(t *testing.T) {
	t.Parallel()
	var on atomic.Bool
	on.Store(true)
	srv := server(t, failWith(codes.ResourceExhausted, &on))
	createTopic(t, srv, "orders")
	p := open(t, srv.Addr, "pubsub://"+project+"/orders", outboxpubsub.Config{ThrottleDelay: 3 * time.Second})
	m := publishertest.Messages("orders", 1)
	err := p.Publish(ctxFor(t, 10*time.Second), m)[0]
	if d, ok := outbox.RetryAfterOf(err); !ok || d != 3*time.Second || outbox.IsPermanent(err) || status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("message %s over quota: %v (delay %v); want a retryable RESOURCE_EXHAUSTED asking for 3s", m[0].ID, err, d)
	}
}

// Pub/Sub refuses a whole request for one invalid message: the others of
// the request are published, and only the invalid one fails for good.
func TestInvalidArgumentFailsOnlyTheMessagePubSubRefusesAlone(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var sizes []int // messages per request
	srv := server(t, func(req any) error {
		r := req.(*pubsubpb.PublishRequest)
		mu.Lock()
		sizes = append(sizes, len(r.Messages))
		mu.Unlock()
		for _, m := range r.Messages {
			if string(m.Data) == "refuse me" {
				return status.Error(codes.InvalidArgument, "injected: invalid message")
			}
		}
		return nil
	})
	createTopic(t, srv, "orders")
	// One bundle for the whole batch: the refusal hits the good messages too.
	settings := pubsub.DefaultPublishSettings
	settings.DelayThreshold, settings.CountThreshold = 200*time.Millisecond, 100
	p := open(t, srv.Addr, "pubsub://"+project+"/orders", outboxpubsub.Config{PublishSettings: &settings})
	batch := publishertest.Messages("orders", 3)
	batch[1].Payload = []byte("refuse me")
	errs := p.Publish(ctxFor(t, 10*time.Second), batch)
	if errs[0] != nil || errs[2] != nil {
		t.Errorf("the good messages of a refused request: %v, %v; want them published alone", errs[0], errs[2])
	}
	if !outbox.IsPermanent(errs[1]) || status.Code(errs[1]) != codes.InvalidArgument {
		t.Errorf("message %s Pub/Sub refuses: %v; want a permanent INVALID_ARGUMENT", batch[1].ID, errs[1])
	}
	mu.Lock()
	defer mu.Unlock()
	if len(sizes) == 0 || sizes[0] != 3 {
		t.Errorf("requests had %v messages; the test needs the batch in one request first", sizes)
	}
	if n := len(stored(srv, "orders")); n != 2 {
		t.Errorf("the topic holds %d messages, want the 2 good ones", n)
	}
}

// A message Pub/Sub would refuse is refused before sending, for good, with
// an error naming the header; nothing of it reaches Pub/Sub.
func TestMessagePubSubWouldRefuseIsPermanentNamesTheHeaderAndIsNotSent(t *testing.T) {
	t.Parallel()
	srv := server(t, nil)
	createTopic(t, srv, "orders")
	p := open(t, srv.Addr, "pubsub://"+project+"/orders", outboxpubsub.Config{})
	many := map[string]string{}
	for i := range 98 {
		many["h"+strings.Repeat("x", i)] = "v"
	}
	for _, tc := range []struct {
		headers map[string]string
		payload int
		want    error
		names   string
	}{
		{map[string]string{"trace": strings.Repeat("v", 1025)}, 1, outboxpubsub.ErrHeaderRefused, `"trace"`},
		{map[string]string{"goog-thing": "v"}, 1, outboxpubsub.ErrHeaderRefused, `"goog-thing"`},
		{many, 1, outboxpubsub.ErrHeaderRefused, "98 headers"},
		{nil, outboxpubsub.MaxMessageBytes + 1, outboxpubsub.ErrTooLarge, "10 MB"},
	} {
		m := publishertest.Messages("orders", 1)
		m[0].Headers, m[0].Payload = tc.headers, make([]byte, tc.payload)
		err := p.Publish(ctxFor(t, 10*time.Second), m)[0]
		if !outbox.IsPermanent(err) || !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.names) {
			t.Errorf("message %s: %v; want a permanent %v naming %s", m[0].ID, err, tc.want, tc.names)
		}
	}
	if n := len(stored(srv, "orders")); n != 0 {
		t.Errorf("the topic holds %d messages; refused messages must not be sent", n)
	}
}

// A server that does not reply fails the batch retryably at
// Config.Timeout, not at the caller's longer deadline.
func TestNoReplyWithinTimeoutIsRetryableAndPrompt(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	srv := server(t, func(any) error { <-release; return nil })
	t.Cleanup(func() { close(release) }) // before the server closes
	p := open(t, srv.Addr, "pubsub://"+project+"/orders", outboxpubsub.Config{Timeout: 300 * time.Millisecond})
	m := publishertest.Messages("orders", 2)
	start := time.Now()
	errs := p.Publish(ctxFor(t, 30*time.Second), m)
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("Publish took %v with Timeout 300ms", d)
	}
	for i, err := range errs {
		if err == nil || outbox.IsPermanent(err) || outbox.IsUnavailable(err) || !strings.Contains(err.Error(), "Config.Timeout") {
			t.Errorf("message %s without reply: %v; want a retryable error naming Config.Timeout", m[i].ID, err)
		}
	}
}

// With ordering keys a failed publish pauses its key in the client: the
// key's later messages of the batch are held back (not sent), other keys
// publish, and the relay's retry goes through in order (the key resumed).
func TestFailureOfAnOrderedKeyHoldsBackItsLaterMessagesAndTheRetryPublishesInOrder(t *testing.T) {
	t.Parallel()
	var fail atomic.Bool
	fail.Store(true)
	srv := server(t, func(req any) error {
		for _, m := range req.(*pubsubpb.PublishRequest).Messages {
			if m.OrderingKey == "a" && fail.Load() {
				return status.Error(codes.Unavailable, "injected: a passing failure")
			}
		}
		return nil
	})
	createTopic(t, srv, "orders")
	p := open(t, srv.Addr, "pubsub://"+project+"/orders", outboxpubsub.Config{OrderingKeys: true})
	batch := publishertest.Messages("orders", 6)
	for i := range batch {
		batch[i].Key = []string{"a", "b"}[i%2]
	}
	errs := p.Publish(ctxFor(t, 10*time.Second), batch)
	for i, err := range errs {
		switch {
		case batch[i].Key == "b" && err != nil:
			t.Errorf("message %s of key b: %v; want it published", batch[i].ID, err)
		case batch[i].Key == "a" && (err == nil || outbox.IsPermanent(err)):
			t.Errorf("message %s of key a: %v; want a retryable failure", batch[i].ID, err)
		case i > 0 && batch[i].Key == "a" && !outbox.IsHeldBack(err) && !isFirstFailure(errs, batch, i):
			t.Errorf("message %s of key a after its failure: %v; want it held back", batch[i].ID, err)
		}
	}
	fail.Store(false)
	var retry []outbox.Message
	for i := range batch {
		if batch[i].Key == "a" {
			retry = append(retry, batch[i])
		}
	}
	for i, err := range p.Publish(ctxFor(t, 10*time.Second), retry) {
		if err != nil {
			t.Fatalf("retry of message %s of key a: %v; want the key resumed", retry[i].ID, err)
		}
	}
	var got []string
	for _, m := range stored(srv, "orders") {
		if m.OrderingKey == "a" {
			got = append(got, m.Attributes[outboxpubsub.AttrID])
		}
	}
	if len(got) != len(retry) {
		t.Fatalf("key a has %d stored messages, want %d", len(got), len(retry))
	}
	for i := range got {
		if got[i] != retry[i].ID.String() {
			t.Fatalf("key a's message %d is %s, want %s", i, got[i], retry[i].ID)
		}
	}
}

// isFirstFailure reports whether errs[i] is the first failure of its key.
func isFirstFailure(errs []error, batch []outbox.Message, i int) bool {
	for j := range i {
		if batch[j].Key == batch[i].Key && errs[j] != nil {
			return false
		}
	}
	return true
}

// Credentials that may publish but not read a topic (roles/pubsub.publisher)
// are no reason to refuse to start: Check says it could not check.
func TestCheckWithoutPermissionToReadTheTopicSaysItCannotCheck(t *testing.T) {
	t.Parallel()
	srv := pstest.NewServer(pstest.WithErrorInjection("GetTopic", codes.PermissionDenied, "injected: no pubsub.topics.get"))
	t.Cleanup(func() { _ = srv.Close() })
	p := open(t, srv.Addr, "pubsub://"+project+"/orders", outboxpubsub.Config{})
	if err := p.Check(ctxFor(t, 5*time.Second)); !errors.Is(err, outboxpubsub.ErrCheckNotPermitted) {
		t.Fatalf("Check without pubsub.topics.get = %v, want ErrCheckNotPermitted", err)
	}
}

// With ordering keys, a message refused before sending stops its key too:
// the client never saw it fail, so the publisher holds the key's later
// messages back itself.
func TestMessageRefusedBeforeSendingHoldsBackItsKeyWithOrderingKeys(t *testing.T) {
	t.Parallel()
	srv := server(t, nil)
	createTopic(t, srv, "orders")
	p := open(t, srv.Addr, "pubsub://"+project+"/orders", outboxpubsub.Config{OrderingKeys: true})
	batch := publishertest.Messages("orders", 3)
	batch[0].Key, batch[1].Key, batch[2].Key = "a", "a", "b"
	batch[0].Headers["big"] = strings.Repeat("x", 2000)
	errs := p.Publish(ctxFor(t, 10*time.Second), batch)
	if !outbox.IsPermanent(errs[0]) || !outbox.IsHeldBack(errs[1]) || errs[2] != nil {
		t.Fatalf("outcomes %v; want the refused message permanent, the next of its key held back, the other key published", errs)
	}
	if ms := stored(srv, "orders"); len(ms) != 1 || ms[0].OrderingKey != "b" {
		t.Fatalf("stored %d messages; want only key b's", len(ms))
	}
}

// With ordering keys, a message the client refuses as too large stops its
// key: the size check counts the message as Pub/Sub encodes it, and the
// key's later messages are held back, never stored after it.
func TestMessageJustOverTheEncodedLimitIsRefusedAndHoldsBackItsKey(t *testing.T) {
	t.Parallel()
	srv := server(t, nil)
	createTopic(t, srv, "orders")
	p := open(t, srv.Addr, "pubsub://"+project+"/orders", outboxpubsub.Config{OrderingKeys: true})
	batch := publishertest.Messages("orders", 2)
	for i := range batch {
		batch[i].Key, batch[i].Headers = "a", nil
	}
	// Data and attributes add up to exactly MaxMessageBytes; the protobuf
	// framing puts it over.
	attrs := len(outboxpubsub.AttrID) + 36 + len(outboxpubsub.AttrTopic) + len("orders") + len(outboxpubsub.AttrKey) + 2*len("a")
	batch[0].Payload = make([]byte, outboxpubsub.MaxMessageBytes-attrs)
	errs := p.Publish(ctxFor(t, 10*time.Second), batch)
	if !outbox.IsPermanent(errs[0]) || !outbox.IsHeldBack(errs[1]) {
		t.Fatalf("outcomes %v; want the oversized message permanent and the next of its key held back", errs)
	}
	if n := len(stored(srv, "orders")); n != 0 {
		t.Fatalf("the topic holds %d messages; key a's later message went out after its failure", n)
	}
}

// With ordering keys, every message of a key in a refused request goes
// again alone, in order: the good one before the invalid one is published,
// the invalid one fails for good, and the key's next one is held back
// behind it (no attempt counted), not reported as a failure of its own.
func TestInvalidArgumentWithOrderingKeysResendsTheKeysMessagesAloneInOrder(t *testing.T) {
	t.Parallel()
	srv := server(t, func(req any) error {
		for _, m := range req.(*pubsubpb.PublishRequest).Messages {
			if string(m.Data) == "refuse me" {
				return status.Error(codes.InvalidArgument, "injected: invalid message")
			}
		}
		return nil
	})
	createTopic(t, srv, "orders")
	settings := pubsub.DefaultPublishSettings
	settings.DelayThreshold, settings.CountThreshold = 200*time.Millisecond, 100
	p := open(t, srv.Addr, "pubsub://"+project+"/orders", outboxpubsub.Config{OrderingKeys: true, PublishSettings: &settings})
	batch := publishertest.Messages("orders", 3)
	for i := range batch {
		batch[i].Key = "a"
	}
	batch[1].Payload = []byte("refuse me")
	errs := p.Publish(ctxFor(t, 10*time.Second), batch)
	if errs[0] != nil {
		t.Errorf("message %s before the invalid one: %v; want it published alone", batch[0].ID, errs[0])
	}
	if !outbox.IsPermanent(errs[1]) || status.Code(errs[1]) != codes.InvalidArgument {
		t.Errorf("message %s Pub/Sub refuses: %v; want a permanent INVALID_ARGUMENT", batch[1].ID, errs[1])
	}
	if !outbox.IsHeldBack(errs[2]) {
		t.Errorf("message %s after the invalid one: %v; want it held back", batch[2].ID, errs[2])
	}
	if ms := stored(srv, "orders"); len(ms) != 1 || ms[0].Attributes[outboxpubsub.AttrID] != batch[0].ID.String() {
		t.Errorf("the topic holds %d messages; want only %s", len(ms), batch[0].ID)
	}
}

// An empty key spends no attribute, so 98 headers fit in Pub/Sub's 100
// attributes; with ordering keys a key over Pub/Sub's 1024 bytes fails for
// good before sending, with a message naming the limit.
func TestAttributeCountLeavesOutAnEmptyKeyAndALongOrderingKeyIsPermanent(t *testing.T) {
	t.Parallel()
	srv := server(t, nil)
	createTopic(t, srv, "orders")
	p := open(t, srv.Addr, "pubsub://"+project+"/orders", outboxpubsub.Config{OrderingKeys: true})
	m := publishertest.Messages("orders", 2)
	m[0].Key, m[0].Headers = "", map[string]string{}
	for i := range 98 {
		m[0].Headers["h"+strings.Repeat("x", i)] = "v"
	}
	m[1].Key = strings.Repeat("k", outboxpubsub.MaxOrderingKeyBytes+1)
	errs := p.Publish(ctxFor(t, 10*time.Second), m)
	if errs[0] != nil {
		t.Errorf("message %s with 98 headers and no key (100 attributes): %v; want it published", m[0].ID, errs[0])
	}
	if !outbox.IsPermanent(errs[1]) || !strings.Contains(fmt.Sprint(errs[1]), "1024") {
		t.Errorf("message %s with a key of %d bytes: %v; want a permanent error naming the 1024-byte limit", m[1].ID, len(m[1].Key), errs[1])
	}
	if n := len(stored(srv, "orders")); n != 1 {
		t.Errorf("the topic holds %d messages, want only the one without key", n)
	}
}
