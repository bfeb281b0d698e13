package outboxnats_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/natstest"
	"github.com/go-outbox/outbox/internal/pgtest"
	"github.com/go-outbox/outbox/outboxnats"
	"github.com/go-outbox/outbox/outboxpg"
	"github.com/go-outbox/outbox/publishertest"
	"github.com/go-outbox/outbox/relaytest"
)

var streamSeq atomic.Int64

// newStream creates a stream with a fresh name capturing "<lowercase
// name>.>" and returns its name and subject prefix (with the trailing dot).
func newStream(t *testing.T, js jetstream.JetStream, cfg jetstream.StreamConfig) (name, prefix string) {
	t.Helper()
	n := streamSeq.Add(1)
	name = fmt.Sprintf("S%d", n)
	prefix = fmt.Sprintf("s%d.", n)
	cfg.Name = name
	cfg.Subjects = []string{prefix + ">"}
	if _, err := js.CreateStream(ctxFor(t, 10*time.Second), cfg); err != nil {
		t.Fatalf("create stream %s: %v", name, err)
	}
	return name, prefix
}

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// dial returns a publisher on a connection of its own, closed when the test
// ends.
func dial(t *testing.T, srv *natstest.Server, cfg outboxnats.Config) *outboxnats.Publisher {
	t.Helper()
	cfg.ConnectOptions = append(natstest.ClientOptions(), cfg.ConnectOptions...)
	if cfg.Logger == nil {
		cfg.Logger = relaytest.TestLogger(t)
	}
	p, err := outboxnats.Dial(srv.URL(), cfg)
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// receiver reads a stream from its start with an ordered consumer; each call
// continues where the previous one stopped.
func receiver(js jetstream.JetStream, stream string) func(ctx context.Context, n int) ([]publishertest.Received, error) {
	var (
		mu   sync.Mutex
		cons jetstream.Consumer
	)
	return func(ctx context.Context, n int) ([]publishertest.Received, error) {
		mu.Lock()
		defer mu.Unlock()
		if cons == nil {
			c, err := js.OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{})
			if err != nil {
				return nil, err
			}
			cons = c
		}
		var out []publishertest.Received
		for len(out) < n {
			wait := time.Second
			if dl, ok := ctx.Deadline(); ok {
				wait = min(wait, time.Until(dl))
			}
			if wait <= 0 || ctx.Err() != nil {
				return out, fmt.Errorf("received %d of %d messages: %w", len(out), n, context.DeadlineExceeded)
			}
			batch, err := cons.Fetch(n-len(out), jetstream.FetchMaxWait(wait))
			if err != nil {
				return out, err
			}
			for m := range batch.Messages() {
				out = append(out, received(m))
			}
			if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) {
				return out, err
			}
		}
		return out, nil
	}
}

func received(m jetstream.Msg) publishertest.Received {
	h := map[string]string{}
	for k, v := range m.Headers() {
		if len(v) > 0 {
			h[k] = v[0]
		}
	}
	return publishertest.Received{
		ID:      h[outboxnats.HeaderMsgID],
		Topic:   h[outboxnats.HeaderTopic],
		Key:     h[outboxnats.HeaderKey],
		Payload: m.Data(),
		Headers: h,
	}
}

// pgOutbox is a migrated outbox table in a fresh PostgreSQL schema.
type pgOutbox struct {
	store *outboxpg.Store
	w     *outbox.Writer[pgx.Tx]
}

func newPGOutbox(t *testing.T) pgOutbox {
	t.Helper()
	pool := pgtest.Pool(t)
	opts := outboxpg.Options{Schema: pgtest.Schema(t)}
	m, err := outboxpg.NewMigrator(pool, opts)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Up(ctxFor(t, 30*time.Second)); err != nil {
		t.Fatal(err)
	}
	store, err := outboxpg.New(pool, opts)
	if err != nil {
		t.Fatal(err)
	}
	w, err := outbox.NewWriter(store, outbox.WriterConfig{})
	if err != nil {
		t.Fatal(err)
	}
	return pgOutbox{store: store, w: w}
}

// write commits msgs in one transaction and wakes the relays of the process.
func (o pgOutbox) write(ctx context.Context, msgs ...*outbox.Message) error {
	return o.w.Transact(ctx, func(tx pgx.Tx) error { return o.w.Write(ctx, tx, msgs...) })
}

// waitFor polls cond until it holds or the timeout passes.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
