//go:build fault

package fault

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/clitest"
	"github.com/go-outbox/outbox/outboxdriver"
	"github.com/go-outbox/outbox/outboxpg"
)

// TestFaultTablesRelayKilledAndDatabaseRestarted runs two `outbox relay
// --tables` processes over four tenants' outbox tables, the fourth migrated
// while they run, kills one of them with SIGKILL four times and restarts
// PostgreSQL once in between: every committed message of every tenant
// published, in key order, none lost, and the tenant added mid-run served.
func TestFaultTablesRelayKilledAndDatabaseRestarted(t *testing.T) {
	killTablesRelaysAndRestartTheDatabase(t, "tables relay SIGKILL x4 + PostgreSQL restart, 30k messages, 4 tenants (1 migrated mid-run), key order")
}

// TestFaultTablesRelayWithTransactionLeasesKilledAndDatabaseRestarted is
// the same with --transaction-leases: a killed relay's open claims, on
// several tables, are rolled back with its connections.
func TestFaultTablesRelayWithTransactionLeasesKilledAndDatabaseRestarted(t *testing.T) {
	killTablesRelaysAndRestartTheDatabase(t, "tables relay SIGKILL x4 + PostgreSQL restart, 30k messages, 4 tenants (1 migrated mid-run), key order, transaction leases",
		"--transaction-leases")
}

// killTablesRelaysAndRestartTheDatabase is the scenario of
// TestFaultTablesRelayKilledAndDatabaseRestarted, its relays started with
// relayArgs besides.
func killTablesRelaysAndRestartTheDatabase(t *testing.T, name string, relayArgs ...string) {
	ctl := pgControl(t)
	const tenants, kills = 4, 4
	s := newTablesScenario(t, name, tenants)
	s.ordered = true
	s.writePause = 10 * time.Millisecond // a flow that outlasts the faults
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	// Rescans every 500ms: some fail during the outage. The relays start
	// before the writers, so that the writers' flow outlasts the faults.
	start := func() *clitest.Relay {
		return s.startRelay(s.url, append([]string{"--rescan-interval", "500ms"}, relayArgs...)...)
	}
	relays := []*clitest.Relay{start(), start()}
	writeDone := make(chan error, 1)
	go func() { writeDone <- s.write(ctx, 30000, 4) }()
	progress := func() {
		before := s.arrived()
		waitFor(t, time.Minute, "relays to publish", func() bool { return s.arrived() > before })
	}
	progress() // the relays have found the first tenants' tables
	s.tenants.migrateLate(t, s.pool)
	// The relays running since before it find it at a rescan: one of
	// them publishes its first messages before any relay is restarted.
	waitFor(t, time.Minute, "a message of the tenant migrated mid-run to be published by the relays started before it", func() bool {
		late := s.tenants.committedToLate()
		return len(late) > 0 && slices.ContainsFunc(s.delivered(), func(id uuid.UUID) bool { return slices.Contains(late, id) })
	})
	for k := range kills {
		if k == kills/2 {
			progress()
			ctl("stop", "-m", "fast")
			time.Sleep(2 * time.Second) // the outage
			ctl("start", "-l", filepath.Join(os.TempDir(), "outbox-fault-pg.log"))
		}
		progress()
		// A random moment in the relays' cycle: mid-claim, mid-publish or
		// mid-settlement, of any of the tables.
		time.Sleep(time.Duration(rand.IntN(300)) * time.Millisecond)
		i := k % len(relays)
		t.Logf("kill %d at %d arrivals", k+1, s.arrived())
		relays[i].Kill()
		relays[i] = start()
	}
	if err := <-writeDone; err != nil {
		t.Fatal(err)
	}
	s.drain(2 * time.Minute)
	stopRelays(t, relays, "the kills and the database outage")
	// A killed relay process may have had every worker of every table
	// with a batch in flight (2 workers of 50 messages per table), and
	// both when the database went away.
	inFlight := tenants * 2 * 50
	s.check(kills+1, (kills+2)*inFlight)
}

// newTablesScenario is a scenario whose writers spread their keys over the
// outbox tables of n tenant schemas, served by relays with --tables; the
// last tenant is migrated only by tenantTables.migrateLate.
func newTablesScenario(t *testing.T, name string, n int) *scenario {
	s := newScenario(t, name)
	// The tenants' schemas extend the scenario's, which --tables' pattern
	// then leaves out, outbox table and all.
	tt := &tenantTables{pattern: s.schema + "_t*." + outboxpg.TableDefault, stores: make([]tenantTable, n)}
	for i := range n {
		schema := fmt.Sprintf("%s_t%d", s.schema, i)
		createSchema(t, s.pool, schema)
		tt.schemas = append(tt.schemas, schema)
		if i < n-1 {
			tt.stores[i] = migrateTenant(t, s.pool, schema)
		}
	}
	s.tenants = tt
	return s
}

