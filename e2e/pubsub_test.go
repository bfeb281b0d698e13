package e2e_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"cloud.google.com/go/pubsub/v2/pstest"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/pgtest"
	"github.com/go-outbox/outbox/outboxpg"
	"github.com/go-outbox/outbox/outboxpubsub"
	"github.com/go-outbox/outbox/publishertest"
	"github.com/go-outbox/outbox/relaytest"
)

const pubsubProject = "outbox-e2e"

// pubsubFake is an in-process Pub/Sub (pstest) with topic "orders" and the
// subscription "billing" on it, with message ordering, and a client for it.
func pubsubFake(t *testing.T) *pubsub.Client {
	t.Helper()
	srv := pstest.NewServer()
	t.Cleanup(func() { _ = srv.Close() })
	c, err := pubsub.NewClient(ctxFor(t, 10*time.Second), pubsubProject, option.WithEndpoint(srv.Addr), option.WithoutAuthentication(),
		option.WithGRPCDialOption(grpc.WithTransportCredentials(insecure.NewCredentials())))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	topic := "projects/" + pubsubProject + "/topics/orders"
	if _, err := c.TopicAdminClient.CreateTopic(ctxFor(t, 10*time.Second), &pubsubpb.Topic{Name: topic}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.SubscriptionAdminClient.CreateSubscription(ctxFor(t, 10*time.Second), &pubsubpb.Subscription{
		Name: "projects/" + pubsubProject + "/subscriptions/billing", Topic: topic, EnableMessageOrdering: true, AckDeadlineSeconds: 60,
	}); err != nil {
		t.Fatal(err)
	}
	return c
}

// pgInbox is an inbox table in o's schema with an effects table beside it.
type pgInbox struct {
	inbox   *outbox.Inbox[pgx.Tx]
	effects string
	pool    interface {
		QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	}
}

func newPGInbox(t *testing.T, o pgOutbox) pgInbox {
	t.Helper()
	pool := pgtest.Pool(t)
	table, err := outboxpg.NewInboxTable(pool, outboxpg.InboxOptions{Schema: o.schema})
	if err != nil {
		t.Fatal(err)
	}
	if err := table.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	effects := `"` + o.schema + `".effects`
	if _, err := pool.Exec(t.Context(), `CREATE TABLE `+effects+` (message_id uuid NOT NULL, key text NOT NULL, seq bigserial)`); err != nil {
		t.Fatal(err)
	}
	inbox, err := outbox.NewInbox(table, "billing")
	if err != nil {
		t.Fatal(err)
	}
	return pgInbox{inbox: inbox, effects: effects, pool: pool}
}

// apply records m's effect in the handler's transaction.
func (in pgInbox) apply(ctx context.Context, tx pgx.Tx, m outbox.Message) error {
	_, err := tx.Exec(ctx, `INSERT INTO `+in.effects+` (message_id, key) VALUES ($1, $2)`, m.ID, m.Key)
	return err
}

// count is how many times id's effect was applied.
func (in pgInbox) count(t *testing.T, id uuid.UUID) (n int) {
	t.Helper()
	if err := in.pool.QueryRow(t.Context(), `SELECT count(*) FROM `+in.effects+` WHERE message_id = $1`, id).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// appliedLog records what an inbox handler applied, for a publishertest
// harness that reads the broker through a consumer adapter.
type appliedLog struct {
	in      pgInbox
	mu      sync.Mutex
	got     []publishertest.Received // in the order applied
	arrived chan struct{}
}

func newAppliedLog(in pgInbox) *appliedLog {
	return &appliedLog{in: in, arrived: make(chan struct{}, 1)}
}

// handler applies each message once through the inbox and records it.
func (l *appliedLog) handler() func(context.Context, outbox.Message) error {
	return l.in.inbox.Apply(func(ctx context.Context, tx pgx.Tx, m outbox.Message) error {
		if err := l.in.apply(ctx, tx, m); err != nil {
			return err
		}
		l.mu.Lock()
		l.got = append(l.got, publishertest.Received{ID: m.ID.String(), Topic: m.Topic, Key: m.Key, Payload: m.Payload, Headers: m.Headers})
		l.mu.Unlock()
		select {
		case l.arrived <- struct{}{}:
		default:
		}
		return nil
	})
}

// receive is a publishertest.Harness's Receive: the first n messages
// applied, once they are.
func (l *appliedLog) receive(ctx context.Context, n int) ([]publishertest.Received, error) {
	for {
		l.mu.Lock()
		if len(l.got) >= n {
			out := slices.Clone(l.got[:n])
			l.mu.Unlock()
			return out, nil
		}
		have := len(l.got)
		l.mu.Unlock()
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%d of %d messages applied: %w", have, n, ctx.Err())
		case <-l.arrived:
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// requireOnce fails the test unless each message applied left one effect.
func (l *appliedLog) requireOnce(t *testing.T) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, r := range l.got {
		if n := l.in.count(t, uuid.MustParse(r.ID)); n != 1 {
			t.Errorf("message %s applied %d times, want once", r.ID, n)
		}
	}
}

// From a PostgreSQL outbox through the relay to Pub/Sub with ordering keys,
// then Consume on an ordered subscription with a PostgreSQL inbox: every
// message arrives with its fields and is applied once. (The outbox here
// does not order by key, so the relay publishes in no key order; key order
// through Consume is outboxpubsub's
// TestConsumeKeepsEachKeysOrderWhenPubSubHandsOverAKeysMessagesTogether.)
func TestEndToEndFromPostgreSQLThroughTheRelayToPubSubAndConsumeWithAnInbox(t *testing.T) {
	t.Parallel()
	o := newPGOutbox(t)
	in := newPGInbox(t, o)
	c := pubsubFake(t)
	p, err := outboxpubsub.New(c, outboxpubsub.Config{Topic: "orders", OrderingKeys: true, Logger: relaytest.TestLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })

	applied := newAppliedLog(in)
	apply := applied.handler()
	ctx, stop := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		done <- outboxpubsub.Consume(ctx, c, outboxpubsub.ConsumerConfig{Subscription: "billing", Logger: relaytest.TestLogger(t)}, apply)
	}()
	h := publishertest.Harness{
		Publisher: p.ForRelay(),
		Topic:     "orders.created",
		Receive:   applied.receive,
	}
	publishertest.EndToEnd(t, h, o.store, o.write)
	stop()
	if err := <-done; err != nil {
		t.Fatalf("Consume: %v", err)
	}
	applied.requireOnce(t)
}

// The Pub/Sub consumer adapter with a PostgreSQL inbox: the process dies
// after the handler's transaction committed and before the acknowledgement;
// Pub/Sub delivers the message again to the next process, and the inbox
// skips it.
func TestPubSubConsumerWithAnInboxAppliesOnceAcrossACrashBeforeTheAck(t *testing.T) {
	t.Parallel()
	o := newPGOutbox(t)
	in := newPGInbox(t, o)
	c := pubsubFake(t)
	p, err := outboxpubsub.New(c, outboxpubsub.Config{Topic: "orders", OrderingKeys: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	batch := publishertest.Messages("orders.created", 3)
	for i, err := range p.Publish(ctxFor(t, 30*time.Second), batch) {
		if err != nil {
			t.Fatalf("publish %s: %v", batch[i].ID, err)
		}
	}
	committed := in.inbox.Apply(in.apply)
	var deliveries atomic.Int32
	cfg := outboxpubsub.ConsumerConfig{Subscription: "billing", Logger: relaytest.TestLogger(t)}

	// The first process commits a message, then dies before acknowledging it.
	ctx, crash := context.WithCancel(t.Context())
	if err := outboxpubsub.Consume(ctx, c, cfg, func(ctx context.Context, m outbox.Message) error {
		deliveries.Add(1)
		err := committed(context.WithoutCancel(ctx), m)
		crash()
		if err != nil {
			return err
		}
		return ctx.Err() // gone: no acknowledgement
	}); err != nil {
		t.Fatal(err)
	}

	ctx, stop := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		done <- outboxpubsub.Consume(ctx, c, cfg, func(ctx context.Context, m outbox.Message) error {
			deliveries.Add(1)
			return committed(ctx, m)
		})
	}()
	waitFor(t, 30*time.Second, "every message applied, and the committed one delivered again", func() bool {
		for _, m := range batch {
			if in.count(t, m.ID) == 0 {
				return false
			}
		}
		return deliveries.Load() >= int32(len(batch))+1
	})
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for _, m := range batch {
		if n := in.count(t, m.ID); n != 1 {
			t.Errorf("message %s applied %d times, want once", m.ID, n)
		}
	}
	t.Logf("%d deliveries of %d messages (the committed one delivered again after the crash)", deliveries.Load(), len(batch))
}
