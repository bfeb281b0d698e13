package outboxpg_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/pgtest"
	"github.com/go-outbox/outbox/outboxdriver"
	"github.com/go-outbox/outbox/outboxpg"
)

func TestMigrateUpDownAndUpAgain(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	schema := pgtest.Schema(t)
	ctx := t.Context()
	m, err := outboxpg.NewMigrator(pool, outboxpg.Options{Schema: schema, Table: "events"})
	if err != nil {
		t.Fatalf("new migrator: %v", err)
	}
	tableExists := func() bool {
		t.Helper()
		var name *string
		if err := pool.QueryRow(ctx, `SELECT to_regclass($1)::text`, schema+".events").Scan(&name); err != nil {
			t.Fatalf("look for the table: %v", err)
		}
		return name != nil
	}
	list := func(wantApplied bool) {
		t.Helper()
		ls, err := m.List(ctx)
		if err != nil {
			t.Fatalf("list: %v", err)
		}
		if len(ls) != m.Latest() || ls[0].Version != 1 || ls[0].Name != "create_outbox" || !ls[0].Known || ls[0].Applied != wantApplied || ls[0].AppliedAt.IsZero() == wantApplied {
			t.Fatalf("list: %+v; want version 1 create_outbox, applied %v", ls, wantApplied)
		}
	}

	list(false)
	if done, err := m.Up(ctx); err != nil || len(done) != m.Latest() || done[0] != 1 {
		t.Fatalf("up: %v, %v; want every version applied", done, err)
	}
	if !tableExists() {
		t.Fatalf("table %s.events missing after up", schema)
	}
	list(true)
	if done, err := m.Up(ctx); err != nil || len(done) != 0 {
		t.Fatalf("up again: %v, %v; want nothing to do", done, err)
	}

	if done, err := m.Down(ctx, m.Latest()); err != nil || done[len(done)-1] != 1 {
		t.Fatalf("down: %v, %v; want every version reverted", done, err)
	}
	if tableExists() {
		t.Fatalf("table %s.events still exists after down", schema)
	}
	list(false)
	if _, err := m.Down(ctx, 1); err == nil || !strings.Contains(err.Error(), "below version 0") {
		t.Fatalf("down below zero: %v; want an error saying so", err)
	}
	if _, err := m.Down(ctx, 0); err == nil {
		t.Fatalf("down 0 steps: no error; want one")
	}
	if _, err := m.To(ctx, m.Latest()+1); err == nil || !strings.Contains(err.Error(), "unknown version") {
		t.Fatalf("to an unknown version: %v; want an error saying so", err)
	}

	if done, err := m.Up(ctx); err != nil || len(done) != m.Latest() {
		t.Fatalf("up after down: %v, %v; want every version applied", done, err)
	}
	store, err := outboxpg.New(pool, outboxpg.Options{Schema: schema, Table: "events"})
	if err != nil {
		t.Fatalf("new store: %v", err)
	}
	if _, err := store.Stats(ctx); err != nil {
		t.Fatalf("stats on the re-created table: %v", err)
	}
}

