package outboxpg_test

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/go-outbox/outbox/internal/pgtest"
	"github.com/go-outbox/outbox/outboxpg"
)

// TestKeyOrderClaimCostIsBoundedWithoutStatistics runs a key-order claim on
// a table the planner has no statistics for (created, filled and never
// analyzed: a new table, or autovacuum held up) and checks that the claim
// reads fewer buffers than there are pending messages. A plan that tested
// every pending message for being its key's head, and joined the heads
// found to the candidates in a nested loop, read 38,000 buffers and took
// about a second per claim with 11,000 messages pending; with relays
// claiming side by side, the table drained at 100 messages a second
// (found by the fault suite).
func TestKeyOrderClaimCostIsBoundedWithoutStatistics(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	for _, held := range []bool{false, true} {
		t.Run(fmt.Sprintf("transaction_leases=%v", held), func(t *testing.T) {
			store := newStore(t, pool, outboxpg.Options{OrderByKey: true, TransactionLeases: held})
			ctx := t.Context()
			if _, err := pool.Exec(ctx, "ALTER TABLE "+store.Name()+" SET (autovacuum_enabled = false)"); err != nil {
				t.Fatal(err)
			}
			const keys, perKey = 200, 50
			writeRoundRobin(t, store, keys, perKey)

			tx, err := pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(ctx) // EXPLAIN ANALYZE runs the claim: leave nothing claimed
			// The relay's claims run with generic plans (see exchangeLeased).
			if _, err := tx.Exec(ctx, "SET LOCAL plan_cache_mode = force_generic_plan"); err != nil {
				t.Fatal(err)
			}
			// PREPARE outlives the transaction: the statement goes before
			// the connection goes back to the pool.
			if _, err := tx.Exec(ctx, "PREPARE claim AS "+outboxpg.ClaimSQL(store)); err != nil {
				t.Fatal(err)
			}
			defer tx.Conn().Exec(ctx, "DEALLOCATE claim")
			execute := "EXECUTE claim(60000000, gen_random_uuid(), 50)" // lease, token, limit
			if held {
				execute = "EXECUTE claim(50)" // limit
			}
			var plan []struct {
				Plan struct {
					Rows       int64 `json:"Actual Rows"`
					SharedHit  int64 `json:"Shared Hit Blocks"`
					SharedRead int64 `json:"Shared Read Blocks"`
				}
			}
			var raw []byte
			if err := tx.QueryRow(ctx, "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) "+execute).Scan(&raw); err != nil {
				t.Fatalf("explain the claim: %v", err)
			}
			if err := json.Unmarshal(raw, &plan); err != nil || len(plan) != 1 {
				t.Fatalf("read the plan: %v: %s", err, raw)
			}
			p := plan[0].Plan
			if p.Rows != 50 {
				t.Fatalf("the claim returned %d rows; want a full batch of 50", p.Rows)
			}
			if buffers := p.SharedHit + p.SharedRead; buffers >= keys*perKey {
				t.Errorf("a claim of 50 from %d keys read %d buffers with %d messages pending; want fewer than the messages: a claim must not read through the backlog", keys, buffers, keys*perKey)
			}
			t.Logf("claim of 50 from %d keys, %d pending: %d buffers", keys, keys*perKey, p.SharedHit+p.SharedRead)
		})
	}
}
