package e2e_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/pgtest"
	"github.com/go-outbox/outbox/internal/redistest"
	"github.com/go-outbox/outbox/outboxpg"
	"github.com/go-outbox/outbox/outboxredis"
	"github.com/go-outbox/outbox/publishertest"
	"github.com/go-outbox/outbox/relaytest"
)

func TestEndToEndFromPostgreSQLThroughTheRelayToRedis(t *testing.T) {
	t.Parallel()
	o := newPGOutbox(t)
	c := redistest.Client(t)
	stream := redistest.Stream(t, c, "e2e.")
	h := publishertest.Harness{
		Publisher: openRedis(t, redistest.URL(t), outboxredis.Config{Stream: stream}),
		Topic:     "orders.created",
		Receive:   redisReceiver(c, stream),
	}
	publishertest.EndToEnd(t, h, o.store, o.write)
}

// openRedis returns a publisher with a client of its own for url, closed
// when the test ends.
func openRedis(t *testing.T, url string, cfg outboxredis.Config) *outboxredis.Publisher {
	t.Helper()
	cfg.Logger = relaytest.TestLogger(t)
	p, err := outboxredis.Open(url, cfg)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// publishRedis appends batch to stream on the shared test server, failing
// the test on any error.
func publishRedis(t *testing.T, stream string, batch []outbox.Message) {
	t.Helper()
	p := openRedis(t, redistest.URL(t), outboxredis.Config{Stream: stream})
	for i, err := range p.Publish(ctxFor(t, 30*time.Second), batch) {
		if err != nil {
			t.Fatalf("publish %s: %v", batch[i].ID, err)
		}
	}
}

// redisReceiver reads stream from its first entry with XRANGE, polling
// until n entries are there; each call goes on after the last entry the
// previous one returned.
func redisReceiver(c redis.UniversalClient, stream string) func(ctx context.Context, n int) ([]publishertest.Received, error) {
	after := "-"
	return func(ctx context.Context, n int) ([]publishertest.Received, error) {
		var got []publishertest.Received
		for len(got) < n {
			xs, err := c.XRangeN(ctx, stream, after, "+", int64(n-len(got))).Result()
			if err != nil {
				return got, fmt.Errorf("XRANGE %s: %w (%d of %d entries read)", stream, err, len(got), n)
			}
			for _, x := range xs {
				m, err := outboxredis.FromEntry(stream, x)
				if err != nil {
					return got, err
				}
				got = append(got, publishertest.Received{ID: m.ID.String(), Topic: m.Topic, Key: m.Key, Payload: m.Payload, Headers: m.Headers})
				after = "(" + x.ID
			}
			if len(xs) > 0 {
				continue
			}
			select {
			case <-ctx.Done():
				return got, fmt.Errorf("%d of %d entries in %s: %w", len(got), n, stream, ctx.Err())
			case <-time.After(20 * time.Millisecond):
			}
		}
		return got, nil
	}
}

// redisPending returns how many entries of stream the group gave out and
// no consumer acknowledged, and how many of those are consumer's.
func redisPending(t *testing.T, c redis.UniversalClient, stream, group, consumer string) (all, own int64) {
	t.Helper()
	p, err := c.XPending(ctxFor(t, 10*time.Second), stream, group).Result()
	if err != nil {
		t.Fatalf("XPENDING %s %s: %v", stream, group, err)
	}
	return p.Count, p.Consumers[consumer]
}

// The Redis consumer adapter with a PostgreSQL inbox: the process dies
// after the handler's transaction committed and before the XACK; the
// restarted process, under the same consumer name, reads the entries the
// group gave the dead one first, and the inbox skips the one it applied.
func TestRedisConsumerWithAnInboxAppliesOnceAcrossACrashBeforeTheAck(t *testing.T) {
	t.Parallel()
	o := newPGOutbox(t)
	pool := pgtest.Pool(t)
	table, err := outboxpg.NewInboxTable(pool, outboxpg.InboxOptions{Schema: o.schema})
	if err != nil {
		t.Fatal(err)
	}
	if err := table.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	effects := `"` + o.schema + `".effects`
	if _, err := pool.Exec(t.Context(), `CREATE TABLE `+effects+` (message_id uuid NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	inbox, err := outbox.NewInbox(table, "billing")
	if err != nil {
		t.Fatal(err)
	}
	c := redistest.Client(t)
	stream := redistest.Stream(t, c, "e2e.")
	batch := publishertest.Messages("orders.created", 3)
	publishRedis(t, stream, batch)
	var deliveries atomic.Int32
	apply := func(ctx context.Context, tx pgx.Tx, m outbox.Message) error {
		_, err := tx.Exec(ctx, `INSERT INTO `+effects+` VALUES ($1)`, m.ID)
		return err
	}
	// ClaimAfter is out of reach: the restarted process must get the entries
	// as its own, not take them over from another consumer.
	cfg := outboxredis.ConsumerConfig{Stream: stream, Group: "billing", Consumer: "billing-1", ClaimAfter: 10 * time.Minute, Logger: relaytest.TestLogger(t)}

	// The first process commits the first message, then dies.
	ctx, crash := context.WithCancel(t.Context())
	committed := inbox.Apply(apply)
	if err := outboxredis.Consume(ctx, c, cfg, func(ctx context.Context, m outbox.Message) error {
		deliveries.Add(1)
		err := committed(context.WithoutCancel(ctx), m)
		crash()
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if _, own := redisPending(t, c, stream, "billing", "billing-1"); own == 0 {
		t.Fatalf("after the crash no entry of %s is pending for consumer billing-1; want the committed one unacknowledged", stream)
	}

	ctx, stop := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		done <- outboxredis.Consume(ctx, c, cfg, func(ctx context.Context, m outbox.Message) error {
			deliveries.Add(1)
			return committed(ctx, m)
		})
	}()
	count := func(id uuid.UUID) (n int) {
		if err := pool.QueryRow(t.Context(), `SELECT count(*) FROM `+effects+` WHERE message_id = $1`, id).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	t.Cleanup(func() {
		if t.Failed() {
			all, own := redisPending(t, c, stream, "billing", "billing-1")
			t.Logf("at the end: %d deliveries; %d entries pending in the group, %d of them billing-1's", deliveries.Load(), all, own)
		}
	})
	waitFor(t, 30*time.Second, "every message applied and acknowledged after the restart", func() bool {
		for _, m := range batch {
			if count(m.ID) == 0 {
				return false
			}
		}
		all, _ := redisPending(t, c, stream, "billing", "billing-1")
		return all == 0 && deliveries.Load() >= int32(len(batch))+1
	})
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for _, m := range batch {
		if n := count(m.ID); n != 1 {
			t.Errorf("message %s applied %d times, want once", m.ID, n)
		}
	}
	t.Logf("%d deliveries of %d messages (the committed ones redelivered after the crash)", deliveries.Load(), len(batch))
}

// redisGroupAt reports whether group has read stream up to its last entry
// and has nothing unacknowledged.
func redisGroupAt(t *testing.T, c redis.UniversalClient, stream, group string) bool {
	t.Helper()
	ctx := ctxFor(t, 10*time.Second)
	last, err := c.XRevRangeN(ctx, stream, "+", "-", 1).Result()
	if err != nil || len(last) == 0 {
		return false
	}
	groups, err := c.XInfoGroups(ctx, stream).Result()
	if err != nil {
		return false
	}
	for _, g := range groups {
		if g.Name == group {
			return g.Pending == 0 && g.LastDeliveredID == last[0].ID
		}
	}
	return false
}

// redisLen is XLEN of stream (0 when it does not exist).
func redisLen(t *testing.T, c redis.UniversalClient, stream string) int64 {
	t.Helper()
	n, err := c.XLen(ctxFor(t, 10*time.Second), stream).Result()
	if err != nil {
		t.Fatalf("XLEN %s: %v", stream, err)
	}
	return n
}

// parkStreamOf is the ParkStream the consumer of stream uses by default,
// deleted when the test ends.
func parkStreamOf(t *testing.T, c redis.UniversalClient, stream string) string {
	name := stream + outboxredis.ParkStreamSuffix
	t.Cleanup(func() { _ = c.Del(context.Background(), name).Err() })
	return name
}

// redisEntryOf returns the id of the entry of stream carrying message id.
func redisEntryOf(t *testing.T, c redis.UniversalClient, stream string, id uuid.UUID) string {
	t.Helper()
	xs, err := c.XRange(ctxFor(t, 10*time.Second), stream, "-", "+").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range xs {
		if v, _ := x.Values[outboxredis.FieldID].(string); strings.EqualFold(v, id.String()) {
			return x.ID
		}
	}
	t.Fatalf("no entry of %s carries message %s", stream, id)
	return ""
}
