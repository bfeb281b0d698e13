package outboxredis_test

import (
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/redistest"
	"github.com/go-outbox/outbox/outboxredis"
	"github.com/go-outbox/outbox/publishertest"
	"github.com/go-outbox/outbox/relaytest"
)

// No server to connect to proves the batch did not leave: the relay counts
// no attempt and pauses until Redis is back.
func TestNoServerListeningIsUnavailableNotPermanent(t *testing.T) {
	t.Parallel()
	p := open(t, redistest.ClosedURL(t), outboxredis.Config{})
	batch := publishertest.Messages("orders", 2)
	for i, err := range p.Publish(ctxFor(t, 10*time.Second), batch) {
		if !outbox.IsUnavailable(err) || outbox.IsPermanent(err) {
			t.Errorf("message %s with no server listening: %v; want an unavailable (no attempt) error", batch[i].ID, err)
		}
	}
}

// A server that stops under a connected publisher fails the batch
// retryably, and the publisher appends again once a server is back.
func TestServerStoppedUnderThePublisherIsRetryableAndPublishingResumesWhenItIsBack(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	p := open(t, srv.URL, outboxredis.Config{Stream: "orders", Timeout: 2 * time.Second})
	if err := p.Publish(ctxFor(t, 10*time.Second), publishertest.Messages("orders", 1))[0]; err != nil {
		t.Fatalf("publish while the server runs: %v", err)
	}
	srv.Stop()
	batch := publishertest.Messages("orders", 3)
	for i, err := range p.Publish(ctxFor(t, 10*time.Second), batch) {
		if err == nil || outbox.IsPermanent(err) {
			t.Fatalf("message %s after the server stopped: %v; want a retryable error", batch[i].ID, err)
		}
	}
	srv.Restart(t)
	for i, err := range p.Publish(ctxFor(t, 10*time.Second), batch) {
		if err != nil {
			t.Fatalf("message %s once the server is back: %v", batch[i].ID, err)
		}
	}
	opts, _ := redis.ParseURL(srv.URL)
	reader := redis.NewClient(opts)
	t.Cleanup(func() { _ = reader.Close() })
	if xs := entries(t, reader, "orders"); len(xs) != len(batch) {
		t.Fatalf("the restarted server's stream holds %d entries, want the batch's %d", len(xs), len(batch))
	}
}

// A stream key holding another type is a configuration error the operator
// fixes by deleting or renaming the key: the message is retryable (counting
// an attempt) with the fix logged, the other messages of the batch are
// appended, and once the key is gone the same message is appended.
func TestStreamKeyOfAnotherTypeIsRetryableLogsTheFixAndPublishesOnceTheKeyIsDeleted(t *testing.T) {
	t.Parallel()
	c, good := client(t)
	bad := redistest.Stream(t, c, "outboxredis.string.")
	if err := c.Set(ctxFor(t, 5*time.Second), bad, "not a stream", 0).Err(); err != nil {
		t.Fatal(err)
	}
	logs := &relaytest.LogCapture{}
	p := open(t, redistest.URL(t), outboxredis.Config{Logger: slog.New(logs)})
	batch := append(publishertest.Messages(good, 1), publishertest.Messages(bad, 1)...)
	errs := p.Publish(ctxFor(t, 10*time.Second), batch)
	if errs[0] != nil {
		t.Errorf("message %s to stream %s: %v", batch[0].ID, good, errs[0])
	}
	if errs[1] == nil || outbox.IsPermanent(errs[1]) || outbox.IsUnavailable(errs[1]) || !errors.Is(errs[1], outboxredis.ErrNotStream) {
		t.Errorf("message %s to a string key: %v; want a retryable ErrNotStream that counts an attempt", batch[1].ID, errs[1])
	}
	if !logs.Has(slog.LevelError, bad, "rename or delete") {
		t.Errorf("no ERROR log naming key %s and the fix; logged:\n%s", bad, logs)
	}
	if err := p.Check(ctxFor(t, 5*time.Second), bad); !errors.Is(err, outboxredis.ErrNotStream) {
		t.Errorf("Check(%s) = %v, want ErrNotStream", bad, err)
	}
	if err := p.Check(ctxFor(t, 5*time.Second), good, "no-such-stream-yet"); err != nil {
		t.Errorf("Check of a stream and of a missing key = %v, want nil", err)
	}
	if err := c.Del(ctxFor(t, 5*time.Second), bad).Err(); err != nil {
		t.Fatal(err)
	}
	if err := p.Publish(ctxFor(t, 10*time.Second), batch[1:])[0]; err != nil {
		t.Errorf("message %s once the string key is deleted: %v; want it appended", batch[1].ID, err)
	}
}

