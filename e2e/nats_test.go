package e2e_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/natstest"
	"github.com/go-outbox/outbox/internal/pgtest"
	"github.com/go-outbox/outbox/outboxnats"
	"github.com/go-outbox/outbox/outboxpg"
	"github.com/go-outbox/outbox/publishertest"
	"github.com/go-outbox/outbox/relaytest"
)

func TestEndToEndFromPostgreSQLThroughTheRelayToJetStream(t *testing.T) {
	t.Parallel()
	o := newPGOutbox(t)
	srv := natstest.Start(t)
	admin := srv.JetStream(t)
	stream, prefix := natstest.NewStream(t, admin, jetstream.StreamConfig{})
	h := publishertest.Harness{
		Publisher: dialNATS(t, srv, outboxnats.Config{SubjectPrefix: prefix, Stream: stream}),
		Topic:     "orders.created",
		Receive:   natsReceiver(admin, stream),
	}
	publishertest.EndToEnd(t, h, o.store, o.write)
}

// dialNATS returns a publisher on a connection of its own, closed when the
// test ends.
func dialNATS(t *testing.T, srv *natstest.Server, cfg outboxnats.Config) *outboxnats.Publisher {
	t.Helper()
	cfg.ConnectOptions = natstest.ClientOptions()
	cfg.Logger = relaytest.TestLogger(t)
	p, err := outboxnats.Dial(srv.URL(), cfg)
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// natsReceiver reads a stream from its start; each call continues where the
// previous one stopped.
func natsReceiver(js jetstream.JetStream, stream string) func(ctx context.Context, n int) ([]publishertest.Received, error) {
	r := natstest.NewReader(js, stream)
	return func(ctx context.Context, n int) ([]publishertest.Received, error) {
		msgs, err := r.Next(ctx, n)
		out := make([]publishertest.Received, len(msgs))
		for i, m := range msgs {
			h := map[string]string{}
			for k, v := range m.Headers() {
				if len(v) > 0 {
					h[k] = v[0]
				}
			}
			out[i] = publishertest.Received{ID: h[outboxnats.HeaderMsgID], Topic: h[outboxnats.HeaderTopic], Key: h[outboxnats.HeaderKey], Payload: m.Data(), Headers: h}
		}
		return out, err
	}
}

// The broker stops in the middle of a relay run and comes back: the outcomes
// of the outage are retryable, nothing counts as published that the stream
// does not hold, and in the end the stream holds every message once.
func TestNATSRestartMidRunLosesNothingAndTheStreamDropsTheDuplicates(t *testing.T) {
	t.Parallel()
	start := time.Now()
	o := newPGOutbox(t)
	srv := natstest.Start(t)
	admin := srv.JetStream(t)
	stream, prefix := natstest.NewStream(t, admin, jetstream.StreamConfig{Duplicates: time.Minute})
	// A short ack timeout makes every batch sent during the outage fail
	// (retryably) instead of waiting for the broker.
	rec := newOutcomes(dialNATS(t, srv, outboxnats.Config{SubjectPrefix: prefix, Stream: stream, AckTimeout: 300 * time.Millisecond}))
	relaytest.StartRelay(t, o.store, rec, outbox.Config{
		BatchSize: 20, Workers: 4, LeaseDuration: 5 * time.Second, MaxAttempts: 10000,
		BackoffBase: 20 * time.Millisecond, BackoffMax: 200 * time.Millisecond,
		ActivePollInterval: 5 * time.Millisecond, PollInterval: 50 * time.Millisecond,
	})

	ctx := ctxFor(t, 2*time.Minute)
	var written []uuid.UUID
	write := func(n int) {
		t.Helper()
		for i := 0; i < n; i += 10 {
			batch := publishertest.Messages("orders.created", 10)
			if err := o.writeBatch(ctx, batch); err != nil {
				t.Fatalf("write: %v", err)
			}
			for _, m := range batch {
				written = append(written, m.ID)
			}
		}
	}

	write(100)
	waitFor(t, 30*time.Second, "50 messages confirmed before the outage", func() bool { ok, _ := rec.counts(); return ok >= 50 })
	srv.Shutdown()
	_, failedBefore := rec.counts()
	write(100)
	waitFor(t, 30*time.Second, "60 retryable failures during the outage", func() bool { _, f := rec.counts(); return f >= failedBefore+60 })
	okBeforeRestart, failedDuringOutage := rec.counts()
	srv.Restart(t)
	write(100)

	waitFor(t, 60*time.Second, "the outbox to drain after the restart", func() bool {
		st, err := o.store.Stats(ctx)
		return err == nil && st.Pending == 0
	})
	st, err := o.store.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Dead != 0 {
		t.Fatalf("%d messages dead-lettered", st.Dead)
	}
	rec.requireNoPermanent(t)
	okIDs := rec.confirmed()

	s, err := admin.Stream(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != uint64(len(written)) {
		t.Errorf("stream holds %d messages, want %d (each written message once)", info.State.Msgs, len(written))
	}
	got, err := natsReceiver(admin, stream)(ctx, int(info.State.Msgs))
	if err != nil {
		t.Fatalf("read the stream: %v", err)
	}
	inStream := map[string]int{}
	for _, r := range got {
		inStream[r.ID]++
	}
	for _, id := range written {
		if n := inStream[id.String()]; n != 1 {
			t.Errorf("message %s is %d times in the stream, want once", id, n)
		}
	}
	for _, id := range okIDs {
		if inStream[id.String()] == 0 {
			t.Errorf("message %s was reported published but the stream does not hold it", id)
		}
	}
	_, failedInAll := rec.counts()
	t.Logf("%d messages, %d confirmed before the restart; retryable failures: %d when the server stopped, %d during the outage, %d after the restart; %v",
		len(written), okBeforeRestart, failedBefore, failedDuringOutage-failedBefore, failedInAll-failedDuringOutage, time.Since(start).Round(time.Millisecond))
}

// The JetStream consumer adapter with a PostgreSQL inbox: the process dies
// after the handler's transaction committed and before the acknowledgement;
// the redelivery reaches the restarted consumer, and the inbox skips it.
func TestNATSConsumerWithAnInboxAppliesOnceAcrossACrashBeforeTheAck(t *testing.T) {
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
	srv := natstest.Start(t)
	admin := srv.JetStream(t)
	stream, prefix := natstest.NewStream(t, admin, jetstream.StreamConfig{})
	batch := publishertest.Messages("orders.created", 3)
	for i, err := range dialNATS(t, srv, outboxnats.Config{SubjectPrefix: prefix, Stream: stream}).Publish(t.Context(), batch) {
		if err != nil {
			t.Fatalf("publish %s: %v", batch[i].ID, err)
		}
	}
	var deliveries atomic.Int32
	apply := func(ctx context.Context, tx pgx.Tx, m outbox.Message) error {
		_, err := tx.Exec(ctx, `INSERT INTO `+effects+` VALUES ($1)`, m.ID)
		return err
	}
	cfg := outboxnats.ConsumerConfig{Stream: stream, Durable: "billing", AckWait: 500 * time.Millisecond, Logger: relaytest.TestLogger(t)}

	// The first process commits the first message, then dies.
	ctx, crash := context.WithCancel(t.Context())
	committed := inbox.Apply(apply)
	if err := outboxnats.Consume(ctx, admin, cfg, func(ctx context.Context, m outbox.Message) error {
		deliveries.Add(1)
		err := committed(context.WithoutCancel(ctx), m)
		crash()
		return err
	}); err != nil {
		t.Fatal(err)
	}

	ctx, stop := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		done <- outboxnats.Consume(ctx, admin, cfg, func(ctx context.Context, m outbox.Message) error {
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
	waitFor(t, 30*time.Second, "every message applied after the restart", func() bool {
		for _, m := range batch {
			if count(m.ID) == 0 {
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
		if n := count(m.ID); n != 1 {
			t.Errorf("message %s applied %d times, want once", m.ID, n)
		}
	}
	t.Logf("%d deliveries of %d messages (one redelivered after the crash)", deliveries.Load(), len(batch))
}
