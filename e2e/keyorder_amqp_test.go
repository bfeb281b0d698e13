package e2e_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/amqptest"
	"github.com/go-outbox/outbox/internal/pgtest"
	"github.com/go-outbox/outbox/internal/proxytest"
	"github.com/go-outbox/outbox/outboxamqp"
	"github.com/go-outbox/outbox/outboxpg"
	"github.com/go-outbox/outbox/publishertest"
	"github.com/go-outbox/outbox/relaytest"
)

// Issue 25, item 4: two consumer processes of one service (two
// outboxamqp.Consume loops, each with its own connection: what the broker
// sees of two processes) read one queue through one inbox.

// Size of the runs: keyOrderKeys keys of keyOrderPerKey messages each,
// interleaved as a busy table publishes them.
const (
	keyOrderKeys   = 50
	keyOrderPerKey = 100
)

// On a plain queue the broker hands deliveries round-robin, so each process
// gets a share of every key and applies it concurrently with the other's
// share: a key's messages are applied out of order. The test measures how
// many, and asserts only what still holds (each applied once, through the
// inbox); the number depends on timing, so it is logged, not asserted.
func TestTwoConsumerProcessesOnAPlainRabbitMQQueueApplyKeysOutOfOrder(t *testing.T) {
	t.Parallel()
	run := newKeyOrderRun(t, false)
	a, b := run.start(t, "a"), run.start(t, "b")
	run.waitForConsumers(t, 2)
	run.publish(t)
	run.waitForAll(t)
	a.stop()
	b.stop()
	run.requireEachAppliedOnce(t)
	t.Logf("plain queue: %d of %d messages applied after a later message of their key (%s)", run.db.outOfOrder(t), len(run.msgs), run.perProcess(t))
}

// With x-single-active-consumer the broker delivers to one of the two
// processes; the other applies nothing until the active one goes, then
// takes over with the unacknowledged messages first. Every key is applied
// in order across two takeovers: a's connection cut (what the broker sees
// of a killed process; a connects again and waits as the standby), then b
// stopped.
func TestTwoConsumerProcessesOnASingleActiveConsumerQueueApplyEveryKeyInOrderAcrossTakeovers(t *testing.T) {
	t.Parallel()
	run := newKeyOrderRun(t, true)
	a := run.start(t, "a")
	// The broker counts only the active consumer of such a queue: wait
	// for a to be it, then b comes as the standby (it has seconds to
	// connect before the first takeover).
	run.waitForConsumers(t, 1)
	b := run.start(t, "b")
	run.publish(t)

	n := len(run.msgs)
	waitFor(t, 60*time.Second, "a third of the messages applied", func() bool { return run.applied(t) >= n/3 })
	if got := run.applied(t, "b"); got != 0 {
		t.Fatalf("process b applied %d messages while a was connected (%s); want b a standby that applies nothing", got, run.perProcess(t))
	}
	a.proxy.Cut()
	waitFor(t, 60*time.Second, "process b to take over", func() bool { return run.applied(t, "b") > 0 })
	waitFor(t, 60*time.Second, "two thirds of the messages applied", func() bool { return run.applied(t) >= 2*n/3 })
	b.stop()
	byA := run.applied(t, "a")
	run.waitForAll(t)
	if run.applied(t, "a") == byA {
		t.Fatalf("process a applied nothing after b stopped (%s); want it to take over again", run.perProcess(t))
	}
	a.stop()

	run.requireEachAppliedOnce(t)
	if late := run.db.outOfOrder(t); late != 0 {
		t.Fatalf("%d of %d messages applied after a later message of their key (%s); want 0: a single active consumer keeps key order across processes", late, n, run.perProcess(t))
	}
	t.Logf("single active consumer: 0 of %d messages out of key order (%s)", n, run.perProcess(t))
}

// keyOrderRun is one run: a queue bound to a fresh exchange, the messages
// to publish to it, and the consumer service's database.
type keyOrderRun struct {
	db    *keyOrderDB
	dest  amqptest.Destination
	msgs  []outbox.Message
	procs []*keyOrderProcess
	queue string
	url   string
}