// A payload over Config.MaxPayload is never sent and fails for good.
func TestPayloadOverMaxPayloadIsPermanentAndNotSent(t *testing.T) {
	t.Parallel()
	c, stream := client(t)
	p := open(t, redistest.URL(t), outboxredis.Config{Stream: stream, MaxPayload: 10})
	m := publishertest.Messages("t", 1)
	m[0].Payload = []byte(strings.Repeat("x", 11))
	if err := p.Publish(ctxFor(t, 10*time.Second), m)[0]; !outbox.IsPermanent(err) || !errors.Is(err, outboxredis.ErrTooLarge) {
		t.Fatalf("message %s of 11 bytes with MaxPayload 10: %v; want a permanent ErrTooLarge", m[0].ID, err)
	}
	if xs := entries(t, c, stream); len(xs) != 0 {
		t.Fatalf("the stream has %d entries; the oversized message must not be sent", len(xs))
	}
}

// Redis out of memory (maxmemory with noeviction) refuses appends until
// memory is freed: retryable after Config.ThrottleDelay, and published once
// memory is back.
func TestOutOfMemoryIsRetryableAfterTheThrottleDelay(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	opts, _ := redis.ParseURL(srv.URL)
	admin := redis.NewClient(opts)
	t.Cleanup(func() { _ = admin.Close() })
	ctx := ctxFor(t, 10*time.Second)
	if err := admin.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err(); err != nil {
		t.Fatal(err)
	}
	if err := admin.ConfigSet(ctx, "maxmemory", "1").Err(); err != nil {
		t.Fatal(err)
	}
	p := open(t, srv.URL, outboxredis.Config{Stream: "orders", ThrottleDelay: 3 * time.Second})
	m := publishertest.Messages("orders", 1)
	err := p.Publish(ctx, m)[0]
	if d, ok := outbox.RetryAfterOf(err); !ok || d != 3*time.Second || outbox.IsPermanent(err) || !redis.HasErrorPrefix(errors.Unwrap(errors.Unwrap(err)), "OOM") {
		t.Fatalf("message %s while Redis is out of memory: %v (delay %v); want a retryable OOM error asking for 3s", m[0].ID, err, d)
	}
	if err := admin.ConfigSet(ctx, "maxmemory", "0").Err(); err != nil {
		t.Fatal(err)
	}
	if err := p.Publish(ctx, m)[0]; err != nil {
		t.Fatalf("message %s once memory is back: %v", m[0].ID, err)
	}
}

// A password Redis refuses never gets better by waiting: not "unavailable"
// (which would retry forever without counting), but a retryable failure
// counting an attempt, with the fix logged and the password kept out.
func TestRefusedPasswordIsRetryableNotUnavailableAndLogsTheFix(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	opts, _ := redis.ParseURL(srv.URL)
	admin := redis.NewClient(opts)
	t.Cleanup(func() { _ = admin.Close() })
	if err := admin.ConfigSet(ctxFor(t, 5*time.Second), "requirepass", "right-pw").Err(); err != nil {
		t.Fatal(err)
	}
	logs := &relaytest.LogCapture{}
	p := open(t, strings.Replace(srv.URL, "://", "://:wr0ng-pw@", 1), outboxredis.Config{Logger: slog.New(logs)})
	m := publishertest.Messages("orders", 1)
	err := p.Publish(ctxFor(t, 10*time.Second), m)[0]
	if err == nil || outbox.IsUnavailable(err) || outbox.IsPermanent(err) {
		t.Fatalf("message %s with a refused password: %v; want a retryable error that counts an attempt", m[0].ID, err)
	}
	if !logs.Has(slog.LevelError, "password") {
		t.Errorf("no ERROR log with the fix; logged:\n%s", logs)
	}
	if strings.Contains(err.Error()+logs.String(), "wr0ng-pw") {
		t.Errorf("the password leaked: %v\n%s", err, logs)
	}
}

