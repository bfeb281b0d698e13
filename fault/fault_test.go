//go:build fault

// Package fault is the fault-injection suite: relay processes killed at random
// moments, the database stopped and restarted, RabbitMQ and NATS stopped and
// restarted under relays publishing to them, Redis killed and restarted with
// its append-only file, stalled connections to the
// database and to the brokers, consumer processes killed at random moments.
// Every scenario ends with the same invariant check: every committed message
// delivered, no rolled-back message delivered, duplicates only from batches
// in flight at a fault, counted and bounded, each key's messages in commit
// order where the relays run --order-by-key, and a consumer's inbox applying
// each delivered message once. In the broker scenarios that consumer is a
// consumer adapter (outboxamqp.Consume, outboxnats.Consume,
// outboxredis.Consume) running through
// the fault. Run it with scripts/fault (it needs a PostgreSQL it may stop:
// TEST_PG_CTL, TEST_PGDATA, TEST_PG_RUNAS; a RabbitMQ it may stop:
// TEST_AMQP_URL, TEST_RABBITMQ_CTL; and a MariaDB it may stop:
// TEST_MYSQL_URL, TEST_MYSQL_CTL, TEST_MYSQL_BASE). broker_test.go holds the
// broker scenarios, consumer_test.go the consumers, mariadb_test.go the
// scenarios on MariaDB, tables_test.go the relays of many tables
// (--tables), redis_test.go those on Redis (which need
// redis-server on the PATH), sqs_test.go the SQS consumers (goaws in the test
// process, through internal/awstest; its relay runs in the test process, as
// the CLI's SQS client cannot speak goaws's query protocol), pubsub_test.go
// the Pub/Sub consumers (pstest and the relay in the test process).
package fault

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/clitest"
	"github.com/go-outbox/outbox/internal/pgtest"
	"github.com/go-outbox/outbox/internal/proxytest"
	"github.com/go-outbox/outbox/outboxdriver"
	"github.com/go-outbox/outbox/outboxpg"
)

// report collects one line per scenario, printed after all tests. Its
// consumer column says what applied the messages through the inbox: the
// consumer adapter that ran through the scenario (outboxamqp, outboxnats;
// "nats 2 procs" for consumer processes), or "direct" where the check hands
// the arrivals to the inbox itself (checkInbox); inbox skips counts the
// deliveries the inbox skipped as applied before.
var report struct {
	sync.Mutex
	lines []struct{ name, counts string }
	// notes are what a scenario did besides its faults (an operator's
	// statements, say), printed under the table, one line each.
	notes []string
}

func TestMain(m *testing.M) {
	if code, ok := runChild(); ok {
		os.Exit(code) // a consumer process of a scenario, not a test run
	}
	code := m.Run()
	report.Lock()
	sort.Slice(report.lines, func(i, j int) bool { return report.lines[i].name < report.lines[j].name })
	width := len("scenario")
	for _, l := range report.lines {
		width = max(width, len(l.name))
	}
	fmt.Println("\nfault suite report")
	fmt.Printf("%-*s %9s %9s %7s %10s %6s %10s %-12s %11s\n", width, "scenario", "committed", "ambiguous", "faults", "duplicates", "bound", "key order", "consumer", "inbox skips")
	for _, l := range report.lines {
		fmt.Printf("%-*s %s\n", width, l.name, l.counts)
	}
	sort.Strings(report.notes)
	for _, n := range report.notes {
		fmt.Println(n)
	}
	report.Unlock()
	os.Exit(code)
}

// scenario is one run: a table, writers, relay processes and where they
// publish: a JSON-lines file by default, a broker after toRabbitMQ or
// toNATS.
type scenario struct {
	t         *testing.T
	name      string
	url       string
	schema    string
	pool      *pgxpool.Pool
	store     *outboxpg.Store
	published string
	out       *os.File

	// publisher is the relays' --publisher URL.
	publisher string
	// arrived counts the messages at the destination so far, duplicates
	// included, for waits on progress; -1 while it cannot tell (a broker
	// down).
	arrived func() int
	// delivered returns the message ids at the destination in the order
	// they arrived, duplicates included, once the relays are stopped.
	delivered func() []uuid.UUID
	// ordered runs the relays with --order-by-key, and the check then
	// verifies that each key's messages arrived in commit order.
	ordered bool
	// consumer, if set, consumes from the broker while the scenario runs
	// and applies each message through an inbox; the check settles it.
	// Without one, the check hands the arrivals to an inbox (checkInbox).
	consumer consumer
	// writePause is how long each writer pauses after a commit: a steady
	// flow of messages instead of as many as the database takes.
	writePause time.Duration
	// maria is the MariaDB side of a MariaDB scenario (mariadb_test.go):
	// its writers and drain go there; nil on PostgreSQL.
	maria *mariaDB
	// tenants are the tables of a scenario of many tables
	// (tables_test.go), which the relays serve with --tables tables: the
	// writers spread their keys over them, and the drain waits for all.
	tenants *tenantTables

	mu         sync.Mutex
	committed  []uuid.UUID          // commit returned nil: must be delivered
	ambiguous  []uuid.UUID          // commit returned an error: may or may not be
	rolledBack []uuid.UUID          // rolled back on purpose: must never be delivered
	keyOf      map[uuid.UUID]string // the key of each committed or ambiguous message
	relays     []*clitest.Relay     // every relay process started, for a failed drain's report
}

