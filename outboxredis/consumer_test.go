package outboxredis_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/consumetest"
	"github.com/go-outbox/outbox/internal/redistest"
	"github.com/go-outbox/outbox/outboxredis"
	"github.com/go-outbox/outbox/publishertest"
)

// startConsume runs Consume on c in the background (see consumetest.Start).
// fail, if set, gives each attempt's outcome from the message and its
// attempt number in this process (nil: success).
func startConsume(t *testing.T, c redis.UniversalClient, cfg outboxredis.ConsumerConfig, fail func(m outbox.Message, try int) error) *consumetest.Run {
	t.Helper()
	return consumetest.Start(t, &cfg.Logger, consumetest.Options{Fail: consumetest.WithoutCtx(fail)}, func(ctx context.Context, fn func(context.Context, outbox.Message) error) error {
		return outboxredis.Consume(ctx, c, cfg, fn)
	})
}

// publish appends msgs to stream on the server at url with the Publisher.
func publish(t *testing.T, url, stream string, msgs ...outbox.Message) {
	t.Helper()
	pub := open(t, url, outboxredis.Config{Stream: stream})
	for i, err := range pub.Publish(ctxFor(t, 10*time.Second), msgs) {
		if err != nil {
			t.Fatalf("publish %s: %v", msgs[i].ID, err)
		}
	}
}

// pendingCount is how many entries group was given and did not acknowledge.
func pendingCount(t *testing.T, c redis.UniversalClient, stream, group string) int64 {
	t.Helper()
	p, err := c.XPending(ctxFor(t, 5*time.Second), stream, group).Result()
	if err != nil {
		t.Fatalf("XPENDING %s %s: %v", stream, group, err)
	}
	return p.Count
}

// fastRetries are backoffs short enough for tests.
func fastRetries(cfg outboxredis.ConsumerConfig) outboxredis.ConsumerConfig {
	cfg.BackoffBase, cfg.BackoffMax = time.Millisecond, 10*time.Millisecond
	return cfg
}

// Each message reaches the handler with its id, topic, key, payload and
// headers; a failure is retried in place; every entry ends acknowledged.
func TestConsumeHandsOverEachMessageAndAcknowledgesAfterTheHandler(t *testing.T) {
	t.Parallel()
	c, stream := client(t)
	batch := publishertest.Messages("orders.created", 5)
	publish(t, redistest.URL(t), stream, batch...)
	r := startConsume(t, c, fastRetries(outboxredis.ConsumerConfig{Stream: stream, Group: "billing"}),
		func(m outbox.Message, try int) error {
			if m.ID == batch[1].ID && try == 1 {
				return errors.New("database busy (injected)")
			}
			return nil
		})
	r.WaitHandled(t, batch...)
	r.WaitFor(t, "every entry acknowledged", func() bool { return pendingCount(t, c, stream, "billing") == 0 })
	if err := r.Stop(t); err != nil {
		t.Fatalf("Consume: %v", err)
	}
	seen := map[uuid.UUID]outbox.Message{}
	for _, m := range r.Handled() {
		seen[m.ID] = m
	}
	got := make([]publishertest.Received, 0, len(batch))
	for _, m := range batch {
		s := seen[m.ID]
		got = append(got, publishertest.Received{ID: s.ID.String(), Topic: s.Topic, Key: s.Key, Payload: s.Payload, Headers: s.Headers})
	}
	publishertest.RequireReceived(t, publishertest.Harness{Receive: func(context.Context, int) ([]publishertest.Received, error) { return got, nil }}, batch)
	if n := r.TriesOf(batch[1].ID); n != 2 {
		t.Errorf("the failing message was tried %d times, want 2", n)
	}
}

// Messages of one key are handled one at a time in stream order, while
// different keys are handled concurrently.
func TestConsumeKeepsEachKeysOrderWhileKeysRunConcurrently(t *testing.T) {
	t.Parallel()
	c, stream := client(t)
	batch := consumetest.KeyedBatch("orders.created", 40, 4)
	publish(t, redistest.URL(t), stream, batch...)
	keys := consumetest.NewKeyOrder()
	r := startConsume(t, c, outboxredis.ConsumerConfig{Stream: stream, Group: "billing", Concurrency: 4},
		func(m outbox.Message, _ int) error {
			keys.Enter(m.Key)
			defer keys.Leave(m.Key)
			time.Sleep(2 * time.Millisecond) // a handler's transaction
			return nil
		})
	r.WaitHandled(t, batch...)
	keys.Require(t, batch, r.HandledIDs())
}

