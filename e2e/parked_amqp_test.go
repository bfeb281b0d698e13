package e2e_test

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/amqptest"
	"github.com/go-outbox/outbox/internal/pgtest"
	"github.com/go-outbox/outbox/outboxamqp"
	"github.com/go-outbox/outbox/outboxpg"
	"github.com/go-outbox/outbox/publishertest"
	"github.com/go-outbox/outbox/relaytest"
)

// With Parked set to an inbox table on PostgreSQL, a RabbitMQ message that
// keeps failing is parked in the consumer's database after MaxDeliver
// attempts and acknowledged on the broker (not in the queue's dead-letter
// exchange, not requeued when the consumer stops); once the handler is
// fixed, an operator's retry request makes the running consumer apply it,
// and its parked row is gone. (Here rather than in outboxamqp, whose module
// stays free of any store.)
func TestRabbitMQMessageThatKeepsFailingIsParkedInTheConsumersDatabaseAndRetriedFromThere(t *testing.T) {
	t.Parallel()
	url := amqptest.URL(t)
	d := amqptest.Declare(t, url)
	ch, err := amqptest.Dial(t, url).Channel()
	if err != nil {
		t.Fatal(err)
	}
	deadLetters, queue := d.Queue+".parked", d.Queue+".consumed"
	t.Cleanup(func() {
		_, _ = ch.QueueDelete(queue, false, false, false)
		_, _ = ch.QueueDelete(deadLetters, false, false, false)
		_ = ch.Close()
	})
	if _, err := ch.QueueDeclare(deadLetters, false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare(queue, false, false, false, false, amqp.Table{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": deadLetters}); err != nil {
		t.Fatal(err)
	}
	if err := ch.QueueBind(queue, d.RoutingKey, d.Exchange, false, nil); err != nil {
		t.Fatal(err)
	}
	depth := func(name string) int {
		q, err := ch.QueueDeclarePassive(name, false, false, false, false, nil)
		if err != nil {
			t.Fatal(err)
		}
		return q.Messages
	}

	pool := pgtest.Pool(t)
	schema := pgtest.Schema(t)
	table, err := outboxpg.NewInboxTable(pool, outboxpg.InboxOptions{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	if err := table.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	effects := `"` + schema + `".effects`
	if _, err := pool.Exec(t.Context(), `CREATE TABLE `+effects+` (message_id uuid NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	applied := func(id uuid.UUID) bool {
		var n int
		if err := pool.QueryRow(t.Context(), `SELECT count(*) FROM `+effects+` WHERE message_id = $1`, id).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n == 1
	}
	parked := func(id uuid.UUID) (outbox.ParkedMessage, bool) {
		p, err := table.GetParked(t.Context(), "billing", id)
		if errors.Is(err, outbox.ErrNotFound) {
			return p, false
		}
		if err != nil {
			t.Fatal(err)
		}
		return p, true
	}
	inbox, err := outbox.NewInbox(table, "billing")
	if err != nil {
		t.Fatal(err)
	}

	batch := publishertest.Messages(d.RoutingKey, 3)
	poison := batch[0].ID
	for i, err := range openAMQP(t, url, outboxamqp.Config{Exchange: d.Exchange}).Publish(ctxFor(t, 30*time.Second), batch) {
		if err != nil {
			t.Fatalf("publish %s: %v", batch[i].ID, err)
		}
	}
	var (
		broken atomic.Bool
		mu     sync.Mutex
		tries  int
	)
	broken.Store(true)
	handler := inbox.Apply(func(ctx context.Context, tx pgx.Tx, m outbox.Message) error {
		if m.ID == poison {
			mu.Lock()
			tries++
			mu.Unlock()
			if broken.Load() {
				return errors.New("no such customer (injected)")
			}
		}
		_, err := tx.Exec(ctx, `INSERT INTO `+effects+` VALUES ($1)`, m.ID)
		return err
	})
	logs := &relaytest.LogCapture{}
	cfg := outboxamqp.ConsumerConfig{Queue: queue, Name: "billing", MaxDeliver: 3, BackoffBase: time.Millisecond, BackoffMax: 5 * time.Millisecond,
		Logger: slog.New(logs), Parked: table}
	consume := func() (stop func()) {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- outboxamqp.Consume(ctx, url, cfg, handler) }()
		var once sync.Once
		stop = func() {
			once.Do(func() {
				cancel()
				if err := <-done; err != nil {
					t.Errorf("Consume: %v", err)
				}
			})
		}
		t.Cleanup(stop)
		return stop
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}

	stop := consume()
	waitFor("the failing message parked in the consumer's database", func() bool { _, ok := parked(poison); return ok })
	waitFor("the other messages applied", func() bool { return applied(batch[1].ID) && applied(batch[2].ID) })
	stop() // the broker requeues what was not acknowledged
	p, _ := parked(poison)
	if p.Attempts != 3 || p.Error != "no such customer (injected)" || p.Topic != batch[0].Topic || string(p.Payload) != string(batch[0].Payload) {
		t.Fatalf("parked row of %s: %d attempts, error %q, topic %q, payload %q; want MaxDeliver = 3, the handler's error and the message", poison, p.Attempts, p.Error, p.Topic, p.Payload)
	}
	if !logs.Has(slog.LevelError, "parked", poison.String(), "no such customer") {
		t.Errorf("no ERROR log naming the parked message and its error:\n%s", logs)
	}
	if n, dead := depth(queue), depth(deadLetters); n != 0 || dead != 0 {
		t.Fatalf("after the consumer stopped: %d messages back in the queue, %d in the dead-letter exchange's queue; want 0 and 0 (parked in the database, acknowledged)", n, dead)
	}

	broken.Store(false) // the fix is deployed
	cfg.Logger = relaytest.TestLogger(t)
	stop = consume()
	if n, err := table.RequestRetry(t.Context(), "billing", poison); err != nil || n != 1 {
		t.Fatalf("request the retry of %s: %d, %v", poison, n, err)
	}
	waitFor("the retried message applied and unparked", func() bool { _, stillParked := parked(poison); return applied(poison) && !stillParked })
	stop()
	mu.Lock()
	defer mu.Unlock()
	if tries != 4 {
		t.Fatalf("the parked message reached the handler %d times in all; want 3 attempts and the retry: the broker must not deliver it again", tries)
	}
}