// A server that does not reply (writes paused with CLIENT PAUSE) fails the
// batch retryably at Config.Timeout, not at the caller's longer deadline.
func TestNoReplyWithinTimeoutIsRetryableAndPrompt(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	opts, _ := redis.ParseURL(srv.URL)
	admin := redis.NewClient(opts)
	t.Cleanup(func() { _ = admin.Close() })
	if err := admin.Do(ctxFor(t, 5*time.Second), "CLIENT", "PAUSE", "5000", "WRITE").Err(); err != nil {
		t.Fatal(err)
	}
	p := open(t, srv.URL, outboxredis.Config{Stream: "orders", Timeout: 300 * time.Millisecond})
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

// A script running past busy-reply-threshold makes Redis answer BUSY:
// retryable after Config.ThrottleDelay.
func TestBusyScriptIsRetryableAfterTheThrottleDelay(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	opts, _ := redis.ParseURL(srv.URL)
	admin := redis.NewClient(opts)
	t.Cleanup(func() { _ = admin.Close() })
	ctx := ctxFor(t, 20*time.Second)
	if err := admin.ConfigSet(ctx, "busy-reply-threshold", "50").Err(); err != nil {
		t.Fatal(err)
	}
	script := redis.NewClient(opts)
	t.Cleanup(func() { _ = script.Close() })
	running := make(chan error, 1)
	go func() { running <- script.Eval(ctx, "while true do end", nil).Err() }()
	p := open(t, srv.URL, outboxredis.Config{Stream: "orders", ThrottleDelay: 2 * time.Second})
	m := publishertest.Messages("orders", 1)
	deadline := time.Now().Add(10 * time.Second)
	var err error
	for {
		// Until the script passes the threshold, XADD waits behind it.
		err = p.Publish(ctx, m)[0]
		if redis.HasErrorPrefix(errors.Unwrap(errors.Unwrap(err)), "BUSY") || time.Now().After(deadline) {
			break
		}
	}
	if d, ok := outbox.RetryAfterOf(err); !ok || d != 2*time.Second || outbox.IsPermanent(err) {
		t.Errorf("message %s while a script runs: %v (delay %v); want a retryable BUSY error asking for 2s", m[0].ID, err, d)
	}
	if err := admin.Do(ctx, "SCRIPT", "KILL").Err(); err != nil {
		t.Fatalf("SCRIPT KILL: %v", err)
	}
	<-running
}

// leastPrivilegeURL returns the test server's URL with a user of the test's
// own that may run XADD on stream and nothing else, deleted when the test
// ends.
func leastPrivilegeURL(t *testing.T, c *redis.Client, stream string) string {
	t.Helper()
	user := "outboxredis-xadd-only-" + strings.TrimPrefix(stream[strings.LastIndex(stream, "."):], ".")
	if err := c.Do(ctxFor(t, 5*time.Second), "ACL", "SETUSER", user, "on", ">xadd-pw", "~"+stream, "+xadd").Err(); err != nil {
		t.Fatalf("ACL SETUSER: %v", err)
	}
	t.Cleanup(func() { _ = c.Do(ctxFor(t, 5*time.Second), "ACL", "DELUSER", user).Err() })
	return strings.Replace(redistest.URL(t), "://", "://"+user+":xadd-pw@", 1)
}

// A user allowed XADD on the stream and nothing else publishes through
// Open's client (which must not run CLIENT SETNAME on connecting), and Check
// says it cannot check with that user rather than that the credentials are
// refused.
func TestUserAllowedOnlyXAddPublishesAndCheckSaysItCannotCheck(t *testing.T) {
	t.Parallel()
	c, stream := client(t)
	p := open(t, leastPrivilegeURL(t, c, stream), outboxredis.Config{Stream: stream})
	m := publishertest.Messages("orders", 1)
	if err := p.Publish(ctxFor(t, 10*time.Second), m)[0]; err != nil {
		t.Fatalf("message %s as a user allowed only XADD: %v", m[0].ID, err)
	}
	if xs := entries(t, c, stream); len(xs) != 1 {
		t.Fatalf("stream %s has %d entries, want 1", stream, len(xs))
	}
	if err := p.Check(ctxFor(t, 5*time.Second)); !errors.Is(err, outboxredis.ErrCheckNotPermitted) {
		t.Fatalf("Check as a user allowed only XADD = %v, want ErrCheckNotPermitted", err)
	}
}
