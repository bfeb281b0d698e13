package e2e_test

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/natstest"
	"github.com/go-outbox/outbox/internal/redistest"
	"github.com/go-outbox/outbox/outboxnats"
	"github.com/go-outbox/outbox/outboxredis"
	"github.com/go-outbox/outbox/publishertest"
	"github.com/go-outbox/outbox/relaytest"
)

// parkingBroker is a broker and its consumer adapter, as the parked
// scenarios below see them (testParkedAndRetried, testWaitsBehindParked):
// JetStream (natsParking) and Redis streams (redisParking). Each scenario
// runs on each store's inbox table (newParkingDB).
type parkingBroker struct {
	// publish sends batch, in order, to a destination of the test's own.
	publish func(t *testing.T, batch []outbox.Message)
	// consume runs the adapter as consumer "billing" until ctx ends.
	consume func(ctx context.Context, maxDeliver int, log *slog.Logger, parked outbox.ParkStore, fn func(context.Context, outbox.Message) error) error
	// requireUnacked fails the test unless the first message published is
	// unacknowledged on the broker: called while its park waits to commit,
	// when a process stopping must get it again.
	requireUnacked func(t *testing.T, first uuid.UUID)
	// allAcked reports whether the broker holds nothing unacknowledged of
	// the n messages published, and nothing went to the adapter's own
	// park destination (Parked is set: the database keeps them).
	allAcked func(t *testing.T, n int) bool
}

// natsParking returns a JetStream server with a stream of the test's own.
func natsParking(t *testing.T) parkingBroker {
	srv := natstest.Start(t)
	js := srv.JetStream(t)
	stream, prefix := natstest.NewStream(t, js, jetstream.StreamConfig{})
	info := func() *jetstream.ConsumerInfo {
		cons, err := js.Consumer(ctxFor(t, 10*time.Second), stream, "billing")
		if err != nil {
			return nil
		}
		i, err := cons.Info(ctxFor(t, 10*time.Second))
		if err != nil {
			return nil
		}
		return i
	}
	return parkingBroker{
		publish: func(t *testing.T, batch []outbox.Message) {
			for i, err := range dialNATS(t, srv, outboxnats.Config{SubjectPrefix: prefix, Stream: stream}).Publish(ctxFor(t, 30*time.Second), batch) {
				if err != nil {
					t.Fatalf("publish %s: %v", batch[i].ID, err)
				}
			}
		},
		consume: func(ctx context.Context, maxDeliver int, log *slog.Logger, parked outbox.ParkStore, fn func(context.Context, outbox.Message) error) error {
			return outboxnats.Consume(ctx, js, outboxnats.ConsumerConfig{Stream: stream, Durable: "billing", MaxDeliver: maxDeliver,
				BackoffBase: time.Millisecond, BackoffMax: 5 * time.Millisecond, Logger: log, Parked: parked}, fn)
		},
		requireUnacked: func(t *testing.T, first uuid.UUID) {
			// The first message has stream sequence 1: while it is
			// unacknowledged the ack floor stays at 0.
			i := info()
			if i == nil {
				t.Fatal("no consumer info from the server")
			}
			if i.AckFloor.Stream != 0 || i.NumAckPending == 0 {
				t.Fatalf("while the park of %s (stream sequence 1) waits to commit, the server's ack floor is at stream sequence %d with %d pending; want 0 and at least 1: a process stopping now must get it again",
					first, i.AckFloor.Stream, i.NumAckPending)
			}
		},
		allAcked: func(t *testing.T, n int) bool {
			i := info()
			return i != nil && i.NumAckPending == 0 && i.AckFloor.Stream == uint64(n)
		},
	}
}

