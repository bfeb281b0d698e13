package e2e_test

import (
	"context"
	"database/sql"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/mysqltest"
	"github.com/go-outbox/outbox/outboxmysql"
)

// The consumer adapters' Parked tests on a MySQL (or MariaDB) inbox table:
// the same tests as on PostgreSQL (parked_stores_test.go), with a
// database of TEST_MYSQL_URL.

func TestNATSMessageThatKeepsFailingIsParkedInAMySQLInboxAcknowledgedOnlyOnceItsParkCommitsAndRetriedFromThere(t *testing.T) {
	t.Parallel()
	testParkedAndRetried(t, newMySQLParkingDB, natsParking)
}

func TestNATSMessageBehindAParkedOneOfItsKeyWaitsInAMySQLInboxUntilThatOneIsRetried(t *testing.T) {
	t.Parallel()
	testWaitsBehindParked(t, newMySQLParkingDB, natsParking)
}

func TestRabbitMQMessageThatKeepsFailingIsParkedInAMySQLInboxAndRetriedFromThere(t *testing.T) {
	t.Parallel()
	testRabbitMQParkedAndRetried(t, newMySQLParkingDB)
}

func TestKafkaRecordThatKeepsFailingIsParkedInAMySQLInboxAndRetriedFromThere(t *testing.T) {
	t.Parallel()
	testKafkaParkedAndRetried(t, newMySQLParkingDB)
}

// mysqlConsumerDB is consumerDB on MySQL: an outboxmysql inbox table (with
// its parked table) and an effects table the handler writes in the
// inbox's transaction, in a throwaway database.
type mysqlConsumerDB struct {
	apply    func(context.Context, outbox.Message) error
	broken   atomic.Bool // the handler fails on poison while set
	consumer string
	db       *sql.DB
	gate     *parkGateMySQL
	poison   uuid.UUID
	table    *outboxmysql.InboxTable

	mu    sync.Mutex
	tries map[uuid.UUID]int // calls of the handler, by message
}

var _ parkGate = (*mysqlConsumerDB)(nil)

func newMySQLParkingDB(t *testing.T, consumer string, poison uuid.UUID) parkingDB {
	t.Helper()
	db := mysqltest.DB(t)
	m, err := outboxmysql.NewMigrator(db, outboxmysql.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Up(t.Context()); err != nil {
		t.Fatal(err)
	}
	store, err := outboxmysql.New(db, outboxmysql.Options{})
	if err != nil {
		t.Fatal(err)
	}
	table, err := outboxmysql.NewInboxTable(store, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := table.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(t.Context(), `CREATE TABLE effects (message_id BINARY(16) NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	c := &mysqlConsumerDB{consumer: consumer, db: db, poison: poison, table: table, tries: map[uuid.UUID]int{}}
	c.gate = &parkGateMySQL{InboxTable: table, db: db, poison: poison, entered: make(chan struct{}), proceed: make(chan struct{})}
	c.broken.Store(true)
	c.apply = outbox.ApplyOnce(table, func(ctx context.Context, tx *sql.Tx, m outbox.Message) error {
		if m.ID == c.poison && c.broken.Load() {
			return errNoSuchCustomer
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO effects VALUES (?)`, m.ID[:])
		return err
	})
	return c
}

func (c *mysqlConsumerDB) handler(ctx context.Context, m outbox.Message) error {
	c.mu.Lock()
	c.tries[m.ID]++
	c.mu.Unlock()
	return c.apply(ctx, m)
}

func (c *mysqlConsumerDB) fix() { c.broken.Store(false) }

func (c *mysqlConsumerDB) tried(id uuid.UUID) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.tries[id]
}

