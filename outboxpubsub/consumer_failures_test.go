package outboxpubsub_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"cloud.google.com/go/pubsub/v2/pstest"
	"github.com/google/uuid"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/outboxpubsub"
	"github.com/go-outbox/outbox/publishertest"
	"github.com/go-outbox/outbox/relaytest"
)

// fastReconnects are backoffs short enough for tests, also between two
// tries to receive again.
func fastReconnects(cfg outboxpubsub.ConsumerConfig) outboxpubsub.ConsumerConfig {
	cfg.BackoffBase, cfg.BackoffMax = 10*time.Millisecond, 50*time.Millisecond
	return cfg
}

// A missing subscription needs an operator: Readiness says so, an ERROR log
// names it and the gcloud command that creates it, once however often
// Consume tries again, and once it exists Consume receives, says it is
// back, and hands over what is published to it.
func TestAMissingSubscriptionIsLoggedOnceWithTheFixAndConsumingStartsOnceItExists(t *testing.T) {
	t.Parallel()
	srv := server(t, nil)
	createTopic(t, srv, "orders")
	ready := &outboxpubsub.Readiness{}
	r := startConsume(t, newClient(t, srv), fastReconnects(outboxpubsub.ConsumerConfig{Subscription: "billing", Readiness: ready}), nil)
	r.WaitFor(t, "Readiness naming the missing subscription", func() bool {
		err := ready.Ready()
		return err != nil && strings.Contains(err.Error(), "not found") && strings.Contains(err.Error(), subName("billing"))
	})
	r.WaitFor(t, "Consume tried again a few times", func() bool { return r.CountLogs(slog.LevelDebug, "still cannot receive") >= 3 })
	if n := r.CountLogs(slog.LevelError, subName("billing"), "gcloud pubsub subscriptions create billing"); n != 1 {
		t.Fatalf("%d ERROR logs naming the subscription and the fix; want exactly 1 within ConfigErrorLogInterval; logs:\n%s", n, r.Logs)
	}

	createSubscription(t, srv, "billing", "orders", subOptions{})
	r.WaitFor(t, "Readiness nil once the subscription exists", func() bool { return ready.Ready() == nil })
	m := publishertest.Messages("orders.created", 1)[0]
	publishTo(t, srv, "orders", false, m)
	r.WaitHandled(t, m)
	if !r.Logs.Has(slog.LevelInfo, "back") {
		t.Errorf("no INFO log that the consumer is back; logs:\n%s", r.Logs)
	}
}

// Credentials that may consume but not read the subscription skip the
// check (said at INFO level); a refused pull is logged once at ERROR level
// with the grant to make, Readiness says so, and once it is granted Consume
// receives and says it is back.
func TestARefusedPullIsLoggedOnceWithTheGrantAndConsumingStartsOnceGranted(t *testing.T) {
	t.Parallel()
	srv := server(t, nil)
	createTopic(t, srv, "orders")
	createSubscription(t, srv, "billing", "orders", subOptions{})
	var granted atomic.Bool
	refuse := func() error {
		if granted.Load() {
			return nil
		}
		return status.Error(codes.PermissionDenied, "User not authorized to perform this action (injected)")
	}
	opts := append(clientOptions(srv.Addr), option.WithGRPCDialOption(grpc.WithChainStreamInterceptor(
		func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			if strings.HasSuffix(method, "/StreamingPull") {
				if err := refuse(); err != nil {
					return nil, err
				}
			}
			return streamer(ctx, desc, cc, method, opts...)
		})), option.WithGRPCDialOption(grpc.WithChainUnaryInterceptor(
		func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			if strings.HasSuffix(method, "/GetSubscription") {
				return status.Error(codes.PermissionDenied, "pubsub.subscriptions.get denied (injected)")
			}
			return invoker(ctx, method, req, reply, cc, opts...)
		})))
	c, err := pubsub.NewClient(ctxFor(t, 10*time.Second), project, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	ready := &outboxpubsub.Readiness{}
	r := startConsume(t, c, fastReconnects(outboxpubsub.ConsumerConfig{Subscription: "billing", Readiness: ready}), nil)
	r.WaitFor(t, "Readiness naming the grant", func() bool {
		err := ready.Ready()
		return err != nil && strings.Contains(err.Error(), "roles/pubsub.subscriber")
	})
	r.WaitFor(t, "Consume tried again a few times", func() bool { return r.CountLogs(slog.LevelDebug, "still cannot receive") >= 3 })
	if n := r.CountLogs(slog.LevelError, "roles/pubsub.subscriber", subName("billing")); n != 1 {
		t.Fatalf("%d ERROR logs with the grant; want exactly 1 within ConfigErrorLogInterval; logs:\n%s", n, r.Logs)
	}
	if n := r.CountLogs(slog.LevelInfo, "may not read the subscription"); n != 1 {
		t.Errorf("%d INFO logs that the check is skipped; want 1", n)
	}

	granted.Store(true)
	m := publishertest.Messages("orders.created", 1)[0]
	publishTo(t, srv, "orders", false, m)
	r.WaitHandled(t, m)
	r.WaitFor(t, "Readiness nil once granted", func() bool { return ready.Ready() == nil })
	r.WaitFor(t, "an INFO log that the consumer is back", func() bool { return r.Logs.Has(slog.LevelInfo, "back") })
}

