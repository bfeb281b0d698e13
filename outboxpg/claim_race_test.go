package outboxpg_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/pgtest"
	"github.com/go-outbox/outbox/outboxdriver"
	"github.com/go-outbox/outbox/outboxpg"
)

// pauseLockKeys are the advisory locks paused claims wait on, one per test.
const pauseLockKeys = 72_4300

// A key-order claim reads its candidates in the statement's snapshot and
// locks each head afterwards. If the head changes in between (another
// worker releases it, an operator reschedules it) and that change commits,
// the head is left out of the batch: PostgreSQL releases with the fix of
// TID scans' recheck skip it at the lock; earlier ones lock its new version,
// at an address the lease (by address, in the same snapshot) does not see.
// Its run must then stay out too, or the key's later messages go out before
// its first (docs/design/key-order-claim.md, "The TID-scan subtlety"; on
// earlier releases the guard is missed_head).
//
// The test makes that window happen on purpose: a row security policy calls
// a function that, the first time the claim reads the head, waits on an
// advisory lock the test holds; while the claim waits, the test updates the
// head and commits, then lets the claim go on.
func TestAKeysRunIsNotLeasedWithoutItsHeadWhenTheHeadChangesDuringTheClaim(t *testing.T) {
	t.Parallel()
	for i, txLeases := range []bool{false, true} {
		t.Run(fmt.Sprintf("TransactionLeases=%v", txLeases), func(t *testing.T) {
			t.Parallel()
			pool := pgtest.Pool(t)
			ctx := t.Context()
			store := newStore(t, pool, outboxpg.Options{})
			msgs := writeRoundRobin(t, store, 1, 3)
			head := msgs[0].ID
			pausing := pauseOnFirstRead(t, store.Name(), head, pauseLockKeys+i)

			schema, table, _ := strings.Cut(store.Name(), ".")
			paused, err := outboxpg.New(poolAs(t, pausing.role), outboxpg.Options{
				Schema: schema, Table: table, OrderByKey: true, TransactionLeases: txLeases,
			})
			if err != nil {
				t.Fatal(err)
			}
			type claimed struct {
				msgs []outbox.Message
				err  error
			}
			token := uuid.New()
			done := make(chan claimed, 1)
			go func() {
				got, err := paused.SettleAndClaim(ctx, outboxdriver.Settlement{},
					outboxdriver.Claim{Limit: 10, Lease: time.Minute, Token: token})
				done <- claimed{got, err}
			}()
			pausing.waitForTheClaim(t)
			// The head changes and the change commits while the claim waits
			// with its snapshot taken: a new version at a new address.
			if _, err := pool.Exec(ctx, `UPDATE `+pgx.Identifier{schema, table}.Sanitize()+
				` SET available_at = available_at WHERE id = $1`, head); err != nil {
				t.Fatal(err)
			}
			pausing.release(t)
			res := <-done
			if res.err != nil {
				t.Fatalf("claim: %v", res.err)
			}
			got := ids(res.msgs)
			if slices.Contains(got, head) {
				t.Fatalf("the claim leased the head %s although it changed after the claim's snapshot: "+
					"this test no longer opens the window it is about (claimed %v)", head, got)
			}
			if len(got) > 0 {
				t.Fatalf("claimed %v without their key's first message %s: the key's later messages would go out before it",
					got, head)
			}
			nextToken := uuid.New()
			next, err := paused.SettleAndClaim(ctx, outboxdriver.Settlement{},
				outboxdriver.Claim{Limit: 10, Lease: time.Minute, Token: nextToken})
			if err != nil {
				t.Fatal(err)
			}
			// An open claim would hold its rows' locks, and the schema's
			// drop, until its lease ends.
			defer func() { _ = paused.Release(context.Background(), nextToken, ids(next)) }()
			if want := []uuid.UUID{msgs[0].ID, msgs[1].ID, msgs[2].ID}; !slices.Equal(ids(next), want) {
				t.Fatalf("the next claim took %v; want the whole key in order %v", ids(next), want)
			}
		})
	}
}

