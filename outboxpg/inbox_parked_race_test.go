package outboxpg_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/pgtest"
	"github.com/go-outbox/outbox/outboxpg"
)

// gateClass is the first key of the advisory locks that gate the deletes
// of chosen parked rows in these tests.
const gateClass = 7317

// An unpark of a key's first message and a discard of the message behind it
// that overlap (READ COMMITTED: each one's release does not see the other's
// delete) must still pass the key on to the third message: otherwise it is
// left first of its key, waiting, and requested by nobody.
func TestInboxParkedUnparkAndDiscardOfTheNextTogetherPassTheKeyOn(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	schema := pgtest.Schema(t)
	admin := pgtest.Pool(t)
	// Each side runs on a pool of its own, named, so that the test can see
	// when it waits for a lock.
	a, aName := namedPool(t, "unparker")
	o, oName := namedPool(t, "operator")
	tableOn := func(pool *pgxpool.Pool) *outboxpg.InboxTable {
		tb, err := outboxpg.NewInboxTable(pool, outboxpg.InboxOptions{Schema: schema})
		if err != nil {
			t.Fatalf("new inbox table: %v", err)
		}
		return tb
	}
	tbA, tbO := tableOn(a), tableOn(o)
	if err := tbA.Migrate(ctx); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	gateDeletes(t, admin, tbA.ParkedName())

	m1, m2, m3 := keyMessage("order-1"), keyMessage("order-1"), keyMessage("order-1")
	if err := tbA.Park(ctx, "billing", m1, 5, "no such customer"); err != nil {
		t.Fatalf("park %s: %v", m1.ID, err)
	}
	for _, m := range []outbox.Message{m2, m3} {
		if head, err := tbA.ParkBehind(ctx, "billing", m); err != nil || head != m1.ID {
			t.Fatalf("park %s behind %s: head %s, %v", m.ID, m1.ID, head, err)
		}
	}
	if n, err := tbA.RequestRetry(ctx, "billing", m1.ID); err != nil || n != 1 {
		t.Fatalf("request the retry of %s: %d, %v", m1.ID, n, err)
	}
	if got, err := tbA.TakeRetries(ctx, "billing", 10); err != nil || len(got) != 1 {
		t.Fatalf("take the retry of %s: %v, %v", m1.ID, got, err)
	}

	// The gates hold each delete, once done, until the test opens it.
	gates := holdGates(t, admin, m1.ID, m2.ID)
	unparked, discarded := make(chan error, 1), make(chan error, 1)
	go func() { unparked <- tbA.Unpark(ctx, "billing", m1.ID) }()
	waitForLock(t, admin, aName, "advisory")
	go func() {
		_, err := tbO.DiscardParked(ctx, "billing", m2.ID)
		discarded <- err
	}()
	waitForLock(t, admin, oName, "advisory")
	gates.open(t, m1.ID)
	// The unparker either ends, or waits for the discard's delete of m2.
	stop := make(chan struct{})
	select {
	case err := <-unparked:
		unparked <- err
	case <-waitingOnARow(t, admin, aName, stop):
	}
	close(stop)
	gates.open(t, m2.ID)
	for name, done := range map[string]chan error{"unpark of " + m1.ID.String(): unparked, "discard of " + m2.ID.String(): discarded} {
		if err := <-done; err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}

	p, err := tbA.GetParked(ctx, "billing", m3.ID)
	if err != nil {
		t.Fatalf("get %s: %v", m3.ID, err)
	}
	if !p.RetryRequested {
		t.Fatalf("message %s, behind the unparked %s and the discarded %s: waiting %v, behind %s, retry requested %v; want its retry requested (else nobody takes it and the key stalls)",
			m3.ID, m1.ID, m2.ID, p.Waiting, p.Behind, p.RetryRequested)
	}
	got, err := tbA.TakeRetries(ctx, "billing", 10)
	if err != nil || len(got) != 1 || got[0].ID != m3.ID {
		t.Fatalf("retries taken once %s was unparked and %s discarded: %v, %v; want %s", m1.ID, m2.ID, got, err, m3.ID)
	}
}

