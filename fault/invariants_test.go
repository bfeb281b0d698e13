//go:build fault

package fault

import (
	"bytes"
	"context"
	"sync"
	"sync/atomic"
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

// inboxConsumers is how many deliveries the inbox check handles at once.
const inboxConsumers = 8

// checkInbox hands every arrival to a consumer whose outbox.Inbox (a
// PostgreSQL inbox table) applies an effect, a row in a table with no unique
// key, then verifies that each delivered message was applied exactly once.
// Besides the duplicates the relays caused, every 20th message is delivered
// once more at the end, as a broker redelivers a message whose
// acknowledgement was lost; deliveries run concurrently, so copies of one
// message may be handled at the same moment. It returns how many deliveries
// the inbox skipped. The caller holds s.mu.
func (s *scenario) checkInbox(arrivals []uuid.UUID) int {
	t := s.t
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// The consumer's own commits need not wait for the disk: the inbox's
	// logic is under test here, not PostgreSQL's durability.
	cfg := pgtest.Config(t)
	cfg.MaxConns = inboxConsumers
	cfg.ConnConfig.RuntimeParams["synchronous_commit"] = "off"
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	table, err := outboxpg.NewInboxTable(pool, outboxpg.InboxOptions{Schema: s.schema})
	if err != nil {
		t.Fatal(err)
	}
	if err := table.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	effects := pgx.Identifier{s.schema, "effects"}.Sanitize()
	if _, err := pool.Exec(ctx, `CREATE TABLE `+effects+` (message_id uuid NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	inbox, err := outbox.NewInbox(table, "fault-consumer")
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
	var (
		skipped atomic.Int64
		failed  atomic.Int64
		wg      sync.WaitGroup
	)
	for range inboxConsumers {
		wg.Go(func() {
			for id := range deliveries {
				applied, err := inbox.Handle(ctx, id, func(ctx context.Context, tx pgx.Tx) error {
					_, err := tx.Exec(ctx, `INSERT INTO `+effects+` VALUES ($1)`, id)
					return err
				})
				switch {
				case err != nil:
					if failed.Add(1) == 1 {
						t.Errorf("%s: inbox: handle message %s: %v", s.name, id, err)
					}
				case !applied:
					skipped.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if n := failed.Load(); n > 0 {
		t.Errorf("%s: inbox: %d deliveries failed", s.name, n)
		return int(skipped.Load())
	}

	distinct := map[uuid.UUID]bool{}
	for _, id := range arrivals {
		distinct[id] = true
	}
	rows, err := pool.Query(ctx, `SELECT message_id, count(*) FROM `+effects+` GROUP BY message_id`)
	if err != nil {
		t.Fatal(err)
	}
	applied := 0
	for rows.Next() {
		var id uuid.UUID
		var n int
		if err := rows.Scan(&id, &n); err != nil {
			t.Fatal(err)
		}
		applied++
		if n != 1 || !distinct[id] {
			t.Errorf("%s: inbox: message %s applied %d times (delivered: %v); want once", s.name, id, n, distinct[id])
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if applied != len(distinct) {
		t.Errorf("%s: inbox: %d messages applied; want every one of the %d delivered", s.name, applied, len(distinct))
	}
	return int(skipped.Load())
}