// redisParking returns a Redis stream of the test's own, and its park
// stream, which must stay empty.
func redisParking(t *testing.T) parkingBroker {
	c := redistest.Client(t)
	stream := redistest.Stream(t, c, "e2e.")
	parkStream := parkStreamOf(t, c, stream)
	return parkingBroker{
		publish: func(t *testing.T, batch []outbox.Message) { publishRedis(t, stream, batch) },
		consume: func(ctx context.Context, maxDeliver int, log *slog.Logger, parked outbox.ParkStore, fn func(context.Context, outbox.Message) error) error {
			return outboxredis.Consume(ctx, c, outboxredis.ConsumerConfig{Stream: stream, Group: "billing", Consumer: "billing-1", MaxDeliver: maxDeliver,
				BackoffBase: time.Millisecond, BackoffMax: 5 * time.Millisecond, Logger: log, Parked: parked}, fn)
		},
		requireUnacked: func(t *testing.T, first uuid.UUID) {
			entry := redisEntryOf(t, c, stream, first)
			p, err := c.XPendingExt(ctxFor(t, 10*time.Second), &redis.XPendingExtArgs{Stream: stream, Group: "billing", Start: entry, End: entry, Count: 1}).Result()
			if err != nil {
				t.Fatalf("XPENDING %s: %v", stream, err)
			}
			if len(p) != 1 {
				t.Fatalf("while the park of %s (entry %s) waits to commit, the entry is not pending in group billing; want it unacknowledged: a process stopping now must get it again", first, entry)
			}
		},
		allAcked: func(t *testing.T, _ int) bool {
			if n := redisLen(t, c, parkStream); n != 0 {
				t.Fatalf("the park stream %s holds %d entries; want none: with Parked set, the database keeps parked messages", parkStream, n)
			}
			return redisGroupAt(t, c, stream, "billing")
		},
	}
}

// testParkedAndRetried: a message that keeps failing is parked after
// MaxDeliver attempts, acknowledged on the broker only once its park
// committed (where the store can hold that commit), while the others are
// applied once; a retry request while the handler still fails parks it
// again; after the fix the next retry applies it once.
func testParkedAndRetried(t *testing.T, newDB newParkingDB, newBroker func(*testing.T) parkingBroker) {
	batch := publishertest.Messages("orders.created", 3)
	poison := batch[0].ID
	db := newDB(t, "billing", poison)
	b := newBroker(t)
	b.publish(t, batch)
	logs := &relaytest.LogCapture{}
	var hold func(t *testing.T, whileHeld func())
	if g, ok := db.(parkGate); ok {
		hold = g.gateFirstPark()
	}
	stop := running(t, func(ctx context.Context) error { return b.consume(ctx, 3, slog.New(logs), db.parkStore(), db.handler) })
	if hold != nil {
		hold(t, func() { b.requireUnacked(t, poison) })
	}
	waitFor(t, 20*time.Second, "the failing message parked in the consumer's database", func() bool { _, ok := db.parked(t, poison); return ok })
	waitFor(t, 20*time.Second, "the other messages applied", func() bool { return db.applied(t, batch[1].ID) == 1 && db.applied(t, batch[2].ID) == 1 })
	p, _ := db.parked(t, poison)
	db.requireParked(t, p, batch[0], 3)
	if !logs.Has(slog.LevelError, "parked", poison.String(), "no such customer") {
		t.Errorf("no ERROR log naming the parked message and its error:\n%s", logs)
	}
	waitFor(t, 20*time.Second, "every message acknowledged on the broker", func() bool { return b.allAcked(t, len(batch)) })

	// Retried while the cause is still there: parked again.
	before := p.ParkedAt
	db.requestRetry(t)
	waitFor(t, 20*time.Second, "the retried message parked again", func() bool {
		again, ok := db.parked(t, poison)
		return ok && !again.RetryRequested && again.ParkedAt.After(before)
	})
	if n := db.tried(poison); n != 6 {
		t.Fatalf("the failing message was tried %d times; want MaxDeliver = 3, and 3 more on the retry", n)
	}

	db.fix()
	db.requestRetry(t, poison)
	waitFor(t, 20*time.Second, "the retried message applied and unparked", func() bool {
		_, stillParked := db.parked(t, poison)
		return db.applied(t, poison) == 1 && !stillParked
	})
	stop()
	if n := db.tried(poison); n != 7 {
		t.Fatalf("the parked message reached the handler %d times in all; want 3 attempts, 3 on the first retry and 1 on the second: the broker must not deliver it again", n)
	}
	for _, m := range batch {
		if n := db.applied(t, m.ID); n != 1 {
			t.Fatalf("message %s applied %d times; want once", m.ID, n)
		}
	}
}

