//go:build fault

package fault

import (
	"bytes"
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/pgtest"
	"github.com/go-outbox/outbox/outboxpg"
)

// checkKeyOrder verifies that each key's messages first arrived in id order,
// which is their commit order (one writer commits a key's messages one
// transaction after the other, and ids ascend). A duplicate may come later
// than anything: only first arrivals count. It returns how many keys it
// checked. The caller holds s.mu.
func (s *scenario) checkKeyOrder(arrivals []uuid.UUID) int {
	const maxReported = 5
	seen := make(map[uuid.UUID]bool, len(arrivals))
	last := map[string]uuid.UUID{}
	violations := 0
	for _, id := range arrivals {
		if seen[id] {
			continue
		}
		seen[id] = true
		key, ok := s.keyOf[id]
		if !ok {
			continue // never written: check reports it
		}
		if prev, ok := last[key]; ok && bytes.Compare(id[:], prev[:]) < 0 {
			violations++
			if violations <= maxReported {
				s.t.Errorf("%s: key %s: message %s arrived after the later message %s", s.name, key, id, prev)
			}
			continue
		}
		last[key] = id
	}
	if violations > maxReported {
		s.t.Errorf("%s: %d messages in all arrived after a later message of their key", s.name, violations)
	}
	return len(last)
}

// consumerName names the inbox's consumer in every scenario.
const consumerName = "fault-consumer"

// effects is the consuming side's database, in the scenario's schema: an
// inbox table, and a table of effects with no unique key, so that a message
// applied twice shows as two rows.
type effects struct {
	pool  *pgxpool.Pool
	table *outboxpg.InboxTable
	name  string // the effects table, quoted
}

