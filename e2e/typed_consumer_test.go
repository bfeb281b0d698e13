package e2e_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/amqptest"
	"github.com/go-outbox/outbox/internal/kafkatest"
	"github.com/go-outbox/outbox/internal/natstest"
	"github.com/go-outbox/outbox/internal/pgtest"
	"github.com/go-outbox/outbox/outboxamqp"
	"github.com/go-outbox/outbox/outboxevents"
	"github.com/go-outbox/outbox/outboxkafka"
	"github.com/go-outbox/outbox/outboxnats"
	"github.com/go-outbox/outbox/outboxpg"
	"github.com/go-outbox/outbox/relaytest"
)

// Typed handlers consume from each broker through Dispatcher.Deliver: every
// handler applies every event once with its own inbox record, each key's
// events in order, whatever the others do. On the way, one handler panics
// once (Recover makes it a retry), its destination is down for longer than
// MaxDeliver attempts (no attempt counts, nothing is parked), and it fails
// for good on one event, whose share alone is parked and, once fixed and
// retried by an operator, applied by RetryParked.

// Paid is the second event type of an order, after Placed.
type Paid struct {
	OrderID string `json:"order_id"`
}

const (
	typedKeys   = 3
	typedMaxDel = 2 // the adapters' MaxDeliver: fewer than the unavailable answers
)

func TestTypedHandlersConsumeFromRabbitMQEachOnceInKeyOrder(t *testing.T) {
	t.Parallel()
	url := amqptest.URL(t)
	d := amqptest.Declare(t, url)
	run := newTypedRun(t, d.RoutingKey)
	for i, err := range openAMQP(t, url, outboxamqp.Config{Exchange: d.Exchange}).Publish(ctxFor(t, 30*time.Second), run.msgs) {
		if err != nil {
			t.Fatalf("publish %s: %v", run.msgs[i].ID, err)
		}
	}
	run.check(t, func(ctx context.Context, deliver func(context.Context, outbox.Message) error) error {
		return outboxamqp.Consume(ctx, url, outboxamqp.ConsumerConfig{Queue: d.Queue, Name: "orders-consumer", MaxDeliver: typedMaxDel,
			BackoffBase: time.Millisecond, BackoffMax: 10 * time.Millisecond, Logger: relaytest.TestLogger(t), Parked: run.table}, deliver)
	})
}

func TestTypedHandlersConsumeFromNATSEachOnceInKeyOrder(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	js := srv.JetStream(t)
	stream, prefix := natstest.NewStream(t, js, jetstream.StreamConfig{})
	run := newTypedRun(t, "orders")
	for i, err := range dialNATS(t, srv, outboxnats.Config{SubjectPrefix: prefix, Stream: stream}).Publish(ctxFor(t, 30*time.Second), run.msgs) {
		if err != nil {
			t.Fatalf("publish %s: %v", run.msgs[i].ID, err)
		}
	}
	run.check(t, func(ctx context.Context, deliver func(context.Context, outbox.Message) error) error {
		return outboxnats.Consume(ctx, js, outboxnats.ConsumerConfig{Stream: stream, Durable: "orders-consumer", MaxDeliver: typedMaxDel,
			BackoffBase: time.Millisecond, BackoffMax: 10 * time.Millisecond, Logger: relaytest.TestLogger(t), Parked: run.table}, deliver)
	})
}

func TestTypedHandlersConsumeFromKafkaEachOnceInKeyOrder(t *testing.T) {
	t.Parallel()
	c := kafkatest.Start(t)
	topic := c.Topic(t, 2, nil)
	run := newTypedRun(t, topic)
	publishKafka(t, c, topic, run.msgs)
	group := "orders-consumer-" + uuid.NewString()[:8]
	run.check(t, func(ctx context.Context, deliver func(context.Context, outbox.Message) error) error {
		return outboxkafka.Consume(ctx, c.Seeds(), outboxkafka.ConsumerConfig{Group: group, Topics: []string{topic}, MaxDeliver: typedMaxDel,
			BackoffBase: time.Millisecond, BackoffMax: 10 * time.Millisecond, Logger: relaytest.TestLogger(t), Parked: run.table}, deliver,
			kgo.FetchMaxWait(100*time.Millisecond))
	})
}