func newScenario(t *testing.T, name string) *scenario {
	ctx := context.Background()
	s := &scenario{t: t, name: name, url: pgtest.URL(t), schema: pgtest.Schema(t), keyOf: map[uuid.UUID]string{}}
	cfg := pgtest.Config(t)
	cfg.MaxConns = 8
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	s.pool = pool
	opts := outboxpg.Options{Schema: s.schema}
	m, err := outboxpg.NewMigrator(pool, opts)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Up(ctx); err != nil {
		t.Fatal(err)
	}
	if s.store, err = outboxpg.New(pool, opts); err != nil {
		t.Fatal(err)
	}
	s.toFile()
	return s
}

// toFile makes the scenario's destination a JSON-lines file the relays
// write to (--publisher stdout:).
func (s *scenario) toFile() {
	t := s.t
	s.published = filepath.Join(t.TempDir(), "published.jsonl")
	var err error
	if s.out, err = os.OpenFile(s.published, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.out.Close() })
	s.publisher = "stdout:"
	s.arrived = func() int { return clitest.Lines(t, s.published) }
	s.delivered = func() []uuid.UUID { return clitest.PublishedInOrder(t, s.published) }
}

// startRelay starts a relay process on the database at url publishing to the
// scenario's destination, with the flags every relay of the scenario gets,
// unless extra (flags and their values) gives them too.
func (s *scenario) startRelay(url string, extra ...string) *clitest.Relay {
	return s.startRelayTo(url, s.publisher, extra...)
}

// startRelayTo is startRelay with another --publisher URL (the same
// destination through a proxy).
func (s *scenario) startRelayTo(url, publisher string, extra ...string) *clitest.Relay {
	args := []string{"--database-url", url}
	switch {
	case s.tenants != nil:
		args = append(args, "--tables", s.tenants.pattern)
	case s.schema != "": // a MySQL table lives in the URL's database
		args = append(args, "--schema", s.schema)
	}
	for _, f := range [][2]string{{"--batch-size", "50"}, {"--workers", "2"}, {"--lease", "3s"},
		{"--poll-interval", "100ms"}, {"--log-level", "warn"}} {
		if !slices.Contains(extra, f[0]) {
			args = append(args, f[0], f[1])
		}
	}
	args = append(args, extra...)
	if s.ordered {
		args = append(args, "--order-by-key")
	}
	var out io.Writer
	if publisher == "stdout:" {
		out = s.out
	}
	r := clitest.StartRelayTo(s.t, publisher, out, args...)
	s.mu.Lock()
	s.relays = append(s.relays, r)
	s.mu.Unlock()
	return r
}

// failedAttempts counts pending messages that failed to publish at least
// once, or returns -1 if the database cannot tell.
func (s *scenario) failedAttempts() int {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var n int
	q := "SELECT count(*) FROM " + pgx.Identifier{s.schema, outboxpg.TableDefault}.Sanitize() + " WHERE attempts > 0"
	if err := s.pool.QueryRow(ctx, q).Scan(&n); err != nil {
		return -1
	}
	return n
}

// keysPerWriter is how many keys each writer spreads its messages over. A
// writer commits the messages of its keys one transaction after the other,
// so each key's commit order is its id order. The keys outnumber the
// messages relays hold in flight, so ordered claims always find work.
const keysPerWriter = 250