func ids(msgs []outbox.Message) []uuid.UUID {
	out := make([]uuid.UUID, len(msgs))
	for i, m := range msgs {
		out[i] = m.ID
	}
	return out
}

// pause makes the first read of one row, by a role under a row security
// policy, wait on an advisory lock the test holds.
type pause struct {
	role string
	lock int       // the advisory lock's key
	gate *pgx.Conn // holds lock until release
}

// pauseOnFirstRead sets up a pause on the row id of table (schema.table)
// for a new role, on the advisory lock lock, and takes the gate.
func pauseOnFirstRead(t *testing.T, table string, id uuid.UUID, lock int) *pause {
	t.Helper()
	pool := pgtest.Pool(t)
	ctx := t.Context()
	schema, name, _ := strings.Cut(table, ".")
	role := "outbox_pause_" + strings.ReplaceAll(schema, "-", "_")
	q := pgx.Identifier{schema, name}.Sanitize()
	armed := pgx.Identifier{schema, "pause_armed"}.Sanitize()
	fn := pgx.Identifier{schema, "pause_on_first_read"}.Sanitize()
	for _, stmt := range []string{
		`CREATE ROLE ` + role,
		`GRANT USAGE ON SCHEMA ` + pgx.Identifier{schema}.Sanitize() + ` TO ` + role,
		`GRANT SELECT, INSERT, UPDATE, DELETE ON ` + q + ` TO ` + role,
		`CREATE TABLE ` + armed + ` (armed boolean NOT NULL)`,
		`INSERT INTO ` + armed + ` VALUES (true)`,
		// SECURITY DEFINER: the role needs no rights on the flag.
		`CREATE FUNCTION ` + fn + `(row_id uuid) RETURNS boolean LANGUAGE plpgsql VOLATILE SECURITY DEFINER AS $$
BEGIN
	IF row_id = '` + id.String() + `' THEN
		UPDATE ` + armed + ` SET armed = false WHERE armed;
		IF FOUND THEN
			PERFORM pg_advisory_lock(` + fmt.Sprint(lock) + `);
			PERFORM pg_advisory_unlock(` + fmt.Sprint(lock) + `);
		END IF;
	END IF;
	RETURN true;
END $$`,
		`ALTER TABLE ` + q + ` ENABLE ROW LEVEL SECURITY`,
		`CREATE POLICY pause ON ` + q + ` USING (` + fn + `(id)) WITH CHECK (true)`,
	} {
		if _, err := pool.Exec(ctx, stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	t.Cleanup(func() {
		_, _ = pool.Exec(context.Background(), `DROP OWNED BY `+role)
		_, _ = pool.Exec(context.Background(), `DROP ROLE `+role)
	})
	gate, err := pgx.ConnectConfig(ctx, pgtest.Config(t).ConnConfig)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = gate.Close(context.Background()) })
	if _, err := gate.Exec(ctx, `SELECT pg_advisory_lock($1)`, lock); err != nil {
		t.Fatal(err)
	}
	return &pause{role: role, lock: lock, gate: gate}
}

// waitForTheClaim returns once a backend of the role waits on the gate.
func (p *pause) waitForTheClaim(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var waiting bool
		err := p.gate.QueryRow(t.Context(), `SELECT EXISTS (SELECT 1 FROM pg_locks
			WHERE locktype = 'advisory' AND NOT granted AND classid = 0 AND objid = $1 AND objsubid = 1)`,
			p.lock).Scan(&waiting)
		if err != nil {
			t.Fatal(err)
		}
		if waiting {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the claim never read the head: no backend waits on the pause")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// release lets the paused claim go on.
func (p *pause) release(t *testing.T) {
	t.Helper()
	if _, err := p.gate.Exec(t.Context(), `SELECT pg_advisory_unlock($1)`, p.lock); err != nil {
		t.Fatal(err)
	}
}