// tenantTables are the outbox tables of a scenario of many tables, one per
// tenant schema, which pattern (--tables) matches.
type tenantTables struct {
	pattern string
	schemas []string

	mu     sync.Mutex
	stores []tenantTable // the zero tenantTable until the tenant is migrated
	late   []uuid.UUID   // the messages committed to the last tenant
}

// tenantTable is one tenant's store and the writer on it.
type tenantTable struct {
	store  *outboxpg.Store
	writer *outbox.Writer[pgx.Tx]
}

// migrateLate migrates the last tenant's table, which the relays running
// then find at a rescan.
func (tt *tenantTables) migrateLate(t *testing.T, pool *pgxpool.Pool) {
	last := len(tt.schemas) - 1
	table := migrateTenant(t, pool, tt.schemas[last])
	tt.mu.Lock()
	tt.stores[last] = table
	tt.mu.Unlock()
}

// errTenantNotMigrated is a commit's answer for a tenant not migrated yet:
// nothing was written.
var errTenantNotMigrated = errors.New("the tenant's table is not migrated yet")

// committer writes each transaction's messages to the tenant of their keys
// (a transaction's keys are a block of ten that always goes to the same
// tenant), so each key's messages stay in one table, in commit order.
func (tt *tenantTables) committer() (commitFunc, func(), error) {
	commit := func(ctx context.Context, msgs []*outbox.Message, rollback bool) error {
		h := fnv.New32a()
		h.Write([]byte(msgs[0].Key))
		i := int(h.Sum32() % uint32(len(tt.schemas)))
		tt.mu.Lock()
		table := tt.stores[i]
		tt.mu.Unlock()
		if table.store == nil {
			return errTenantNotMigrated
		}
		err := table.store.RunInTx(ctx, func(tx pgx.Tx) error {
			if err := table.writer.Write(ctx, tx, msgs...); err != nil {
				return err
			}
			if rollback {
				return errRollback
			}
			return nil
		})
		if err == nil && i == len(tt.schemas)-1 {
			tt.mu.Lock()
			for _, m := range msgs {
				tt.late = append(tt.late, m.ID)
			}
			tt.mu.Unlock()
		}
		return err
	}
	return commit, func() {}, nil // the stores NOTIFY the relays' listener
}

// committedToLate returns the messages committed to the tenant migrated
// mid-run so far.
func (tt *tenantTables) committedToLate() []uuid.UUID {
	tt.mu.Lock()
	defer tt.mu.Unlock()
	return slices.Clone(tt.late)
}

// stats adds up the tenants' counts of messages by state.
func (tt *tenantTables) stats(ctx context.Context) (outboxdriver.Stats, error) {
	tt.mu.Lock()
	tables := append([]tenantTable(nil), tt.stores...)
	tt.mu.Unlock()
	var sum outboxdriver.Stats
	for _, table := range tables {
		if table.store == nil {
			continue
		}
		st, err := table.store.Stats(ctx)
		if err != nil {
			return outboxdriver.Stats{}, err
		}
		sum.Pending += st.Pending
		sum.Dead += st.Dead
	}
	return sum, nil
}

// createSchema creates schema, dropped with what it holds when the test
// ends.
func createSchema(t *testing.T, pool *pgxpool.Pool, schema string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := pool.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := pool.Exec(ctx, "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
		}
	})
}

// migrateTenant migrates the outbox table of schema, its writes notifying
// the relays, and returns its store and a writer on it.
func migrateTenant(t *testing.T, pool *pgxpool.Pool, schema string) tenantTable {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	opts := outboxpg.Options{Schema: schema, Notify: true}
	m, err := outboxpg.NewMigrator(pool, opts)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Up(ctx); err != nil {
		t.Fatal(err)
	}
	store, err := outboxpg.New(pool, opts)
	if err != nil {
		t.Fatal(err)
	}
	w, err := outbox.NewWriter(store, outbox.WriterConfig{})
	if err != nil {
		t.Fatal(err)
	}
	return tenantTable{store: store, writer: w}
}