// write commits total messages in transactions of ten from writers
// goroutines, rolling back every seventh transaction on purpose. Failed
// transactions (the database is down) are retried with new messages until
// total are committed. It returns when done or ctx ends.
func (s *scenario) write(ctx context.Context, total, writers int) error {
	commit, notify, err := s.committer()
	if err != nil {
		return err
	}
	var committedCount int
	var wg sync.WaitGroup
	for g := range writers {
		wg.Go(func() {
			for tx := 0; ; tx++ {
				s.mu.Lock()
				done := committedCount >= total
				s.mu.Unlock()
				if done || ctx.Err() != nil {
					return
				}
				msgs := make([]*outbox.Message, 10)
				for i := range msgs {
					key := fmt.Sprintf("w%d-%d", g, (tx*len(msgs)+i)%keysPerWriter)
					msgs[i] = &outbox.Message{Topic: "fault", Key: key, Payload: fmt.Appendf(nil, `{"w":%d,"tx":%d}`, g, tx)}
				}
				rollback := tx%7 == 3
				err := commit(ctx, msgs, rollback)
				ids := make([]uuid.UUID, len(msgs))
				for i, m := range msgs {
					ids[i] = m.ID
				}
				s.mu.Lock()
				switch {
				case errors.Is(err, errRollback):
					s.rolledBack = append(s.rolledBack, ids...)
				case err == nil:
					s.committed = append(s.committed, ids...)
					committedCount += len(ids)
				case ids[0] != uuid.Nil:
					// The statement may have run and the commit's answer
					// been lost: either outcome is possible.
					s.ambiguous = append(s.ambiguous, ids...)
				}
				if err == nil || !errors.Is(err, errRollback) && ids[0] != uuid.Nil {
					for _, m := range msgs {
						s.keyOf[m.ID] = m.Key
					}
				}
				s.mu.Unlock()
				if err != nil && !errors.Is(err, errRollback) {
					time.Sleep(50 * time.Millisecond) // the database is away: do not spin
				} else {
					notify()
					time.Sleep(s.writePause)
				}
			}
		})
	}
	wg.Wait()
	return ctx.Err()
}

var errRollback = errors.New("rolled back on purpose")

// commitFunc writes msgs in one transaction and commits it, or rolls it
// back with errRollback if rollback.
type commitFunc func(ctx context.Context, msgs []*outbox.Message, rollback bool) error

// committer returns the scenario's commitFunc and its writer's Notify.
func (s *scenario) committer() (commitFunc, func(), error) {
	if s.maria != nil {
		return s.maria.committer()
	}
	if s.tenants != nil {
		return s.tenants.committer()
	}
	w, err := outbox.NewWriter(s.store, outbox.WriterConfig{})
	if err != nil {
		return nil, nil, err
	}
	return func(ctx context.Context, msgs []*outbox.Message, rollback bool) error {
		return s.store.RunInTx(ctx, func(tx pgx.Tx) error {
			if err := w.Write(ctx, tx, msgs...); err != nil {
				return err
			}
			if rollback {
				return errRollback
			}
			return nil
		})
	}, w.Notify, nil
}

// stats counts the scenario's messages by state.
func (s *scenario) stats(ctx context.Context) (outboxdriver.Stats, error) {
	if s.maria != nil {
		return s.maria.store.Stats(ctx)
	}
	if s.tenants != nil {
		return s.tenants.stats(ctx)
	}
	return s.store.Stats(ctx)
}

