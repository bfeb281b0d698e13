package outboxredis_test

import (
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/go-outbox/outbox/internal/redistest"
	"github.com/go-outbox/outbox/outboxredis"
	"github.com/go-outbox/outbox/publishertest"
)

// aclClient returns a client of an ACL user of its own on the shared server,
// allowed every command on keys starting with stream except those denied
// ("-xautoclaim"), and a function that grants it more rules. The user is
// deleted when the test ends.
func aclClient(t *testing.T, admin *redis.Client, stream string, denied ...string) (*redis.Client, func(rules ...string)) {
	t.Helper()
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	user, password := "outboxredis-test-"+hex.EncodeToString(b), hex.EncodeToString(b)
	setUser := func(rules ...string) {
		t.Helper()
		args := []any{"ACL", "SETUSER", user}
		for _, r := range rules {
			args = append(args, r)
		}
		if err := admin.Do(ctxFor(t, 5*time.Second), args...).Err(); err != nil {
			t.Fatalf("ACL SETUSER %s %v: %v", user, rules, err)
		}
	}
	setUser(append([]string{"on", ">" + password, "~" + stream + "*", "+@all"}, denied...)...)
	t.Cleanup(func() { _ = admin.Do(ctxFor(t, 5*time.Second), "ACL", "DELUSER", user).Err() })
	opts := *admin.Options()
	opts.Username, opts.Password = user, password
	c := redis.NewClient(&opts)
	t.Cleanup(func() { _ = c.Close() })
	return c, setUser
}

// A user refused XAUTOCLAIM alone can create the group and read it, but
// not take over what dead consumers left: Consume does not count itself
// consuming at each retry (which renewed the ERROR log's limit and the
// backoff), so the fix is logged once and Readiness keeps the error; once
// granted, it consumes.
func TestACommandRefusedByTheACLIsLoggedOnceWithTheFixAndReadinessKeepsTheError(t *testing.T) {
	t.Parallel()
	admin, stream := client(t)
	c, grant := aclClient(t, admin, stream, "-xautoclaim")
	ready := &outboxredis.Readiness{}
	r := startConsume(t, c, fastReconnects(outboxredis.ConsumerConfig{Stream: stream, Group: "billing", Readiness: ready}), nil)
	r.WaitFor(t, "the read tried again a few times", func() bool { return r.CountLogs(slog.LevelDebug, "still cannot read") >= 3 })
	if n := r.CountLogs(slog.LevelError, "XAUTOCLAIM", "NOPERM"); n != 1 {
		t.Errorf("%d ERROR logs of the refused XAUTOCLAIM; want exactly 1 within ConfigErrorLogInterval; logs:\n%s", n, r.Logs)
	}
	if r.Logs.Has(slog.LevelInfo, "back") {
		t.Errorf("the consumer said it was back while XAUTOCLAIM is refused; logs:\n%s", r.Logs)
	}
	if err := ready.Ready(); err == nil || !strings.Contains(err.Error(), "NOPERM") {
		t.Errorf("Readiness while XAUTOCLAIM is refused: %v; want the NOPERM error", err)
	}

	grant("+xautoclaim")
	r.WaitFor(t, "Readiness nil once granted", func() bool { return ready.Ready() == nil })
	m := publishertest.Messages("orders.created", 1)[0]
	publish(t, redistest.URL(t), stream, m)
	r.WaitHandled(t, m)
}

// An acknowledgement the ACL refuses leaves the entry pending: the ERROR
// log names XACK, and the entry, no longer held by the lanes, is taken over
// by the same consumer after ClaimAfter and acknowledged once XACK is
// granted.
func TestAnAcknowledgementThatFailsLeavesTheEntryPendingAndItIsHandledAgain(t *testing.T) {
	t.Parallel()
	admin, stream := client(t)
	c, grant := aclClient(t, admin, stream, "-xack")
	m := publishertest.Messages("orders.created", 1)[0]
	publish(t, redistest.URL(t), stream, m)
	r := startConsume(t, c, fastReconnects(outboxredis.ConsumerConfig{Stream: stream, Group: "billing", ClaimAfter: 200 * time.Millisecond}), nil)
	r.WaitHandled(t, m)
	r.WaitFor(t, "an ERROR log naming XACK", func() bool { return r.Logs.Has(slog.LevelError, "XACK", "NOPERM") })
	if n := pendingCount(t, admin, stream, "billing"); n != 1 {
		t.Fatalf("%d entries pending after the refused XACK; want 1", n)
	}
	r.WaitFor(t, "the entry handled again after ClaimAfter", func() bool { return r.HandledCount(m.ID) >= 2 })
	grant("+xack")
	r.WaitFor(t, "the entry acknowledged once granted", func() bool { return pendingCount(t, admin, stream, "billing") == 0 })
}