func keyMessage(key string) outbox.Message {
	return outbox.Message{ID: uuid.Must(uuid.NewV7()), Topic: "orders", Key: key, Payload: []byte(`{}`)}
}

// namedPool returns a pool of its own whose connections carry a fresh
// application name, and that name.
func namedPool(t *testing.T, role string) (*pgxpool.Pool, string) {
	t.Helper()
	cfg := pgtest.Config(t)
	name := role + "-" + uuid.NewString()[:8]
	cfg.ConnConfig.RuntimeParams["application_name"] = name
	cfg.MaxConns = 2
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	if err != nil {
		t.Fatalf("pool for %s: %v", role, err)
	}
	t.Cleanup(pool.Close)
	return pool, name
}

// gateDeletes makes every delete of a row of the parked table wait, at the
// end of its statement, for the gate of its message (holdGates).
func gateDeletes(t *testing.T, pool *pgxpool.Pool, parked string) {
	t.Helper()
	schema, table, _ := strings.Cut(parked, ".")
	fn := pgx.Identifier{schema, "gate_parked_delete"}.Sanitize()
	stmts := []string{
		`CREATE FUNCTION ` + fn + `() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	PERFORM pg_advisory_xact_lock_shared(` + strconv.Itoa(gateClass) + `, hashtext(OLD.message_id::text));
	RETURN NULL;
END $$`,
		`CREATE TRIGGER gate AFTER DELETE ON ` + pgx.Identifier{schema, table}.Sanitize() + ` FOR EACH ROW EXECUTE FUNCTION ` + fn + `()`,
	}
	for _, stmt := range stmts {
		if _, err := pool.Exec(t.Context(), stmt); err != nil {
			t.Fatalf("gate the deletes of %s: %v", parked, err)
		}
	}
}

// gates are advisory locks held on a connection of their own, one per
// message whose delete they hold.
type gates struct {
	conn *pgxpool.Conn
}

func holdGates(t *testing.T, pool *pgxpool.Pool, ids ...uuid.UUID) gates {
	t.Helper()
	conn, err := pool.Acquire(t.Context())
	if err != nil {
		t.Fatalf("acquire a connection for the gates: %v", err)
	}
	g := gates{conn: conn}
	t.Cleanup(func() {
		// Session locks outlive a returned connection: drop them.
		_, _ = conn.Exec(context.Background(), `SELECT pg_advisory_unlock_all()`)
		conn.Release()
	})
	for _, id := range ids {
		if _, err := conn.Exec(t.Context(), `SELECT pg_advisory_lock($1, hashtext($2))`, gateClass, id.String()); err != nil {
			t.Fatalf("close the gate of %s: %v", id, err)
		}
	}
	return g
}

func (g gates) open(t *testing.T, id uuid.UUID) {
	t.Helper()
	if _, err := g.conn.Exec(t.Context(), `SELECT pg_advisory_unlock($1, hashtext($2))`, gateClass, id.String()); err != nil {
		t.Fatalf("open the gate of %s: %v", id, err)
	}
}

// waitForLock waits until the connection named app waits for a lock of the
// type event (pg_stat_activity.wait_event).
func waitForLock(t *testing.T, pool *pgxpool.Pool, app, event string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var n int
		err := pool.QueryRow(t.Context(), `SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND wait_event_type = 'Lock' AND wait_event = $2`,
			app, event).Scan(&n)
		if err != nil {
			t.Fatalf("look for %s waiting: %v", app, err)
		}
		if n > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not wait for a lock (%s) within 10s", app, event)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// waitingOnARow is closed once the connection named app waits for another
// transaction (a row it changed).
func waitingOnARow(t *testing.T, pool *pgxpool.Pool, app string, stop <-chan struct{}) <-chan struct{} {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			var n int
			err := pool.QueryRow(t.Context(), `SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND wait_event_type = 'Lock' AND wait_event IN ('transactionid', 'tuple')`,
				app).Scan(&n)
			if err != nil || n > 0 {
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	return done
}