func TestMigrateRefusesVersionsItDoesNotKnow(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	schema := pgtest.Schema(t)
	ctx := t.Context()
	m, err := outboxpg.NewMigrator(pool, outboxpg.Options{Schema: schema})
	if err != nil {
		t.Fatalf("new migrator: %v", err)
	}
	if _, err := m.Up(ctx); err != nil {
		t.Fatalf("up: %v", err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO "`+schema+`".outbox_migrations (version, name) VALUES (99, 'from_the_future')`); err != nil {
		t.Fatalf("record version 99: %v", err)
	}
	if _, err := m.Up(ctx); err == nil || !strings.Contains(err.Error(), "99") || !strings.Contains(err.Error(), "upgrade") {
		t.Fatalf("up with version 99 recorded: %v; want an error naming 99 and the fix", err)
	}
	if _, err := m.Down(ctx, 1); err == nil || !strings.Contains(err.Error(), "99") {
		t.Fatalf("down with version 99 recorded: %v; want an error naming 99", err)
	}
	ls, err := m.List(ctx)
	if err != nil {
		t.Fatalf("list: %v", err)
	}
	last := ls[len(ls)-1]
	if last.Version != 99 || last.Known || !last.Applied || last.Name != "from_the_future" {
		t.Fatalf("list: %+v; want version 99 listed as applied and unknown", ls)
	}
}

func TestConcurrentMigratorsTakeTurns(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	// A schema that does not exist yet: the migrators race to create it too.
	schema := pgtest.Schema(t) + "_new"
	t.Cleanup(func() { _, _ = pool.Exec(context.Background(), `DROP SCHEMA IF EXISTS "`+schema+`" CASCADE`) })
	ctx := t.Context()

	const migrators = 6
	var wg sync.WaitGroup
	applied := make(chan []int, migrators)
	errs := make(chan error, migrators)
	for range migrators {
		wg.Go(func() {
			m, err := outboxpg.NewMigrator(pool, outboxpg.Options{Schema: schema})
			if err == nil {
				var done []int
				done, err = m.Up(ctx)
				applied <- done
			}
			errs <- err
		})
	}
	wg.Wait()
	close(applied)
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("concurrent up: %v", err)
		}
	}
	var all []int
	for done := range applied {
		all = append(all, done...)
	}
	m, _ := outboxpg.NewMigrator(pool, outboxpg.Options{Schema: schema})
	if len(all) != m.Latest() {
		t.Fatalf("%d concurrent migrators applied versions %v in total; want each version once", migrators, all)
	}
}

func TestMigratorSQLFillsInQuotedNames(t *testing.T) {
	t.Parallel()
	m, err := outboxpg.NewMigrator(nil, outboxpg.Options{Schema: "billing", Table: "order"})
	if err != nil {
		t.Fatalf("new migrator: %v", err)
	}
	up, down := m.SQL(outboxpg.DirectionUp), m.SQL(outboxpg.DirectionDown)
	for _, want := range []string{
		`CREATE SCHEMA IF NOT EXISTS "billing";`,
		"-- 001_create_outbox.up.sql",
		`CREATE TABLE "billing"."order" (`,
		`CONSTRAINT "order_pkey" PRIMARY KEY (id)`,
		`CREATE INDEX "order_pending_idx" ON "billing"."order" (available_at, id) WHERE status = 'pending'`,
		`CREATE INDEX "order_dead_idx"`,
		`CREATE INDEX "order_published_idx"`,
	} {
		if !strings.Contains(up, want) {
			t.Fatalf("SQL(up) lacks %q:\n%s", want, up)
		}
	}
	if !strings.Contains(down, `DROP TABLE "billing"."order";`) || !strings.Contains(down, "-- 001_create_outbox.down.sql") {
		t.Fatalf("SQL(down) lacks the DROP TABLE:\n%s", down)
	}
	for _, s := range []string{up, down} {
		if strings.Contains(s, "{{") {
			t.Fatalf("SQL has a placeholder left:\n%s", s)
		}
	}
	if public, _ := outboxpg.NewMigrator(nil, outboxpg.Options{}); strings.Contains(public.SQL(outboxpg.DirectionUp), "CREATE SCHEMA") {
		t.Fatalf("SQL(up) for the public schema creates it; want it left out")
	}
	if m.SQL("sideways") != "" {
		t.Fatalf("SQL of an unknown direction is not empty")
	}
	if _, err := m.Up(t.Context()); err == nil {
		t.Fatalf("up on a migrator without a pool: no error; want one")
	}
}

func TestMigratedTableWorksWithTheSQLItPrints(t *testing.T) {
	t.Parallel()
	// Teams that use their own migration tool apply SQL(up); the store must
	// work on the result.
	pool := pgtest.Pool(t)
	schema := pgtest.Schema(t)
	ctx := t.Context()
	opts := outboxpg.Options{Schema: schema}
	m, _ := outboxpg.NewMigrator(nil, opts)
	if _, err := pool.Exec(ctx, m.SQL(outboxpg.DirectionUp)); err != nil {
		t.Fatalf("apply SQL(up): %v", err)
	}
	store, err := outboxpg.New(pool, opts)
	if err != nil {
		t.Fatalf("new store: %v", err)
	}
	w := newWriter(t, store)
	msg := &outbox.Message{Topic: "t"}
	if err := w.Transact(ctx, func(ctx context.Context, tx pgx.Tx) error { return w.Write(ctx, tx, msg) }); err != nil {
		t.Fatalf("write: %v", err)
	}
	got, err := store.SettleAndClaim(ctx, outboxdriver.Settlement{}, outboxdriver.Claim{Limit: 1, Lease: 1e9, Token: uuid.New()})
	if err != nil || len(got) != 1 {
		t.Fatalf("claim: %v, %v; want message %s", got, err, msg.ID)
	}
	if _, err := pool.Exec(ctx, m.SQL(outboxpg.DirectionDown)); err != nil {
		t.Fatalf("apply SQL(down): %v", err)
	}
}

// A message leased under version 1 (available_at moved to the end of the
// lease) must stay leased across migration 2 and back: a relay claiming during
// an upgrade must not publish it a second time.
func TestLeaseTakenBeforeMigrationTwoSurvivesUpAndDown(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := t.Context()
	opts := outboxpg.Options{Schema: pgtest.Schema(t)}
	m, err := outboxpg.NewMigrator(pool, opts)
	if err != nil {
		t.Fatalf("new migrator: %v", err)
	}
	if _, err := m.To(ctx, 1); err != nil {
		t.Fatalf("migrate to version 1: %v", err)
	}
	leased, due := uuid.New(), uuid.New()
	if _, err := pool.Exec(ctx, `
		INSERT INTO `+pgx.Identifier{opts.Schema, "outbox"}.Sanitize()+` (id, topic, payload, created_at, available_at, lease_token)
		VALUES ($1, 't', '', now(), now() + interval '1 hour', gen_random_uuid()), ($2, 't', '', now(), now(), NULL)`,
		leased, due); err != nil {
		t.Fatalf("insert a version-1 lease: %v", err)
	}
	claimAll := func(step string) []uuid.UUID {
		t.Helper()
		store, err := outboxpg.New(pool, opts)
		if err != nil {
			t.Fatalf("new store: %v", err)
		}
		if step == "down" {
			// Version 1's claim takes what its WHERE clause reads here.
			rows, err := pool.Query(ctx, `SELECT id FROM `+pgx.Identifier{opts.Schema, "outbox"}.Sanitize()+` WHERE status = 'pending' AND available_at <= now()`)
			if err != nil {
				t.Fatalf("%s: query due rows: %v", step, err)
			}
			ids, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
			if err != nil {
				t.Fatalf("%s: read due rows: %v", step, err)
			}
			return ids
		}
		token := uuid.New()
		msgs, err := store.SettleAndClaim(ctx, outboxdriver.Settlement{}, outboxdriver.Claim{Limit: 10, Lease: time.Minute, Token: token})
		if err != nil {
			t.Fatalf("%s: claim: %v", step, err)
		}
		var ids []uuid.UUID
		for _, msg := range msgs {
			ids = append(ids, msg.ID)
		}
		if err := store.Release(ctx, token, ids); err != nil {
			t.Fatalf("%s: release: %v", step, err)
		}
		return ids
	}
	if _, err := m.Up(ctx); err != nil {
		t.Fatalf("migrate up: %v", err)
	}
	if got := claimAll("up"); len(got) != 1 || got[0] != due {
		t.Fatalf("claimed after migrating up: %v; want only the message no lease holds (%v)", got, due)
	}
	if _, err := m.Down(ctx, 1); err != nil {
		t.Fatalf("migrate down: %v", err)
	}
	if got := claimAll("down"); len(got) != 1 || got[0] != due {
		t.Fatalf("due after migrating down: %v; want only the message no lease holds (%v)", got, due)
	}
}