// newKeyOrderRun declares a quorum queue (with a single active consumer if
// sac) through outboxamqp.DeclareQueue, deleted when the test ends.
func newKeyOrderRun(t *testing.T, sac bool) *keyOrderRun {
	t.Helper()
	url := amqptest.URL(t)
	d := amqptest.Declare(t, url)
	r := &keyOrderRun{dest: d, queue: d.Queue + ".keyorder", url: url}
	if err := outboxamqp.DeclareQueue(ctxFor(t, 30*time.Second), url, outboxamqp.Queue{
		Name: r.queue, Exchange: d.Exchange, Bindings: []string{d.RoutingKey}, SingleActiveConsumer: sac,
	}); err != nil {
		t.Fatalf("DeclareQueue: %v", err)
	}
	ch, err := amqptest.Dial(t, url).Channel()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = ch.QueueDelete(r.queue, false, false, false) })
	r.msgs = publishertest.Messages(d.RoutingKey, keyOrderKeys*keyOrderPerKey)
	for i := range r.msgs {
		r.msgs[i].Key = fmt.Sprintf("order-%d", i%keyOrderKeys)
	}
	r.db = newKeyOrderDB(t, r.msgs)
	return r
}

// keyOrderProcess is one consumer process: outboxamqp.Consume on a
// connection of its own, through a proxy that can cut it.
type keyOrderProcess struct {
	name  string
	proxy *proxytest.Proxy
	stop  func()
}

func (r *keyOrderRun) start(t *testing.T, name string) *keyOrderProcess {
	t.Helper()
	p := &keyOrderProcess{name: name, proxy: proxytest.ForURL(t, r.url)}
	cfg := outboxamqp.ConsumerConfig{Queue: r.queue, Name: "billing", Logger: relaytest.TestLogger(t).With("process", name),
		BackoffBase: 10 * time.Millisecond, BackoffMax: 200 * time.Millisecond}
	handler := r.db.inbox.Apply(func(ctx context.Context, tx pgx.Tx, m outbox.Message) error { return r.db.apply(ctx, tx, name, m) })
	url := p.proxy.URL(r.url)
	p.stop = running(t, func(ctx context.Context) error { return outboxamqp.Consume(ctx, url, cfg, handler) })
	r.procs = append(r.procs, p)
	return p
}

// waitForConsumers waits until the queue has n consumers, so that the
// messages published next find every process there.
func (r *keyOrderRun) waitForConsumers(t *testing.T, n int) {
	t.Helper()
	ch, err := amqptest.Dial(t, r.url).Channel()
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	waitFor(t, 30*time.Second, fmt.Sprintf("%d consumers on queue %s", n, r.queue), func() bool {
		q, err := ch.QueueDeclarePassive(r.queue, true, false, false, false, nil)
		if err != nil {
			t.Fatalf("inspect queue %s: %v", r.queue, err)
		}
		return q.Consumers == n
	})
}

// publish publishes the run's messages to the exchange, in order.
func (r *keyOrderRun) publish(t *testing.T) {
	t.Helper()
	publishAll(t, openAMQP(t, r.url, outboxamqp.Config{Exchange: r.dest.Exchange}), r.msgs)
}