// Consume returns nil promptly once its context ends, even with a handler
// running and messages held, having handed those back (nacked): the next
// Consume gets them at once, not after their ack deadline (a minute here).
// Readiness says it stopped.
func TestConsumeReturnsPromptlyWhenItsContextEndsAndHandsBackWhatItHeld(t *testing.T) {
	t.Parallel()
	srv := server(t, nil)
	createTopic(t, srv, "orders")
	createSubscription(t, srv, "billing", "orders", subOptions{ackDeadline: 60})
	batch := publishertest.Messages("orders.created", 4)
	for i := range batch {
		batch[i].Key = "order-7" // one key: the later ones wait in the lanes
	}
	publishTo(t, srv, "orders", false, batch...)
	c := newClient(t, srv)
	ready := &outboxpubsub.Readiness{}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	started := make(chan struct{})
	var once sync.Once
	done := make(chan error, 1)
	go func() {
		done <- outboxpubsub.Consume(ctx, c, outboxpubsub.ConsumerConfig{Subscription: "billing", Readiness: ready, Logger: relaytest.TestLogger(t)},
			func(ctx context.Context, _ outbox.Message) error {
				once.Do(func() { close(started) })
				<-ctx.Done() // a handler that takes long
				return ctx.Err()
			})
	}()
	select {
	case <-started:
	case <-time.After(20 * time.Second):
		t.Fatal("no message handed over within 20s")
	}
	// Messages on their way to the client when Receive stops are not the
	// client's to hand back: they come again after their ack deadline.
	// The client confirms each message it got (a receipt modack).
	waitUntil(t, "the client got every message", func() bool {
		for _, m := range batch {
			if received := modacks(srv, m.ID); received == 0 {
				return false
			}
		}
		return true
	})
	at := time.Now()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Consume returned %v after its context ended; want nil", err)
		}
		t.Logf("Consume returned %v after its context ended", time.Since(at).Round(time.Millisecond))
	case <-time.After(10 * time.Second):
		t.Fatal("Consume did not return within 10s after its context ended")
	}
	if err := ready.Ready(); err == nil || !strings.Contains(err.Error(), "stopped") {
		t.Errorf("Readiness after Consume returned: %v; want it to say it stopped", err)
	}
	r := startConsume(t, c, outboxpubsub.ConsumerConfig{Subscription: "billing"}, nil)
	deadline := time.Now().Add(20 * time.Second)
	for _, m := range batch {
		for r.HandledCount(m.ID) == 0 {
			if time.Now().After(deadline) {
				t.Fatalf("message %s not delivered again within 20s of the first Consume's return; want it handed back at once", m.ID)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
}

// A process that dies after its handler's transaction committed and before
// the acknowledgement leaves the message to Pub/Sub, which delivers it to
// the next Consume; an inbox there skips it, so its effect is applied once.
func TestAMessageCommittedBeforeACrashIsDeliveredAgainAndTheInboxAppliesItOnce(t *testing.T) {
	t.Parallel()
	srv := server(t, nil)
	createTopic(t, srv, "orders")
	createSubscription(t, srv, "billing", "orders", subOptions{ackDeadline: 60})
	batch := publishertest.Messages("orders.created", 3)
	publishTo(t, srv, "orders", false, batch...)
	c := newClient(t, srv)
	var (
		mu         sync.Mutex
		applied    = map[uuid.UUID]int{} // the effects and the inbox's dedup rows, as one transaction
		deliveries atomic.Int32
	)
	inbox := func(_ context.Context, m outbox.Message) error {
		deliveries.Add(1)
		mu.Lock()
		defer mu.Unlock()
		if applied[m.ID] == 0 {
			applied[m.ID]++
		}
		return nil
	}
	cfg := outboxpubsub.ConsumerConfig{Subscription: "billing", Concurrency: 1, Logger: relaytest.TestLogger(t)}
	ctx, crash := context.WithCancel(t.Context())
	var first uuid.UUID
	if err := outboxpubsub.Consume(ctx, c, cfg, func(ctx context.Context, m outbox.Message) error {
		_ = inbox(ctx, m)
		first = m.ID
		crash()
		return ctx.Err() // the process is gone: no acknowledgement
	}); err != nil {
		t.Fatal(err)
	}
	if n := acks(srv, first); n != 0 {
		t.Fatalf("message %s acknowledged %d times by the process that died; want 0", first, n)
	}

	r := startConsume(t, c, cfg, func(ctx context.Context, m outbox.Message, _ int) error { return inbox(ctx, m) })
	r.WaitHandled(t, batch...)
	r.WaitFor(t, "every message acknowledged", func() bool {
		for _, m := range batch {
			if acks(srv, m.ID) == 0 {
				return false
			}
		}
		return true
	})
	if r.HandledCount(first) == 0 {
		t.Errorf("the message committed before the crash was not delivered again")
	}
	mu.Lock()
	defer mu.Unlock()
	for _, m := range batch {
		if applied[m.ID] != 1 {
			t.Errorf("message %s applied %d times, want once", m.ID, applied[m.ID])
		}
	}
	t.Logf("%d deliveries of %d messages", deliveries.Load(), len(batch))
}

// Consume on a closed client cannot go on: it returns an error saying so,
// instead of trying again for ever.
func TestConsumeReturnsAnErrorWhenTheClientIsClosed(t *testing.T) {
	t.Parallel()
	srv := server(t, nil)
	createTopic(t, srv, "orders")
	createSubscription(t, srv, "billing", "orders", subOptions{})
	c, err := pubsub.NewClient(ctxFor(t, 10*time.Second), project, clientOptions(srv.Addr)...)
	if err != nil {
		t.Fatal(err)
	}
	_ = c.Close()
	err = outboxpubsub.Consume(ctxFor(t, 20*time.Second), c, fastReconnects(outboxpubsub.ConsumerConfig{Subscription: "billing", Logger: relaytest.TestLogger(t)}),
		func(context.Context, outbox.Message) error { return nil })
	if err == nil || !strings.Contains(err.Error(), "client is closed") {
		t.Fatalf("Consume on a closed client returned %v; want an error saying the client is closed", err)
	}
	var cfgErr *outbox.ConfigError
	if errors.As(err, &cfgErr) {
		t.Errorf("Consume on a closed client returned a configuration error: %v", err)
	}
}

// modacks is how many ack deadline changes the fake received for the
// message carrying outbox id id.
func modacks(srv *pstest.Server, id uuid.UUID) int {
	n := 0
	for _, m := range srv.Messages() {
		if m.Attributes[outboxpubsub.AttrID] == id.String() {
			n += len(m.Modacks)
		}
	}
	return n
}

// waitUntil polls cond until it holds, failing the test after 20s.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after 20s waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A subscription deleted while Consume receives from it is noticed by the
// consumer's read of it, though Receive may keep its stream open and get
// nothing: Readiness names it, an ERROR log gives the fix, and once the
// subscription exists again Consume receives from it.
func TestASubscriptionDeletedWhileReceivingFailsReadinessAndConsumingStartsAgainOnceItExists(t *testing.T) {
	t.Parallel()
	srv := server(t, nil)
	createTopic(t, srv, "orders")
	createSubscription(t, srv, "billing", "orders", subOptions{})
	c := newClient(t, srv)
	ready := &outboxpubsub.Readiness{}
	r := startConsume(t, c, fastReconnects(outboxpubsub.ConsumerConfig{Subscription: "billing", Readiness: ready}), nil)
	batch := publishertest.Messages("orders.created", 2)
	publishTo(t, srv, "orders", false, batch[0])
	r.WaitHandled(t, batch[0])
	r.WaitFor(t, "Readiness nil while receiving", func() bool { return ready.Ready() == nil })

	if err := c.SubscriptionAdminClient.DeleteSubscription(ctxFor(t, 10*time.Second), &pubsubpb.DeleteSubscriptionRequest{Subscription: subName("billing")}); err != nil {
		t.Fatal(err)
	}
	r.WaitFor(t, "Readiness naming the deleted subscription", func() bool {
		err := ready.Ready()
		return err != nil && strings.Contains(err.Error(), "not found") && strings.Contains(err.Error(), subName("billing"))
	})
	r.WaitFor(t, "an ERROR log with the fix", func() bool {
		return r.CountLogs(slog.LevelError, subName("billing"), "gcloud pubsub subscriptions create billing") > 0
	})

	createSubscription(t, srv, "billing", "orders", subOptions{})
	r.WaitFor(t, "Readiness nil once the subscription exists again", func() bool { return ready.Ready() == nil })
	publishTo(t, srv, "orders", false, batch[1])
	r.WaitHandled(t, batch[1])
}
