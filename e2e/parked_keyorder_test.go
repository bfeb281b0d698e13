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

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/natstest"
	"github.com/go-outbox/outbox/outboxnats"
	"github.com/go-outbox/outbox/publishertest"
	"github.com/go-outbox/outbox/relaytest"
)

// Issue 24, defect 7: the OrderPaid of order-1 is parked in the consumer's
// database; the OrderCancelled of order-1 behind it must not be applied
// before it (the read model would say paid while the order is cancelled):
// it is parked as waiting behind it and acknowledged, while order-2 goes
// on. Once the handler is fixed, retrying the OrderPaid applies it, then
// the OrderCancelled, and nothing stays parked. Before the fix the
// OrderCancelled was applied at once.
func TestNATSMessageBehindAParkedOneOfItsKeyWaitsInTheConsumersDatabaseUntilThatOneIsRetried(t *testing.T) {
	t.Parallel()
	batch := publishertest.Messages("orders", 3)
	batch[0].Key, batch[1].Key, batch[2].Key = "order-1", "order-1", "order-2"
	paid, cancelled, other := batch[0], batch[1], batch[2]
	db := newConsumerDB(t, "billing", paid.ID)
	srv := natstest.Start(t)
	js := srv.JetStream(t)
	stream, prefix := natstest.NewStream(t, js, jetstream.StreamConfig{})
	for i, err := range dialNATS(t, srv, outboxnats.Config{SubjectPrefix: prefix, Stream: stream}).Publish(ctxFor(t, 30*time.Second), batch) {
		if err != nil {
			t.Fatalf("publish %s: %v", batch[i].ID, err)
		}
	}
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
	logs := &relaytest.LogCapture{}
	cfg := outboxnats.ConsumerConfig{Stream: stream, Durable: "billing", MaxDeliver: 2, BackoffBase: time.Millisecond, BackoffMax: 5 * time.Millisecond,
		Logger: slog.New(logs), Parked: db.table}
	stop := running(t, func(ctx context.Context) error { return outboxnats.Consume(ctx, js, cfg, handler) })

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
	cons, err := js.Consumer(ctxFor(t, 10*time.Second), stream, "billing")
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "every message acknowledged on the server", func() bool {
		info, err := cons.Info(ctxFor(t, 10*time.Second))
		return err == nil && info.NumAckPending == 0 && info.AckFloor.Stream == uint64(len(batch))
	})

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