// Each configuration mistake is refused before anything is read, with a
// *outbox.ConfigError naming the field.
func TestConsumeRefusesABadConfigurationNamingTheField(t *testing.T) {
	t.Parallel()
	ok := outboxredis.ConsumerConfig{Stream: "orders", Group: "billing"}
	for _, tc := range []struct {
		field  string
		change func(*outboxredis.ConsumerConfig)
		value  string
	}{
		{"Stream", func(c *outboxredis.ConsumerConfig) { c.Stream = "" }, `""`},
		{"Group", func(c *outboxredis.ConsumerConfig) { c.Group = "" }, `""`},
		{"MaxDeliver", func(c *outboxredis.ConsumerConfig) { c.MaxDeliver = -1 }, "-1"},
		{"ClaimAfter", func(c *outboxredis.ConsumerConfig) { c.ClaimAfter = -time.Second }, "-1s"},
		{"Concurrency", func(c *outboxredis.ConsumerConfig) { c.Concurrency = -2 }, "-2"},
		{"BackoffBase", func(c *outboxredis.ConsumerConfig) { c.BackoffBase = -time.Millisecond }, "-1ms"},
		{"BackoffMax", func(c *outboxredis.ConsumerConfig) { c.BackoffMax = -time.Millisecond }, "-1ms"},
		{"BackoffMax", func(c *outboxredis.ConsumerConfig) { c.ClaimAfter, c.BackoffMax = time.Second, time.Second }, "1s (ClaimAfter 1s)"},
		{"BackoffMax", func(c *outboxredis.ConsumerConfig) { c.ClaimAfter, c.BackoffMax = time.Second, 2*time.Second }, "2s (ClaimAfter 1s)"},
		{"ParkStream", func(c *outboxredis.ConsumerConfig) { c.ParkStream = "orders" }, `"orders" (the Stream read)`},
	} {
		cfg := ok
		tc.change(&cfg)
		// No client: a refused configuration touches none.
		err := outboxredis.Consume(t.Context(), nil, cfg, func(context.Context, outbox.Message) error { return nil })
		var cfgErr *outbox.ConfigError
		if !errors.As(err, &cfgErr) || cfgErr.Field != "outboxredis.ConsumerConfig."+tc.field || cfgErr.Value != tc.value || cfgErr.Fix == "" {
			t.Errorf("Consume with a bad %s (%s): %v; want a *outbox.ConfigError naming outboxredis.ConsumerConfig.%s with the value and a fix", tc.field, tc.value, err, tc.field)
		}
	}
}

// An entry without an outbox id (written by something else than the
// Publisher) cannot be handled: it is appended to the park stream with why
// and acknowledged at once, and the messages behind it go on.
func TestAnEntryThatIsNoOutboxMessageIsParkedAtOnceAndAcknowledged(t *testing.T) {
	t.Parallel()
	c, stream := client(t)
	park := redistest.Stream(t, c, "outboxredis.parked.")
	id, err := c.XAdd(ctxFor(t, 5*time.Second), &redis.XAddArgs{Stream: stream, Values: map[string]any{"order": "42", "status": "paid"}}).Result()
	if err != nil {
		t.Fatal(err)
	}
	m := publishertest.Messages("orders.created", 1)[0]
	publish(t, redistest.URL(t), stream, m)
	r := startConsume(t, c, outboxredis.ConsumerConfig{Stream: stream, Group: "billing", ParkStream: park}, nil)
	r.WaitHandled(t, m)
	r.WaitFor(t, "the foreign entry parked", func() bool { return len(entries(t, c, park)) == 1 })
	r.WaitFor(t, "every entry acknowledged", func() bool { return pendingCount(t, c, stream, "billing") == 0 })
	x := entries(t, c, park)[0]
	for field, want := range map[string]string{"order": "42", "status": "paid", outboxredis.FieldParkedFrom: stream + "/" + id, outboxredis.FieldParkedBy: "billing"} {
		if got, _ := x.Values[field].(string); got != want {
			t.Errorf("parked entry: field %s = %q, want %q (%v)", field, got, want, x.Values)
		}
	}
	if why, _ := x.Values[outboxredis.FieldParkedReason].(string); !strings.Contains(why, "not an outbox message") {
		t.Errorf("parked entry: %s = %q, want it to say it is not an outbox message", outboxredis.FieldParkedReason, why)
	}
	if !r.Logs.Has(slog.LevelError, "not an outbox message", id) {
		t.Errorf("no ERROR log naming entry %s; logs:\n%s", id, r.Logs)
	}
	if n := len(r.HandledIDs()); n != 1 {
		t.Errorf("the handler was given %d messages, want only the outbox one", n)
	}
}