// typedRun is one broker's run: the events (as messages on the broker's
// topic) and the consumer's database on PostgreSQL, whose handlers note
// what they applied in a table.
type typedRun struct {
	msgs    []outbox.Message
	reg     *outboxevents.Registry
	pool    *pgxpool.Pool
	table   *outboxpg.InboxTable
	applied string // the table the handlers write: handler, key, event id, in commit order

	panicky uuid.UUID // read-model panics on it, once
	downOn  uuid.UUID // mailer's destination is down on it, typedDown times
	blocked uuid.UUID // mailer fails for good on it until fixed

	mu       sync.Mutex
	panicked bool
	downLeft int
	fixed    bool
}

// typedDown is how many times mailer answers unavailable: more than
// MaxDeliver, so counting them would park the message.
const typedDown = 3

// newTypedRun returns the events of typedKeys orders (Placed then Paid
// each), as messages on topic, and a fresh consumer database.
func newTypedRun(t *testing.T, topic string) *typedRun {
	t.Helper()
	r := &typedRun{reg: outboxevents.NewRegistry(outboxevents.Options{Source: "/e2e/typed"}), pool: pgtest.Pool(t), downLeft: typedDown}
	outboxevents.MustRegister[Placed](r.reg, "orders.placed")
	outboxevents.MustRegister[Paid](r.reg, "orders.paid")
	for k := range typedKeys {
		key := fmt.Sprintf("order-%d", k)
		for _, e := range []any{Placed{OrderID: key}, Paid{OrderID: key}} {
			m, err := r.reg.Message(e, key)
			if err != nil {
				t.Fatal(err)
			}
			m.ID = uuid.Must(uuid.NewV7())
			m.Topic = topic // the type travels in the ce-type header
			r.msgs = append(r.msgs, *m)
		}
	}
	r.blocked, r.panicky, r.downOn = r.msgs[0].ID, r.msgs[2].ID, r.msgs[4].ID

	schema := pgtest.Schema(t)
	table, err := outboxpg.NewInboxTable(r.pool, outboxpg.InboxOptions{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	if err := table.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	r.table = table
	r.applied = `"` + schema + `".applied`
	if _, err := r.pool.Exec(t.Context(), `CREATE TABLE `+r.applied+` (seq bigserial, handler text NOT NULL, key text NOT NULL, event_id uuid NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	return r
}

// dispatcher returns the consumer's dispatcher: read-model and mailer
// handle both types, through Recover.
func (r *typedRun) dispatcher(t *testing.T) *outboxevents.Dispatcher[pgx.Tx] {
	t.Helper()
	d, err := outboxevents.NewDispatcher(r.reg, r.table, outboxevents.Use(outboxevents.Log(relaytest.TestLogger(t)), outboxevents.Recover()))
	if err != nil {
		t.Fatal(err)
	}
	note := func(ctx context.Context, tx pgx.Tx, handler string) error {
		m, _ := outboxevents.MessageOf(ctx)
		_, err := tx.Exec(ctx, `INSERT INTO `+r.applied+` (handler, key, event_id) VALUES ($1, $2, $3)`, handler, m.Key, m.ID)
		return err
	}
	readModel := func(ctx context.Context, tx pgx.Tx, id uuid.UUID) error {
		r.mu.Lock()
		panics := id == r.panicky && !r.panicked
		r.panicked = r.panicked || panics
		r.mu.Unlock()
		if panics {
			panic("read model: nil map (injected)")
		}
		return note(ctx, tx, "read-model")
	}
	mailer := func(ctx context.Context, tx pgx.Tx, id uuid.UUID) error {
		r.mu.Lock()
		down := id == r.downOn && r.downLeft > 0
		if down {
			r.downLeft--
		}
		blocked := id == r.blocked && !r.fixed
		r.mu.Unlock()
		switch {
		case down:
			return outbox.Unavailable(errors.New("mail server: connection refused (injected)"))
		case blocked:
			return outbox.Permanent(errors.New("mailbox of order-0 blocked (injected)"))
		}
		return note(ctx, tx, "mailer")
	}
	// One name per handler, over both types: an order's events reach
	// each handler in order, its parked share holding the next.
	for name, fn := range map[string]func(context.Context, pgx.Tx, uuid.UUID) error{"read-model": readModel, "mailer": mailer} {
		must(t, outboxevents.Handle(d, name, func(ctx context.Context, tx pgx.Tx, _ Placed) error {
			m, _ := outboxevents.MessageOf(ctx)
			return fn(ctx, tx, m.ID)
		}))
		must(t, outboxevents.Handle(d, name, func(ctx context.Context, tx pgx.Tx, _ Paid) error {
			m, _ := outboxevents.MessageOf(ctx)
			return fn(ctx, tx, m.ID)
		}))
	}
	return d
}

// check consumes the events with consume (an adapter's Consume, with
// Parked set to r.table, handing each message to deliver) and checks the
// run; then it fixes mailer, requests the retry of its parked share, as an
// operator does, and checks that RetryParked applied it and the event held
// behind it, in order.
func (r *typedRun) check(t *testing.T, consume func(ctx context.Context, deliver func(context.Context, outbox.Message) error) error) {
	t.Helper()
	d := r.dispatcher(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	retrying := make(chan error, 1)
	go func() {
		retrying <- d.RetryParked(ctx, outboxevents.RetryConfig{Poll: 20 * time.Millisecond, Logger: relaytest.TestLogger(t)})
	}()
	stop := running(t, func(ctx context.Context) error { return consume(ctx, d.Deliver) })

	n := len(r.msgs)
	waitFor(t, 60*time.Second, "read-model to apply every event and mailer all but order-0's", func() bool {
		return r.count(t, "read-model") == n && r.count(t, "mailer") == n-2
	})
	placed, paid := r.msgs[0], r.msgs[1]
	if p, err := r.table.GetParked(t.Context(), "mailer", placed.ID); err != nil || p.Waiting {
		t.Fatalf("mailer's share of %s, on which it failed for good: %+v, %v; want it parked", placed.ID, p, err)
	}
	if p, err := r.table.GetParked(t.Context(), "mailer", paid.ID); err != nil || !p.Waiting || p.Behind != placed.ID {
		t.Fatalf("mailer's share of %s, the next event of order-0: %+v, %v; want it waiting behind %s", paid.ID, p, err, placed.ID)
	}
	for _, m := range r.msgs {
		// Adapter-level parking is under the consumer adapter's name:
		// nothing may be there, the down destination included.
		for _, consumer := range []string{"orders-consumer", "read-model"} {
			if p, err := r.table.GetParked(t.Context(), consumer, m.ID); !errors.Is(err, outbox.ErrNotFound) {
				t.Fatalf("event %s parked under %s: %+v, %v; want nothing parked there (a destination down %d times, past MaxDeliver %d, parks nothing)",
					m.ID, consumer, p, err, typedDown, typedMaxDel)
			}
		}
	}

	r.mu.Lock()
	r.fixed = true
	down, panicked := r.downLeft, r.panicked
	r.mu.Unlock()
	if down != 0 || !panicked {
		t.Fatalf("%d unavailable answers left, read-model panicked: %v; want the run to have gone through both", down, panicked)
	}
	if n, err := r.table.RequestRetry(t.Context(), "mailer", placed.ID); err != nil || n != 1 {
		t.Fatalf("request the retry of mailer's share of %s: %d, %v", placed.ID, n, err)
	}
	waitFor(t, 60*time.Second, "mailer to apply order-0's events after the retry", func() bool { return r.count(t, "mailer") == n })
	stop()
	cancel()
	if err := <-retrying; err != nil {
		t.Fatalf("RetryParked: %v", err)
	}
	r.requireOnceInKeyOrder(t)
}

// count returns how many events handler applied.
func (r *typedRun) count(t *testing.T, handler string) int {
	t.Helper()
	var n int
	if err := r.pool.QueryRow(t.Context(), `SELECT count(*) FROM `+r.applied+` WHERE handler = $1`, handler).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// requireOnceInKeyOrder fails the test unless each handler applied each
// event once, the events of a key in the order they were written (their
// UUIDv7 ids ascend).
func (r *typedRun) requireOnceInKeyOrder(t *testing.T) {
	t.Helper()
	rows, err := r.pool.Query(t.Context(), `SELECT handler, key, event_id FROM `+r.applied+` ORDER BY seq`)
	if err != nil {
		t.Fatal(err)
	}
	type handlerKey struct{ handler, key string }
	last := map[handlerKey]uuid.UUID{}
	seen := map[string]bool{}
	for rows.Next() {
		var hk handlerKey
		var id uuid.UUID
		if err := rows.Scan(&hk.handler, &hk.key, &id); err != nil {
			t.Fatal(err)
		}
		if seen[hk.handler+id.String()] {
			t.Errorf("%s applied event %s twice", hk.handler, id)
		}
		seen[hk.handler+id.String()] = true
		if prev := last[hk]; prev != uuid.Nil && id.String() < prev.String() {
			t.Errorf("%s applied event %s of key %s after the later %s", hk.handler, id, hk.key, prev)
		}
		last[hk] = id
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if want := 2 * len(r.msgs); len(seen) != want {
		t.Errorf("%d (handler, event) pairs applied; want %d", len(seen), want)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
