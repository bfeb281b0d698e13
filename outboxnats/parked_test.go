package outboxnats_test

import (
	"context"
	"database/sql"
	"errors"
	"log/slog"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/outboxnats"
	"github.com/go-outbox/outbox/outboxsqlite"
	"github.com/go-outbox/outbox/publishertest"
	"github.com/go-outbox/outbox/relaytest"
)

// consumerDB is a consumer's own database (SQLite, as a user without a
// server would have it): an inbox table, its parked table, and an effect
// table the handler writes in the inbox's transaction.
type consumerDB struct {
	table  *outboxsqlite.InboxTable
	store  *outboxsqlite.Store
	apply  func(context.Context, outbox.Message) error
	broken atomic.Bool // the handler fails on the poison message while set
	poison uuid.UUID

	mu    sync.Mutex
	tries map[uuid.UUID]int // deliveries that reached the handler
}

func newConsumerDB(t *testing.T, poison uuid.UUID) *consumerDB {
	t.Helper()
	store, err := outboxsqlite.Open(t.Context(), filepath.Join(t.TempDir(), "billing.db"), outboxsqlite.Options{CreateIfMissing: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	table, err := outboxsqlite.NewInboxTable(store, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := table.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, err := store.DB().ExecContext(t.Context(), `CREATE TABLE effects (message_id TEXT NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	inbox, err := outbox.NewInbox(table, "billing")
	if err != nil {
		t.Fatal(err)
	}
	c := &consumerDB{table: table, store: store, poison: poison, tries: map[uuid.UUID]int{}}
	c.broken.Store(true)
	c.apply = inbox.Apply(func(ctx context.Context, tx *sql.Tx, m outbox.Message) error {
		if m.ID == c.poison && c.broken.Load() {
			return errors.New("no such customer (injected)")
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO effects VALUES (?)`, m.ID.String())
		return err
	})
	return c
}

func (c *consumerDB) handler(ctx context.Context, m outbox.Message) error {
	c.mu.Lock()
	c.tries[m.ID]++
	c.mu.Unlock()
	return c.apply(ctx, m)
}

func (c *consumerDB) tried(id uuid.UUID) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.tries[id]
}

func (c *consumerDB) effects(t *testing.T, id uuid.UUID) int {
	t.Helper()
	var n int
	if err := c.store.DB().QueryRowContext(t.Context(), `SELECT count(*) FROM effects WHERE message_id = ?`, id.String()).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// parked returns the consumer's parked message id, if there is one.
func (c *consumerDB) parked(t *testing.T, consumer string, id uuid.UUID) (outbox.ParkedMessage, bool) {
	t.Helper()
	p, err := c.table.GetParked(t.Context(), consumer, id)
	if errors.Is(err, outbox.ErrNotFound) {
		return p, false
	}
	if err != nil {
		t.Fatal(err)
	}
	return p, true
}

// With Parked, a message that keeps failing is parked in the consumer's
// database after MaxDeliver attempts and acknowledged on the server (not
// terminated, nothing awaiting acknowledgement); a retry request while the
// handler still fails parks it again with the new attempts; once the handler
// is fixed, the next retry request makes the running consumer apply it, and
// its parked row is gone.
func TestAMessageThatKeepsFailingIsParkedInTheConsumersDatabaseAndRetriedFromThere(t *testing.T) {
	t.Parallel()
	batch := publishertest.Messages("orders.created", 3)
	poison := batch[0].ID
	js, stream := consumerSetup(t, batch)
	db := newConsumerDB(t, poison)
	logs := &relaytest.LogCapture{}
	stop := consume(t, js, outboxnats.ConsumerConfig{Stream: stream, Durable: "billing", MaxDeliver: 3,
		BackoffBase: time.Millisecond, BackoffMax: 5 * time.Millisecond, Logger: slog.New(logs), Parked: db.table}, db.handler)
	waitUntil(t, "the failing message parked in the consumer's database", func() bool { _, ok := db.parked(t, "billing", poison); return ok })
	waitUntil(t, "the other messages applied", func() bool { return db.effects(t, batch[1].ID) == 1 && db.effects(t, batch[2].ID) == 1 })
	p, _ := db.parked(t, "billing", poison)
	if p.Attempts != 3 || p.Error != "no such customer (injected)" || p.Key != batch[0].Key || string(p.Payload) != string(batch[0].Payload) {
		t.Fatalf("parked row of %s: %d attempts, error %q, key %q, payload %q; want MaxDeliver = 3, the handler's error and the message", poison, p.Attempts, p.Error, p.Key, p.Payload)
	}
	if !logs.Has(slog.LevelError, "parked", poison.String(), "no such customer") {
		t.Errorf("no ERROR log naming the parked message and its error:\n%s", logs)
	}
	cons, err := js.Consumer(ctxFor(t, 10*time.Second), stream, "billing")
	if err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "every message acknowledged on the server", func() bool {
		info, err := cons.Info(ctxFor(t, 10*time.Second))
		return err == nil && info.NumAckPending == 0 && info.AckFloor.Stream == uint64(len(batch))
	})

	// Retried while the cause is still there: parked again.
	before := p.ParkedAt
	if n, err := db.table.RequestRetry(t.Context(), "billing"); err != nil || n != 1 {
		t.Fatalf("request the retry of every parked message of billing: %d, %v; want 1", n, err)
	}
	waitUntil(t, "the retried message parked again", func() bool {
		again, ok := db.parked(t, "billing", poison)
		return ok && !again.RetryRequested && again.ParkedAt.After(before)
	})
	if n := db.tried(poison); n != 6 {
		t.Fatalf("the failing message was tried %d times; want MaxDeliver = 3, and 3 more on the retry", n)
	}

	db.broken.Store(false) // the fix is deployed
	if n, err := db.table.RequestRetry(t.Context(), "billing", poison); err != nil || n != 1 {
		t.Fatalf("request the retry of %s: %d, %v", poison, n, err)
	}
	waitUntil(t, "the retried message applied and unparked", func() bool {
		_, stillParked := db.parked(t, "billing", poison)
		return db.effects(t, poison) == 1 && !stillParked
	})
	stop()
	if n := db.tried(poison); n != 7 {
		t.Fatalf("the parked message reached the handler %d times in all; want 3 attempts, 3 on the first retry and 1 on the second: the server must not deliver it again", n)
	}
}
