package outboxkafka_test

import (
	"context"
	"database/sql"
	"errors"
	"log/slog"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/google/uuid"

	"github.com/go-outbox/outbox"
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

// With Parked (and no dead-letter topic), a record that keeps failing is
// parked in the consumer's database after MaxDeliver attempts and its offset
// committed: the next member of the group does not get it again; once the
// handler is fixed, an operator's retry request makes the running member
// apply it, and its parked row is gone.
func TestARecordThatKeepsFailingIsParkedInTheConsumersDatabaseAndRetriedFromThere(t *testing.T) {
	t.Parallel()
	batch := publishertest.Messages("", 3)
	for i := range batch {
		batch[i].Key = "customer-7" // one partition: the sentinel below comes after them
	}
	poison := batch[0].ID
	c, cfg := groupSetup(t, batch)
	db := newConsumerDB(t, poison)
	logs := &relaytest.LogCapture{}
	cfg.MaxDeliver, cfg.DeadLetterTopic, cfg.Parked, cfg.Logger = 3, "", db.table, slog.New(logs)
	stop := consumeGroup(t, c, cfg, db.handler)
	eventually(t, "the failing record parked in the consumer's database", func() bool { _, ok := db.parked(t, cfg.Group, poison); return ok })
	eventually(t, "the other records applied", func() bool { return db.effects(t, batch[1].ID) == 1 && db.effects(t, batch[2].ID) == 1 })
	stop() // commits the marked offsets
	p, _ := db.parked(t, cfg.Group, poison)
	if p.Attempts != 3 || p.Error != "no such customer (injected)" || p.Topic != batch[0].Topic || p.Key != batch[0].Key {
		t.Fatalf("parked row of %s: %d attempts, error %q, topic %q, key %q; want MaxDeliver = 3, the handler's error and the record's message", poison, p.Attempts, p.Error, p.Topic, p.Key)
	}
	if !logs.Has(slog.LevelError, "parked", poison.String(), "no such customer") {
		t.Errorf("no ERROR log naming the parked record and its error:\n%s", logs)
	}

	db.broken.Store(false) // the fix is deployed
	cfg.Logger = relaytest.TestLogger(t)
	stop = consumeGroup(t, c, cfg, db.handler)
	sentinel := publishertest.Messages("", 1)
	sentinel[0].Key = "customer-7"
	publish(t, c, cfg.Topics[0], sentinel)
	eventually(t, "the next member at the new record", func() bool { return db.effects(t, sentinel[0].ID) == 1 })
	if n := db.tried(poison); n != 3 {
		t.Fatalf("the parked record reached the handler %d times before its retry; want MaxDeliver = 3: its offset must be committed", n)
	}
	if n, err := db.table.RequestRetry(t.Context(), cfg.Group, poison); err != nil || n != 1 {
		t.Fatalf("request the retry of %s: %d, %v", poison, n, err)
	}
	eventually(t, "the retried record applied and unparked", func() bool {
		_, stillParked := db.parked(t, cfg.Group, poison)
		return db.effects(t, poison) == 1 && !stillParked
	})
	stop()
}