func (c *mysqlConsumerDB) applied(t *testing.T, id uuid.UUID) int {
	t.Helper()
	var n int
	if err := c.db.QueryRowContext(t.Context(), `SELECT count(*) FROM effects WHERE message_id = ?`, id[:]).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func (c *mysqlConsumerDB) parked(t *testing.T, id uuid.UUID) (outbox.ParkedMessage, bool) {
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

// parkStore is the inbox table behind a gate on the poison's first Park
// (gateFirstPark); every other call goes straight to the table, and the
// table's optional interfaces (outbox.KeyParkStore and the others the
// adapters look for) come through the embedding.
func (c *mysqlConsumerDB) parkStore() outbox.ParkStore { return c.gate }

func (c *mysqlConsumerDB) requestRetry(t *testing.T, ids ...uuid.UUID) {
	t.Helper()
	if n, err := c.table.RequestRetry(t.Context(), c.consumer, ids...); err != nil || n != 1 {
		t.Fatalf("request the retry of %v (all parked messages of %s if none): %d, %v; want 1, the poison %s", ids, c.consumer, n, err, c.poison)
	}
}

func (c *mysqlConsumerDB) requireParked(t *testing.T, p outbox.ParkedMessage, m outbox.Message, attempts int) {
	t.Helper()
	if p.ID != m.ID || p.Consumer != c.consumer || p.Attempts != attempts || p.Error != errNoSuchCustomer.Error() || p.Topic != m.Topic || p.Key != m.Key ||
		string(p.Payload) != string(m.Payload) || !sameHeaders(p.Headers, m.Headers) {
		t.Fatalf("parked row of %s: id %s, consumer %q, %d attempts, error %q, topic %q, key %q, payload %q, headers %v; want consumer %q, MaxDeliver = %d, the handler's error %q and the message (topic %q, key %q, payload %q, headers %v)",
			m.ID, p.ID, p.Consumer, p.Attempts, p.Error, p.Topic, p.Key, p.Payload, p.Headers, c.consumer, attempts, errNoSuchCustomer, m.Topic, m.Key, m.Payload, m.Headers)
	}
}

func (c *mysqlConsumerDB) gateFirstPark() func(t *testing.T, whileHeld func()) {
	c.gate.armed.Store(true)
	return c.gate.hold
}

// sameHeaders reports whether got holds every header of want (an adapter
// may add its own).
func sameHeaders(got, want map[string]string) bool {
	for k, v := range want {
		if got[k] != v {
			return false
		}
	}
	return true
}

// parkGateMySQL holds the poison's first Park before it reaches the
// database until hold has locked the parked table, so that the Park's
// INSERT waits inside MySQL, uncommitted, while the test looks at the
// broker.
type parkGateMySQL struct {
	*outboxmysql.InboxTable
	armed    atomic.Bool // gateFirstPark was called
	db       *sql.DB
	entered  chan struct{} // closed when the poison's first Park is called
	once     sync.Once
	poison   uuid.UUID
	proceed  chan struct{} // closed when that Park may go on to the table
	returned atomic.Bool   // that Park returned
}

func (g *parkGateMySQL) Park(ctx context.Context, consumer string, m outbox.Message, attempts int, reason string) error {
	first := false
	if m.ID == g.poison && g.armed.Load() {
		g.once.Do(func() { first = true })
	}
	if !first {
		return g.InboxTable.Park(ctx, consumer, m, attempts, reason)
	}
	close(g.entered)
	select {
	case <-g.proceed:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer g.returned.Store(true)
	return g.InboxTable.Park(ctx, consumer, m, attempts, reason)
}

// hold waits for the poison's first Park, write-locks the parked table on
// a connection of its own, lets the Park go on until MySQL shows an INSERT
// waiting for the lock, runs whileHeld, and unlocks.
func (g *parkGateMySQL) hold(t *testing.T, whileHeld func()) {
	t.Helper()
	select {
	case <-g.entered:
	case <-time.After(30 * time.Second):
		t.Fatalf("the failing message %s was not parked within 30s", g.poison)
	}
	ctx := t.Context()
	conn, err := g.db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	if _, err := conn.ExecContext(ctx, "LOCK TABLES `"+g.ParkedName()+"` WRITE"); err != nil {
		t.Fatal(err)
	}
	unlocked := false
	unlock := func() {
		if !unlocked {
			unlocked = true
			if _, err := conn.ExecContext(context.Background(), `UNLOCK TABLES`); err != nil {
				t.Errorf("unlock the parked table: %v", err)
			}
		}
	}
	defer unlock()
	close(g.proceed)
	waitFor(t, 20*time.Second, "the park waiting for the parked table's lock in MySQL", func() bool {
		var n int
		err := g.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM information_schema.PROCESSLIST
WHERE DB = DATABASE() AND STATE LIKE '%metadata lock%' AND INFO LIKE 'INSERT%'`).Scan(&n)
		if err != nil {
			t.Fatal(err)
		}
		return n > 0
	})
	if g.returned.Load() {
		t.Fatalf("the park of %s returned while the parked table is write-locked", g.poison)
	}
	whileHeld()
	if g.returned.Load() {
		t.Fatalf("the park of %s returned while the parked table is write-locked", g.poison)
	}
	unlock()
	waitFor(t, 20*time.Second, "the park committed once the lock is gone", g.returned.Load)
}