// applied counts the messages applied, by process if one is named. It
// reads the effects: a commit that went through while the handler's context
// ended returns an error to the process that made it, and the redelivery is
// skipped by the inbox, so only the database knows who applied what.
func (r *keyOrderRun) applied(t *testing.T, process ...string) int {
	t.Helper()
	var n int
	if err := r.db.pool.QueryRow(t.Context(), `SELECT count(*) FROM `+r.db.effects+` WHERE $1::text[] IS NULL OR process = ANY($1)`, process).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func (r *keyOrderRun) waitForAll(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for r.applied(t) < len(r.msgs) {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d messages applied after 3 minutes (%s); queue %s holds %d ready", r.applied(t), len(r.msgs), r.perProcess(t), r.queue, r.depth(t))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// perProcess says how many messages each process applied.
func (r *keyOrderRun) perProcess(t *testing.T) string {
	t.Helper()
	s := ""
	for i, p := range r.procs {
		if i > 0 {
			s += ", "
		}
		s += fmt.Sprintf("process %s applied %d", p.name, r.applied(t, p.name))
	}
	return s
}

// depth counts the messages ready in the queue.
func (r *keyOrderRun) depth(t *testing.T) int {
	t.Helper()
	ch, err := amqptest.Dial(t, r.url).Channel()
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	q, err := ch.QueueDeclarePassive(r.queue, true, false, false, false, nil)
	if err != nil {
		t.Fatalf("inspect queue %s: %v", r.queue, err)
	}
	return q.Messages
}

// requireEachAppliedOnce fails the test unless every message left exactly
// one effect.
func (r *keyOrderRun) requireEachAppliedOnce(t *testing.T) {
	t.Helper()
	var effects, distinct int
	if err := r.db.pool.QueryRow(t.Context(), `SELECT count(*), count(DISTINCT message_id) FROM `+r.db.effects).Scan(&effects, &distinct); err != nil {
		t.Fatal(err)
	}
	if effects != len(r.msgs) || distinct != len(r.msgs) {
		t.Fatalf("%d effects of %d distinct messages; want each of the %d messages applied once", effects, distinct, len(r.msgs))
	}
}

// keyOrderDB is the consumer service's database on PostgreSQL: an inbox,
// an effects table, and per key the read model's version: the position of
// the latest message applied, and how many messages were applied after a
// later one of their key. The handler checks the version in the inbox's
// transaction with the key's row locked, so the count is exact whichever
// process applies what.
type keyOrderDB struct {
	effects  string // schema-qualified
	inbox    *outbox.Inbox[pgx.Tx]
	keys     string // schema-qualified
	pool     *pgxpool.Pool
	position map[uuid.UUID]int // each message's position in its key; read-only
}

func newKeyOrderDB(t *testing.T, msgs []outbox.Message) *keyOrderDB {
	t.Helper()
	pool := pgtest.Pool(t)
	schema := pgtest.Schema(t)
	table, err := outboxpg.NewInboxTable(pool, outboxpg.InboxOptions{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	if err := table.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	inbox, err := outbox.NewInbox(table, "billing")
	if err != nil {
		t.Fatal(err)
	}
	db := &keyOrderDB{effects: `"` + schema + `".effects`, inbox: inbox, keys: `"` + schema + `".key_versions`, pool: pool, position: map[uuid.UUID]int{}}
	seen := map[string]int{}
	for _, m := range msgs {
		db.position[m.ID] = seen[m.Key]
		seen[m.Key]++
	}
	for _, stmt := range []string{
		`CREATE TABLE ` + db.effects + ` (message_id uuid NOT NULL, process text NOT NULL)`,
		`CREATE TABLE ` + db.keys + ` (key text PRIMARY KEY, version int NOT NULL DEFAULT -1, out_of_order int NOT NULL DEFAULT 0)`,
	} {
		if _, err := pool.Exec(t.Context(), stmt); err != nil {
			t.Fatal(err)
		}
	}
	for key := range seen {
		if _, err := pool.Exec(t.Context(), `INSERT INTO `+db.keys+` (key) VALUES ($1)`, key); err != nil {
			t.Fatal(err)
		}
	}
	return db
}

// apply is the handler, in the inbox's transaction: the UPDATE locks the
// key's row until the commit, so two processes applying one key take
// turns, and a message whose position is below the key's version is one
// applied after a later message of its key.
func (db *keyOrderDB) apply(ctx context.Context, tx pgx.Tx, process string, m outbox.Message) error {
	pos, ok := db.position[m.ID]
	if !ok {
		return outbox.Permanent(fmt.Errorf("message %s is not one of the run's", m.ID))
	}
	if _, err := tx.Exec(ctx, `UPDATE `+db.keys+` SET out_of_order = out_of_order + CASE WHEN $2 < version THEN 1 ELSE 0 END, version = greatest(version, $2) WHERE key = $1`, m.Key, pos); err != nil {
		return err
	}
	_, err := tx.Exec(ctx, `INSERT INTO `+db.effects+` (message_id, process) VALUES ($1, $2)`, m.ID, process)
	return err
}

// outOfOrder counts the messages applied after a later message of their
// key.
func (db *keyOrderDB) outOfOrder(t *testing.T) int {
	t.Helper()
	var n int
	if err := db.pool.QueryRow(t.Context(), `SELECT coalesce(sum(out_of_order), 0) FROM `+db.keys).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}