// drain waits until nothing is pending, reading through a fresh query each
// time (the pool reconnects after an outage).
func (s *scenario) drain(timeout time.Duration) {
	s.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		st, err := s.stats(context.Background())
		if err == nil && st.Pending == 0 {
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("%s: after %v still not drained: %+v (err %v)\n%s", s.name, timeout, st, err, s.whyStuck())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// whyStuck describes what a drain that did not end leaves: which relay
// processes still run (and what each was doing: it dumps their goroutines,
// which ends them), what holds back the pending messages (not due yet,
// leased, behind a head), a few stuck keys' rows, and the database
// sessions, with their open transactions and what they wait for.
func (s *scenario) whyStuck() string {
	var b strings.Builder
	s.mu.Lock()
	running := 0
	for _, r := range s.relays {
		if !r.Exited() {
			running++
		}
	}
	fmt.Fprintf(&b, "relay processes: %d started, %d running (their goroutines follow, in their standard error)\n", len(s.relays), running)
	relays := slices.Clone(s.relays)
	s.mu.Unlock()
	// The database's view first, while the relays' sessions are open.
	defer func() {
		for _, r := range relays {
			if !r.Exited() {
				r.DumpGoroutines()
			}
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if s.maria != nil {
		s.maria.whyStuck(ctx, &b)
		return b.String()
	}
	var queries []query
	schemas := []string{s.schema}
	if s.tenants != nil {
		schemas = s.tenants.schemas
	}
	for _, schema := range schemas {
		queries = append(queries, tableQueries(schema)...)
	}
	queries = append(queries, query{"database sessions", `SELECT pid, application_name, state, (now() - xact_start)::text AS in_transaction, wait_event_type, wait_event,
			left(regexp_replace(query, '\s+', ' ', 'g'), 80) AS query
			FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()`})
	for _, q := range queries {
		fmt.Fprintf(&b, "%s:\n", q.title)
		rows, err := s.pool.Query(ctx, q.sql)
		if err != nil {
			fmt.Fprintf(&b, "  (%v)\n", err)
			continue
		}
		for rows.Next() {
			vals, err := rows.Values()
			if err != nil {
				fmt.Fprintf(&b, "  (%v)\n", err)
				break
			}
			fmt.Fprintf(&b, "  %v\n", vals)
		}
		if err := rows.Err(); err != nil {
			fmt.Fprintf(&b, "  (%v)\n", err)
		}
		rows.Close()
	}
	return b.String()
}

// query is one of whyStuck's questions to the database.
type query struct{ title, sql string }

// tableQueries are whyStuck's queries on the outbox table of schema: what
// holds its pending messages back, and the rows of its stuck keys.
func tableQueries(schema string) []query {
	table := pgx.Identifier{schema, outboxpg.TableDefault}.Sanitize()
	return []query{
		{"pending rows of " + table, `SELECT count(*) AS pending, count(*) FILTER (WHERE available_at > now()) AS later,
			count(*) FILTER (WHERE locked_until > now()) AS leased, count(*) FILTER (WHERE attempts > 0) AS failed_before,
			count(DISTINCT key) AS keys FROM ` + table + ` WHERE status = 'pending'`},
		{"the first rows of the three keys with the oldest pending messages in " + table, `SELECT key, seq, id::text, status, (available_at - now())::text AS due_in,
			(locked_until - now())::text AS leased_for, attempts, last_error FROM ` + table + ` WHERE key IN (
				SELECT key FROM ` + table + ` WHERE status = 'pending' GROUP BY key ORDER BY min(seq) LIMIT 3)
			ORDER BY key, seq LIMIT 15`},
	}
}

// check verifies the invariants and records the scenario in the report:
// every committed message delivered, no rolled-back one, duplicates within
// bound, each key's messages in commit order if the relays ran ordered, and
// a consumer's inbox applying each delivered message once: the scenario's
// consumer, which applied them while it ran, or else checkInbox.
func (s *scenario) check(faults, bound int) {
	s.t.Helper()
	arrivals := s.delivered()
	counts := make(map[uuid.UUID]int, len(arrivals))
	for _, id := range arrivals {
		counts[id]++
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	duplicates := 0
	for _, id := range s.committed {
		switch n := counts[id]; {
		case n == 0:
			s.t.Errorf("%s: committed message %s was never delivered", s.name, id)
		case n > 1:
			duplicates += n - 1
		}
	}
	for _, id := range s.ambiguous {
		if n := counts[id]; n > 1 {
			duplicates += n - 1
		}
	}
	for _, id := range s.rolledBack {
		if counts[id] != 0 {
			s.t.Errorf("%s: rolled-back message %s was delivered %d times", s.name, id, counts[id])
		}
	}
	known := len(s.committed) + len(s.ambiguous)
	if extra := len(counts) - known; extra > 0 {
		s.t.Errorf("%s: %d delivered messages were never written", s.name, extra)
	}
	order := "-"
	if s.ordered {
		order = fmt.Sprintf("%d keys", s.checkKeyOrder(arrivals))
	}
	delivered := make(map[uuid.UUID]bool, len(counts))
	for id := range counts {
		delivered[id] = true
	}
	by, skipped := "direct", 0
	switch {
	case s.consumer != nil:
		by, skipped = s.consumer.label(), s.consumer.settle(delivered)
	default:
		skipped = s.checkInbox(arrivals, delivered)
	}
	line := fmt.Sprintf("%9d %9d %7d %10d %6d %10s %-12s %11d", len(s.committed), len(s.ambiguous), faults, duplicates, bound, order, by, skipped)
	report.Lock()
	report.lines = append(report.lines, struct{ name, counts string }{s.name, line})
	report.Unlock()
	s.t.Log(s.name + " " + line)
	if duplicates > bound {
		s.t.Errorf("%s: %d duplicates, want at most %d (batches in flight at the faults)", s.name, duplicates, bound)
	}
}

// TestFaultRelayKilledTenTimes kills relay processes with SIGKILL at random
// moments, ten times in a 50,000-message run, restarting each.
func TestFaultRelayKilledTenTimes(t *testing.T) {
	s := newScenario(t, "relay SIGKILL x10, 50k messages, 2 relays, key order")
	s.killRelaysWhileWriting(50000, 10)
}

// TestFaultRelayKilledWithTransactionLeases is TestFaultRelayKilledTenTimes
// with claims held in a transaction (--transaction-leases): a killed
// relay's connections close, PostgreSQL rolls its claims back, and the
// other relay must publish those messages in key order, none lost.
func TestFaultRelayKilledWithTransactionLeases(t *testing.T) {
	s := newScenario(t, "relay SIGKILL x5, 20k messages, 2 relays, key order, transaction leases")
	s.killRelaysWhileWriting(20000, 5, "--transaction-leases")
}

// killRelaysWhileWriting writes messages in key order while two relays
// (started with relayArgs) publish them, kills one of the relays with
// SIGKILL at a random moment kills times, restarting it each time, and
// checks that every message was published once, in key order.
func (s *scenario) killRelaysWhileWriting(messages, kills int, relayArgs ...string) {
	s.ordered = true
	s.killRelays(messages, kills, relayArgs...)
}

// killRelays is killRelaysWhileWriting with the relays in key order if
// s.ordered says so, and the check of order only then.
func (s *scenario) killRelays(messages, kills int, relayArgs ...string) {
	s.writeAndKillRelays(messages, kills, relayArgs...)
	// Each kill can duplicate what the killed relay had in flight.
	s.check(kills, kills*2*50)
}

// writeAndKillRelays is killRelays up to the check: it returns once
// everything is published and the relays are stopped.
func (s *scenario) writeAndKillRelays(messages, kills int, relayArgs ...string) {
	t := s.t
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	writeDone := make(chan error, 1)
	go func() { writeDone <- s.write(ctx, messages, 4) }()
	start := func() *clitest.Relay { return s.startRelay(s.url, relayArgs...) }
	relays := []*clitest.Relay{start(), start()}
	for k := range kills {
		before := s.arrived()
		waitFor(t, time.Minute, "relays to publish", func() bool { return s.arrived() > before })
		// A random moment in the relays' cycle: mid-claim, mid-publish or
		// mid-settlement.
		time.Sleep(time.Duration(rand.IntN(300)) * time.Millisecond)
		i := k % len(relays)
		relays[i].Kill()
		relays[i] = start()
	}
	if err := <-writeDone; err != nil {
		t.Fatal(err)
	}
	for _, r := range relays {
		if r.Exited() {
			t.Fatalf("a relay process ended by itself; its standard error:\n%s", r.Stderr())
		}
	}
	s.drain(2 * time.Minute)
	for _, r := range relays {
		r.Stop()
	}
}

// stopRelays stops relays at the end of a run, failing the test if one of
// them exited by itself during outage instead of reconnecting.
func stopRelays(t *testing.T, relays []*clitest.Relay, outage string) {
	t.Helper()
	for _, r := range relays {
		if r.Exited() {
			t.Errorf("a relay process exited during %s instead of reconnecting", outage)
		}
		r.Stop()
	}
}

func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	if !waitUntil(timeout, cond) {
		t.Fatalf("timed out after %v waiting for %s", timeout, what)
	}
}

// waitUntil polls cond until it holds or timeout has passed, and reports
// whether it held.
func waitUntil(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
	return true
}

// TestFaultStalledDatabaseConnection puts a TCP proxy that stops forwarding
// (without closing) between one relay and the database: the relay's leases
// expire and another relay takes its messages over.
func TestFaultStalledDatabaseConnection(t *testing.T) {
	s := newScenario(t, "stalled relay-database link, 10k msgs")
	p := proxytest.ForURL(t, s.url)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	writeDone := make(chan error, 1)
	go func() { writeDone <- s.write(ctx, 10000, 2) }()
	stalled := s.startRelay(p.URL(s.url))
	waitFor(t, time.Minute, "the proxied relay to publish", func() bool { return s.arrived() > 1000 })
	p.Stall()
	taker := s.startRelay(s.url)
	if err := <-writeDone; err != nil {
		t.Fatal(err)
	}
	s.drain(2 * time.Minute)
	p.Release()
	taker.Stop()
	stalled.Stop()
	// The stalled relay's batches in flight may be published twice.
	s.check(1, 2*50)
}
