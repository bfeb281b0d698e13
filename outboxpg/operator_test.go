package outboxpg_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/pgtest"
	"github.com/go-outbox/outbox/outboxdriver"
	"github.com/go-outbox/outbox/outboxpg"
)

// Operators reschedule messages with UPDATEs that leave the lease columns
// alone. Such an UPDATE writes a new version of a leased row that keeps the
// claim's token; once VACUUM frees the old version's slot, another row of
// the same claim can be written there. The settlement deletes published
// rows by the address the claim left: it must delete only the rows it
// settles as published, whoever now sits at that address.
//
// Here m1 and m2 are claimed together, an operator reschedules both, VACUUM
// frees their old slots, and the operator reschedules m2 again (the
// application's new messages filling the lowest free slots) until m2's new
// version sits where the claim left m1. Settling m1 as published must leave
// m2 pending, and delete m1.
func TestSettlementAfterAnOperatorUpdateAndVacuumDeletesOnlyThePublishedRows(t *testing.T) {
	t.Parallel()
	pool := pgtest.Database(t) // its own, so that VACUUM removes what it may
	opts := outboxpg.Options{Schema: "public"}
	store := newStore(t, pool, opts)
	ctx := t.Context()
	table := pgx.Identifier{opts.Schema, "outbox"}.Sanitize()
	w := newWriter(t, store)
	write := func(topic string) *outbox.Message {
		m := &outbox.Message{Topic: topic, Payload: []byte(topic)}
		if err := w.Transact(ctx, func(ctx context.Context, tx pgx.Tx) error { return w.Write(ctx, tx, m) }); err != nil {
			t.Fatalf("write %s: %v", topic, err)
		}
		return m
	}
	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := pool.Exec(ctx, sql, args...); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	ctidOf := func(id uuid.UUID) string {
		t.Helper()
		var ctid string
		if err := pool.QueryRow(ctx, `SELECT ctid::text FROM `+table+` WHERE id = $1`, id).Scan(&ctid); err != nil {
			t.Fatalf("read the address of %s: %v", id, err)
		}
		return ctid
	}
	// No autovacuum between the steps: the test runs VACUUM itself.
	exec(`ALTER TABLE ` + table + ` SET (autovacuum_enabled = false)`)

	m1, m2 := write("m1"), write("m2")
	token := uuid.New()
	claimed, err := store.SettleAndClaim(ctx, outboxdriver.Settlement{}, outboxdriver.Claim{Limit: 10, Lease: time.Minute, Token: token})
	if err != nil || len(claimed) != 2 {
		t.Fatalf("claim: %d messages, %v; want m1 and m2", len(claimed), err)
	}
	m1Address := ctidOf(m1.ID) // where the claim left m1, as the store remembers it

	reschedule := `UPDATE ` + table + ` SET available_at = available_at + interval '1 microsecond' WHERE status = 'pending' AND id = ANY($1)`
	exec(reschedule, []uuid.UUID{m1.ID, m2.ID})
	landed := false
	for i := 0; i < 20 && !landed; i++ {
		exec(`VACUUM ` + table)
		exec(reschedule, []uuid.UUID{m2.ID})
		if landed = ctidOf(m2.ID) == m1Address; !landed {
			write("filler") // takes the lowest free slot, so that m2 moves up
		}
	}
	if !landed {
		t.Fatalf("set-up: m2 never landed at m1's old address %s (it is at %s); the test cannot show the settlement's choice", m1Address, ctidOf(m2.ID))
	}

	if _, err := store.SettleAndClaim(ctx, outboxdriver.Settlement{Token: token, Published: []uuid.UUID{m1.ID}}, outboxdriver.Claim{}); err != nil {
		t.Fatalf("settle m1 as published: %v", err)
	}
	var m1Left, m2Left int
	if err := pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE id = $1), count(*) FILTER (WHERE id = $2) FROM `+table, m1.ID, m2.ID).Scan(&m1Left, &m2Left); err != nil {
		t.Fatalf("count: %v", err)
	}
	if m2Left != 1 || m1Left != 0 {
		t.Fatalf("settling m1 as published after m2 moved to m1's old address: m1 rows left %d (want 0), m2 rows left %d (want 1: m2 was never published)", m1Left, m2Left)
	}
}

// An exchange settles and claims in one transaction: when it publishes a
// key's head, the claim in it sees the key's next message as the head. That
// must hold when the head's remembered address went stale (an operator
// rescheduled the leased row), so that its delete by id is part of the
// same transaction, not an afterthought once the claim has run. (Found by
// the model test: the claim passed over the key, whose head it still saw
// pending and leased.)
func TestExchangeThatPublishesAMovedHeadClaimsTheKeysNextMessage(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	opts := outboxpg.Options{Schema: pgtest.Schema(t), OrderByKey: true}
	store := newStore(t, pool, opts)
	ctx := t.Context()
	table := pgx.Identifier{opts.Schema, "outbox"}.Sanitize()
	w := newWriter(t, store)
	a1 := &outbox.Message{Topic: "orders", Key: "a"}
	a2 := &outbox.Message{Topic: "orders", Key: "a"}
	if err := w.Transact(ctx, func(ctx context.Context, tx pgx.Tx) error { return w.Write(ctx, tx, a1, a2) }); err != nil {
		t.Fatalf("write: %v", err)
	}
	token := uuid.New()
	got, err := store.SettleAndClaim(ctx, outboxdriver.Settlement{}, outboxdriver.Claim{Limit: 1, Lease: time.Minute, Token: token})
	if err != nil || len(got) != 1 || got[0].ID != a1.ID {
		t.Fatalf("claim: %v, %v; want a1", got, err)
	}
	// The operator reschedules the leased head: a new version, elsewhere.
	if _, err := pool.Exec(ctx, `UPDATE `+table+` SET available_at = available_at - interval '1 second' WHERE id = $1`, a1.ID); err != nil {
		t.Fatalf("reschedule a1: %v", err)
	}
	next, err := store.SettleAndClaim(ctx, outboxdriver.Settlement{Token: token, Published: []uuid.UUID{a1.ID}},
		outboxdriver.Claim{Limit: 10, Lease: time.Minute, Token: uuid.New()})
	if err != nil {
		t.Fatalf("settle a1 and claim: %v", err)
	}
	if len(next) != 1 || next[0].ID != a2.ID {
		t.Fatalf("the exchange that published a1 claimed %d messages; want a2, the key's next message once a1 is published", len(next))
	}
}
