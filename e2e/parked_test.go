package e2e_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/pgtest"
	"github.com/go-outbox/outbox/outboxpg"
)

// errNoSuchCustomer is what the handler of a consumerDB returns for its
// poison message until the fix is deployed.
var errNoSuchCustomer = errors.New("no such customer (injected)")

// consumerDB is a consumer's own database on PostgreSQL, as the tests of the
// adapters' Parked option need it: an inbox table with its parked table (the
// adapter's Parked), and an effects table its handler writes in the inbox's
// transaction. The handler fails on one message, the poison, until fix.
// (These tests live here rather than in the adapters' modules, which stay
// free of any store.)
type consumerDB struct {
	apply    func(context.Context, outbox.Message) error
	broken   atomic.Bool // the handler fails on poison while set
	consumer string
	effects  string // the effects table, schema-qualified
	poison   uuid.UUID
	pool     *pgxpool.Pool
	table    *outboxpg.InboxTable

	mu    sync.Mutex
	tries map[uuid.UUID]int // calls of the handler, by message
}

// newConsumerDB migrates an inbox table in a fresh schema for consumer (the
// adapter's Group, Durable or Name: the parked messages are kept under it)
// and returns it with a handler that fails on poison.
func newConsumerDB(t *testing.T, consumer string, poison uuid.UUID) *consumerDB {
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
	c := &consumerDB{consumer: consumer, effects: `"` + schema + `".effects`, poison: poison, pool: pool, table: table, tries: map[uuid.UUID]int{}}
	if _, err := pool.Exec(t.Context(), `CREATE TABLE `+c.effects+` (message_id uuid NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	c.broken.Store(true)
	// ApplyOnce: the inbox is named after the adapter's consumer, which
	// must then be consumer (the tests check the records under it).
	c.apply = outbox.ApplyOnce(table, func(ctx context.Context, tx pgx.Tx, m outbox.Message) error {
		if m.ID == c.poison && c.broken.Load() {
			return errNoSuchCustomer
		}
		_, err := tx.Exec(ctx, `INSERT INTO `+c.effects+` VALUES ($1)`, m.ID)
		return err
	})
	return c
}

// handler is the consumer's handler: it counts the call, then applies m
// through the inbox.
func (c *consumerDB) handler(ctx context.Context, m outbox.Message) error {
	c.mu.Lock()
	c.tries[m.ID]++
	c.mu.Unlock()
	return c.apply(ctx, m)
}

// fix deploys the fix: the handler no longer fails on the poison.
func (c *consumerDB) fix() { c.broken.Store(false) }

// tried returns how many times message id reached the handler.
func (c *consumerDB) tried(id uuid.UUID) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.tries[id]
}

// applied returns how many effects message id left.
func (c *consumerDB) applied(t *testing.T, id uuid.UUID) int {
	t.Helper()
	var n int
	if err := c.pool.QueryRow(t.Context(), `SELECT count(*) FROM `+c.effects+` WHERE message_id = $1`, id).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// parked returns the parked row of message id, if there is one.
func (c *consumerDB) parked(t *testing.T, id uuid.UUID) (outbox.ParkedMessage, bool) {
	t.Helper()
	p, err := c.table.GetParked(t.Context(), c.consumer, id)
	if errors.Is(err, outbox.ErrNotFound) {
		return p, false
	}
	if err != nil {
		t.Fatal(err)
	}
	return p, true
}

// requestRetry requests the retry of the parked messages ids (of every
// parked message of the consumer when none), as an operator does, and fails
// the test unless exactly one, the poison, was parked.
func (c *consumerDB) requestRetry(t *testing.T, ids ...uuid.UUID) {
	t.Helper()
	if n, err := c.table.RequestRetry(t.Context(), c.consumer, ids...); err != nil || n != 1 {
		t.Fatalf("request the retry of %v (all parked messages of %s if none): %d, %v; want 1, the poison %s", ids, c.consumer, n, err, c.poison)
	}
}

// requireParked fails the test unless p is the poison m parked after
// attempts with the handler's error.
func (c *consumerDB) requireParked(t *testing.T, p outbox.ParkedMessage, m outbox.Message, attempts int) {
	t.Helper()
	if p.ID != m.ID || p.Attempts != attempts || p.Error != errNoSuchCustomer.Error() || p.Topic != m.Topic || p.Key != m.Key || string(p.Payload) != string(m.Payload) {
		t.Fatalf("parked row of %s: id %s, %d attempts, error %q, topic %q, key %q, payload %q; want MaxDeliver = %d, the handler's error %q and the message (topic %q, key %q)",
			m.ID, p.ID, p.Attempts, p.Error, p.Topic, p.Key, p.Payload, attempts, errNoSuchCustomer, m.Topic, m.Key)
	}
}

// running runs an adapter's Consume (consume, until its ctx ends) until stop
// is called, which waits for it to return; the test's end stops it too.
func running(t *testing.T, consume func(ctx context.Context) error) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- consume(ctx) }()
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