// newEffects creates the inbox and effects tables in schema, on a pool of
// conns connections of its own, closed when the test ends.
func newEffects(t *testing.T, schema string, conns int32) *effects {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cfg := pgtest.Config(t)
	cfg.MaxConns = conns
	// The consumer's commits need not wait for the disk: the inbox's logic
	// is under test here, not PostgreSQL's durability (no scenario with a
	// consumer restarts the database).
	cfg.ConnConfig.RuntimeParams["synchronous_commit"] = "off"
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	e, err := openEffects(pool, schema)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.table.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `CREATE TABLE `+e.name+` (message_id uuid NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	return e
}

// openEffects returns the tables of newEffects on pool, as a consumer
// process opens them.
func openEffects(pool *pgxpool.Pool, schema string) (*effects, error) {
	table, err := outboxpg.NewInboxTable(pool, outboxpg.InboxOptions{Schema: schema})
	if err != nil {
		return nil, err
	}
	return &effects{pool: pool, table: table, name: pgx.Identifier{schema, "effects"}.Sanitize()}, nil
}

// handler returns the handler a consumer adapter calls, made as an
// application makes it: Inbox.Apply with a function that records the
// message's effect in the inbox's transaction. After each call, done learns
// whether the call applied the message; false with a nil error is a
// delivery the inbox skipped, the message having been applied before.
func (e *effects) handler(done func(m outbox.Message, applied bool, err error)) (func(context.Context, outbox.Message) error, error) {
	inbox, err := outbox.NewInbox(e.table, consumerName)
	if err != nil {
		return nil, err
	}
	inbox.Observe(verdicts{})
	apply := inbox.Apply(func(ctx context.Context, tx pgx.Tx, m outbox.Message) error {
		_, err := tx.Exec(ctx, `INSERT INTO `+e.name+` VALUES ($1)`, m.ID)
		return err
	})
	return func(ctx context.Context, m outbox.Message) error {
		var v verdict
		err := apply(context.WithValue(ctx, verdictKey{}, &v), m)
		done(m, v.applied, err)
		return err
	}, nil
}

// verdictKey carries, in the context of one handler call, the verdict the
// inbox's observer fills in: Apply's nil error does not tell an applied
// message from a skipped duplicate, the observer does.
type verdictKey struct{}

type verdict struct{ applied bool }

// verdicts is the inbox's observer.
type verdicts struct{}

func (verdicts) Handled(ctx context.Context, _ string, applied bool, _ error) {
	if v, ok := ctx.Value(verdictKey{}).(*verdict); ok {
		v.applied = applied
	}
}

// applied counts the messages with an effect so far, or returns -1 if the
// database cannot tell.
func (e *effects) applied() int {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var n int
	if err := e.pool.QueryRow(ctx, `SELECT count(DISTINCT message_id) FROM `+e.name).Scan(&n); err != nil {
		return -1
	}
	return n
}

// applications counts each message's effects.
func (e *effects) applications(ctx context.Context) (map[uuid.UUID]int, error) {
	rows, err := e.pool.Query(ctx, `SELECT message_id, count(*) FROM `+e.name+` GROUP BY message_id`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	counts := map[uuid.UUID]int{}
	for rows.Next() {
		var id uuid.UUID
		var n int
		if err := rows.Scan(&id, &n); err != nil {
			return nil, err
		}
		counts[id] = n
	}
	return counts, rows.Err()
}

// inboxEffects is a consuming side's database: effects on PostgreSQL, or
// mariaEffects.
type inboxEffects interface {
	// handler is effects.handler.
	handler(done func(m outbox.Message, applied bool, err error)) (func(context.Context, outbox.Message) error, error)
	// applications counts each message's effects.
	applications(ctx context.Context) (map[uuid.UUID]int, error)
}

// verify checks that every delivered message's effect exists exactly once,
// and that no other message has one.
func (e *effects) verify(s *scenario, delivered map[uuid.UUID]bool) { verifyEffects(s, e, delivered) }

// verifyEffects checks that every delivered message's effect exists exactly
// once in e, and that no other message has one.
func verifyEffects(s *scenario, e inboxEffects, delivered map[uuid.UUID]bool) {
	t := s.t
	const maxReported = 5
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	counts, err := e.applications(ctx)
	if err != nil {
		t.Fatal(err)
	}
	seen := make(map[uuid.UUID]bool, len(delivered))
	wrong := 0
	for id, n := range counts {
		seen[id] = true
		if n != 1 || !delivered[id] {
			if wrong++; wrong <= maxReported {
				t.Errorf("%s: inbox: message %s applied %d times (delivered: %v); want once", s.name, id, n, delivered[id])
			}
		}
	}
	if wrong > maxReported {
		t.Errorf("%s: inbox: %d messages in all applied more than once or never delivered", s.name, wrong)
	}
	missing := 0
	for id := range delivered {
		if !seen[id] {
			if missing++; missing <= maxReported {
				t.Errorf("%s: inbox: delivered message %s was never applied", s.name, id)
			}
		}
	}
	if missing > 0 {
		t.Errorf("%s: inbox: %d of the %d delivered messages were never applied", s.name, missing, len(delivered))
	}
}

// inboxConsumers is how many deliveries checkInbox handles at once.
const inboxConsumers = 8

// checkInbox is the inbox check of the scenarios without a consumer of
// their own (the destination is a file): it hands every arrival to the
// inbox's handler, then verifies that each delivered message was applied
// exactly once. Besides the duplicates the relays caused, every 20th message
// is delivered once more at the end, as a broker redelivers a message whose
// acknowledgement was lost; deliveries run concurrently, so copies of one
// message may be handled at the same moment. It returns how many deliveries
// the inbox skipped. The caller holds s.mu.
func (s *scenario) checkInbox(arrivals []uuid.UUID, delivered map[uuid.UUID]bool) int {
	t := s.t
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var fx inboxEffects
	if s.maria != nil {
		fx = s.maria.newEffects(t)
	} else {
		fx = newEffects(t, s.schema, inboxConsumers)
	}
	var skipped, failed atomic.Int64
	handle, err := fx.handler(func(m outbox.Message, applied bool, err error) {
		switch {
		case err != nil:
			if failed.Add(1) == 1 {
				t.Errorf("%s: inbox: handle message %s: %v", s.name, m.ID, err)
			}
		case !applied:
			skipped.Add(1)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	deliveries := make(chan uuid.UUID)
	go func() {
		defer close(deliveries)
		for _, id := range arrivals {
			deliveries <- id
		}
		for i := 0; i < len(arrivals); i += 20 {
			deliveries <- arrivals[i]
		}
	}()
	var wg sync.WaitGroup
	for range inboxConsumers {
		wg.Go(func() {
			for id := range deliveries {
				_ = handle(ctx, outbox.Message{ID: id, Topic: "fault"}) // counted by the callback
			}
		})
	}
	wg.Wait()
	if n := failed.Load(); n > 0 {
		t.Errorf("%s: inbox: %d deliveries failed", s.name, n)
		return int(skipped.Load())
	}
	verifyEffects(s, fx, delivered)
	return int(skipped.Load())
}