// testWaitsBehindParked: the OrderPaid of order-1 is parked; the
// OrderCancelled of order-1 behind it is parked as waiting behind it, never
// tried, and acknowledged, while order-2 goes on; once the handler is fixed,
// retrying the OrderPaid applies it, then the OrderCancelled, once each.
func testWaitsBehindParked(t *testing.T, newDB newParkingDB, newBroker func(*testing.T) parkingBroker) {
	batch := publishertest.Messages("orders", 3)
	batch[0].Key, batch[1].Key, batch[2].Key = "order-1", "order-1", "order-2"
	paid, cancelled, other := batch[0], batch[1], batch[2]
	db := newDB(t, "billing", paid.ID)
	b := newBroker(t)
	b.publish(t, batch)
	var (
		mu    sync.Mutex
		order []uuid.UUID
	)
	handler := func(ctx context.Context, m outbox.Message) error {
		err := db.handler(ctx, m)
		if err == nil {
			mu.Lock()
			order = append(order, m.ID)
			mu.Unlock()
		}
		return err
	}
	applied := func() []uuid.UUID { mu.Lock(); defer mu.Unlock(); return slices.Clone(order) }
	stop := running(t, func(ctx context.Context) error {
		return b.consume(ctx, 2, relaytest.TestLogger(t), db.parkStore(), handler)
	})

	waitFor(t, 20*time.Second, "OrderCancelled parked behind OrderPaid", func() bool { _, ok := db.parked(t, cancelled.ID); return ok })
	waitFor(t, 20*time.Second, "order-2 applied", func() bool { return db.applied(t, other.ID) == 1 })
	head, _ := db.parked(t, paid.ID)
	db.requireParked(t, head, paid, 2)
	waiting, _ := db.parked(t, cancelled.ID)
	if !waiting.Waiting || waiting.Behind != paid.ID || waiting.Attempts != 0 {
		t.Fatalf("OrderCancelled %s: waiting %v behind %s after %d attempts; want waiting behind OrderPaid %s, never tried", cancelled.ID, waiting.Waiting, waiting.Behind, waiting.Attempts, paid.ID)
	}
	if n := db.applied(t, cancelled.ID); n != 0 || db.tried(cancelled.ID) != 0 {
		t.Fatalf("OrderCancelled %s applied %d times, tried %d, while OrderPaid %s is parked; want never", cancelled.ID, n, db.tried(cancelled.ID), paid.ID)
	}
	waitFor(t, 20*time.Second, "every message acknowledged on the broker", func() bool { return b.allAcked(t, len(batch)) })

	db.fix()
	db.requestRetry(t, paid.ID)
	waitFor(t, 20*time.Second, "OrderPaid and OrderCancelled applied", func() bool { return len(applied()) == 3 })
	if got := applied(); !slices.Equal(got, []uuid.UUID{other.ID, paid.ID, cancelled.ID}) {
		t.Fatalf("applied %v; want order-2's %s, then OrderPaid %s, then OrderCancelled %s", got, other.ID, paid.ID, cancelled.ID)
	}
	waitFor(t, 20*time.Second, "nothing left parked", func() bool {
		_, p := db.parked(t, paid.ID)
		_, c := db.parked(t, cancelled.ID)
		return !p && !c
	})
	stop()
	if db.applied(t, paid.ID) != 1 || db.applied(t, cancelled.ID) != 1 {
		t.Fatalf("OrderPaid applied %d times, OrderCancelled %d; want once each", db.applied(t, paid.ID), db.applied(t, cancelled.ID))
	}
}
