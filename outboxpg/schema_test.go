package outboxpg_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/pgtest"
	"github.com/go-outbox/outbox/outboxdriver"
	"github.com/go-outbox/outbox/outboxpg"
	"github.com/go-outbox/outbox/relaytest"
)

// A relay on a table that does not exist, or is at an older migration, stops
// at once with the fix instead of logging a failed claim every poll.
func TestRelayRefusesToStartOnAMissingOrOutdatedTable(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	opts := outboxpg.Options{Schema: pgtest.Schema(t)}
	s, err := outboxpg.New(pool, opts)
	if err != nil {
		t.Fatal(err)
	}
	relaytest.RequireRunRefuses(t, s, s.Name(), "does not exist")

	m, err := outboxpg.NewMigrator(pool, opts)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.To(t.Context(), 2); err != nil {
		t.Fatal(err)
	}
	relaytest.RequireRunRefuses(t, s, s.Name(), "at an older migration", "seq")

	if _, err := m.Up(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := s.CheckSchema(t.Context()); err != nil {
		t.Fatalf("CheckSchema after migrate up: %v", err)
	}
	// Migration 4 only tunes autovacuum: a table without it still works,
	// so the relay starts.
	if _, err := m.To(t.Context(), 3); err != nil {
		t.Fatal(err)
	}
	if err := s.CheckSchema(t.Context()); err != nil {
		t.Fatalf("CheckSchema at migration 3 (all the store uses): %v", err)
	}
}

// A role the database refuses for good (here: no privilege on the table)
// stops the relay with the fix, instead of a retry forever.
func TestRelayRefusesToStartWhenTheDatabaseRefusesItsRole(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	schema := pgtest.Schema(t)
	opts := outboxpg.Options{Schema: schema}
	m, err := outboxpg.NewMigrator(pool, opts)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Up(t.Context()); err != nil {
		t.Fatal(err)
	}
	role := "outbox_norights_" + strings.ReplaceAll(schema, "-", "_")
	for _, q := range []string{
		`CREATE ROLE ` + role,
		`GRANT USAGE ON SCHEMA ` + schema + ` TO ` + role,
	} {
		if _, err := pool.Exec(t.Context(), q); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		_, _ = pool.Exec(context.Background(), `DROP OWNED BY `+role)
		_, _ = pool.Exec(context.Background(), `DROP ROLE `+role)
	})
	s, err := outboxpg.New(poolAs(t, role), opts)
	if err != nil {
		t.Fatal(err)
	}
	err = s.CheckSchema(t.Context())
	if !errors.Is(err, outboxdriver.ErrRefused) || !strings.Contains(err.Error(), "GRANT") {
		t.Fatalf("CheckSchema without privileges: %v; want ErrRefused naming the grant", err)
	}
	relay, err := outbox.NewRelay(s, relaytest.NewRecorder(), outbox.Config{Logger: relaytest.TestLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := relay.Run(ctx); !errors.Is(err, outbox.ErrRefused) || ctx.Err() != nil {
		t.Fatalf("Run without privileges = %v (context: %v); want it to stop at once with outbox.ErrRefused", err, ctx.Err())
	}

	// Least privilege: granted the outbox table and not its migrations
	// table, the role passes on the table's columns.
	if _, err := pool.Exec(t.Context(), `GRANT SELECT, INSERT, UPDATE, DELETE ON `+schema+`.outbox TO `+role); err != nil {
		t.Fatal(err)
	}
	if err := s.CheckSchema(t.Context()); err != nil {
		t.Fatalf("CheckSchema granted the outbox table only: %v", err)
	}
}

// poolAs returns a pool whose sessions act as role (the test's user must be
// allowed to SET ROLE to it, as a superuser is).
func poolAs(t *testing.T, role string) *pgxpool.Pool {
	t.Helper()
	cfg := pgtest.Config(t)
	cfg.AfterConnect = func(ctx context.Context, c *pgx.Conn) error {
		_, err := c.Exec(ctx, `SET ROLE `+role)
		return err
	}
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// A table created from the dumped SQL by another migration tool has no
// migrations table: its columns decide, and they are all there.
func TestTableCreatedFromTheDumpedSQLPassesTheCheck(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	opts := outboxpg.Options{Schema: pgtest.Schema(t)}
	m, err := outboxpg.NewMigrator(nil, opts)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(t.Context(), m.SQL(outboxpg.DirectionUp)); err != nil {
		t.Fatal(err)
	}
	s, err := outboxpg.New(pool, opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.CheckSchema(t.Context()); err != nil {
		t.Fatalf("CheckSchema on a table made from Migrator.SQL: %v", err)
	}
}

// The outbox churns through its rows like a queue: migration 4 makes
// autovacuum start after a fixed number of dead rows and run unthrottled on
// this table, and migrating down restores the cluster's settings.
func TestMigrationFourTunesAutovacuumForAQueue(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	opts := outboxpg.Options{Schema: pgtest.Schema(t)}
	m, err := outboxpg.NewMigrator(pool, opts)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.To(t.Context(), 4); err != nil {
		t.Fatal(err)
	}
	options := func() []string {
		var got []string
		if err := pool.QueryRow(t.Context(), `SELECT coalesce(reloptions, '{}') FROM pg_class WHERE oid = $1::regclass`, opts.Schema+".outbox").Scan(&got); err != nil {
			t.Fatal(err)
		}
		return got
	}
	got := options()
	for _, want := range []string{"autovacuum_vacuum_scale_factor=0", "autovacuum_vacuum_threshold=10000", "autovacuum_vacuum_cost_delay=0"} {
		if !slices.Contains(got, want) {
			t.Errorf("table options %v after migration 4 lack %s", got, want)
		}
	}
	if _, err := m.To(t.Context(), 3); err != nil {
		t.Fatal(err)
	}
	if got := options(); slices.ContainsFunc(got, func(o string) bool { return strings.HasPrefix(o, "autovacuum_") }) {
		t.Errorf("table options %v after migrating down from 4 still hold autovacuum settings", got)
	}
}

// A partitioned table, or one with inheritance children, has rows whose
// addresses (ctid) repeat across its parts, and the store settles rows by
// address: the relay refuses it at start, with what to do instead, however
// the table came to have the columns the store needs.
func TestRelayRefusesToStartOnAPartitionedOrInheritedTable(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := t.Context()
	migrated := outboxpg.Options{Schema: pgtest.Schema(t)}
	newStore(t, pool, migrated)
	source := pgx.Identifier{migrated.Schema, "outbox"}.Sanitize()

	partitioned := outboxpg.Options{Schema: pgtest.Schema(t)}
	table := pgx.Identifier{partitioned.Schema, "outbox"}.Sanitize()
	for _, sql := range []string{
		`CREATE TABLE ` + table + ` (LIKE ` + source + ` INCLUDING DEFAULTS INCLUDING IDENTITY) PARTITION BY RANGE (seq)`,
		`CREATE TABLE ` + pgx.Identifier{partitioned.Schema, "outbox_1"}.Sanitize() + ` PARTITION OF ` + table + ` FOR VALUES FROM (MINVALUE) TO (MAXVALUE)`,
	} {
		if _, err := pool.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	s, err := outboxpg.New(pool, partitioned)
	if err != nil {
		t.Fatal(err)
	}
	relaytest.RequireRunRefuses(t, s, s.Name(), "partitioned", "plain table")

	child := pgx.Identifier{pgtest.Schema(t), "outbox_child"}.Sanitize()
	if _, err := pool.Exec(ctx, `CREATE TABLE `+child+` () INHERITS (`+source+`)`); err != nil {
		t.Fatalf("create an inheritance child: %v", err)
	}
	s, err = outboxpg.New(pool, migrated)
	if err != nil {
		t.Fatal(err)
	}
	relaytest.RequireRunRefuses(t, s, s.Name(), "inheritance", "plain table")
}
