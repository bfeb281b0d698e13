//go:build fault

package fault

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/go-outbox/outbox/internal/pgtest"
	"github.com/go-outbox/outbox/outboxhttp"
	"github.com/go-outbox/outbox/outboxpg"
)

// TestFaultOperatorUpdatesAndVacuumWhileRelaysAreKilled runs, while relays
// publish in key order and are killed with SIGKILL at random moments, an
// operator who about every second rewrites pending rows without touching
// their lease columns (a no-op UPDATE, a reschedule by a millisecond, a
// headers = headers), the leased ones among them, rewrites the leased rows
// again, VACUUMs the table (twice in the run VACUUM FULL), and rewrites them
// once more: rows of a claim in flight move into slots that page pruning
// or VACUUM freed, some of them where the claim found another of its rows.
// The relays publish to a webhook that fails one request in ten, so that a
// batch is settled in part (the failed message retried, the rest of its key
// put back): a settlement that deleted rows by address trusting the lease
// token alone then deleted messages it had not published (before commit
// 379ac61 this run lost 15 to 30 of them, every time). Nothing may be lost.
func TestFaultOperatorUpdatesAndVacuumWhileRelaysAreKilled(t *testing.T) {
	for _, tc := range []struct {
		name  string
		flags []string
	}{
		{"column leases", nil},
		{"transaction leases", []string{"--transaction-leases"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const messages, kills = 10000, 4
			s := newScenario(t, "operator UPDATE+VACUUM, relay SIGKILL x4, 10k msgs, webhook, key order, "+tc.name)
			s.toWebhook(10)
			op := startOperator(t, s)
			s.ordered = true
			s.writeAndKillRelays(messages, kills, append([]string{"--backoff-base", "200ms", "--backoff-max", "500ms", "--max-attempts", "10000"}, tc.flags...)...)
			st := op.stop()
			note := fmt.Sprintf("  %s: %s", s.name, st)
			t.Log(note)
			report.Lock()
			report.notes = append(report.notes, note)
			report.Unlock()
			if st.updated == 0 || st.vacuums == 0 {
				t.Errorf("%s: the operator updated %d rows and ran %d VACUUMs; the scenario needs both", s.name, st.updated, st.vacuums)
			}
			if st.removed == 0 {
				t.Errorf("%s: VACUUM removed no dead row version in the whole run: something holds back the horizon, and the slots the scenario is about were never freed", s.name)
			}
			// Each kill can duplicate what the killed relay had in flight.
			s.check(kills, kills*2*50)
		})
	}
}

// webhookSecret signs the relays' webhook requests; the receiver does not
// check signatures.
const webhookSecret = "fault-suite-webhook-secret-of-32-bytes-or-more"

// toWebhook makes the scenario's relays publish to a webhook receiver in
// the test, which answers one request in failEvery, at random, with 500
// (the relay retries the message and puts the rest of its key back), the
// others with 204 after 2 to 10 ms, as an endpoint across a network does
// (which keeps each batch in flight for tens of milliseconds, long enough
// for the operator's statements to pass by). A message counts as delivered when the receiver accepts it.
func (s *scenario) toWebhook(failEvery int) {
	t := s.t
	var mu sync.Mutex
	var accepted []uuid.UUID
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, err := uuid.Parse(r.Header.Get(outboxhttp.HeaderID))
		if err != nil {
			http.Error(w, "no message id", http.StatusBadRequest)
			return
		}
		if rand.IntN(failEvery) == 0 {
			http.Error(w, "failing on purpose", http.StatusInternalServerError)
			return
		}
		time.Sleep(time.Duration(5+rand.IntN(21)) * time.Millisecond)
		mu.Lock()
		accepted = append(accepted, id)
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	t.Setenv("OUTBOX_WEBHOOK_SECRET", webhookSecret)
	s.publisher = srv.URL + "/hook?outbox_timeout=2s&outbox_concurrency=4"
	s.arrived = func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(accepted)
	}
	s.delivered = func() []uuid.UUID {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(accepted)
	}
}

// operator is someone running statements on the outbox table by hand while
// relays run: see TestFaultOperatorUpdatesAndVacuumWhileRelaysAreKilled.
type operator struct {
	t      *testing.T
	table  string
	conn   *pgx.Conn
	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once

	mu sync.Mutex
	st operatorStats
	// notices collects the INFO lines of VACUUM VERBOSE on conn.
	notices []string
}

// operatorStats is what the operator did in a run.
type operatorStats struct {
	updates, updated int // UPDATE statements, rows they rewrote
	leased           int // of those rows, leased (in flight) at the time
	vacuums, full    int // VACUUMs run, VACUUM FULLs among them
	removed          int // dead row versions VACUUM reported removing
	failed           int // statements that failed (a lock wait that timed out, say)
}

func (st operatorStats) String() string {
	return fmt.Sprintf("operator: %d UPDATEs rewrote %d rows (%d of them leased), %d VACUUMs (%d FULL) removed %d dead row versions, %d statements failed",
		st.updates, st.updated, st.leased, st.vacuums, st.full, st.removed, st.failed)
}

// operatorEdits are the operator's UPDATEs: none touches the lease columns,
// and each writes a new version of every row it matches.
var operatorEdits = []string{
	`SET available_at = available_at`,
	`SET available_at = available_at + interval '1 millisecond'`,
	`SET headers = headers`,
}

// startOperator starts the operator on s's table, on a connection of its
// own; stop ends it and returns what it did.
func startOperator(t *testing.T, s *scenario) *operator {
	ctx, cancel := context.WithCancel(context.Background())
	op := &operator{t: t, table: pgx.Identifier{s.schema, outboxpg.TableDefault}.Sanitize(), cancel: cancel, done: make(chan struct{})}
	cfg := pgtest.Config(t).ConnConfig.Copy()
	cfg.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) {
		op.mu.Lock()
		op.notices = append(op.notices, n.Message)
		op.mu.Unlock()
	}
	// A held claim locks its rows until it settles: the operator waits, as
	// anyone would, but not for ever.
	cfg.RuntimeParams["lock_timeout"] = "5s"
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	op.conn = conn
	go op.run(ctx)
	t.Cleanup(func() { op.stop() }) // a test that failed on its way
	return op
}

// stop ends the operator and returns what it did.
func (op *operator) stop() operatorStats {
	op.once.Do(func() {
		op.cancel()
		<-op.done
		_ = op.conn.Close(context.Background())
	})
	op.mu.Lock()
	defer op.mu.Unlock()
	return op.st
}

// run rewrites pending rows and VACUUMs about every second until ctx ends.
// A claim in flight through a round has its rows moved three times: the
// second and third times into the slots that pruning and VACUUM freed,
// which may be where the claim found another of its rows.
func (op *operator) run(ctx context.Context) {
	defer close(op.done)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for round := 0; ; round++ {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		edit := operatorEdits[round%len(operatorEdits)]
		op.update(ctx, edit, `status = 'pending' AND (lease_token IS NOT NULL
			OR id IN (SELECT id FROM `+op.table+` WHERE status = 'pending' ORDER BY seq LIMIT 500))`)
		// Once the transactions that were running at that UPDATE's commit
		// are over (relays' statements last milliseconds), the page
		// pruning the next UPDATE does on its way frees the slots of the
		// versions it replaced, and the new versions go there.
		select {
		case <-ctx.Done():
			return
		case <-time.After(20 * time.Millisecond):
		}
		op.update(ctx, `SET headers = headers`, `status = 'pending' AND lease_token IS NOT NULL`)
		// VACUUM FULL rewrites the table under an exclusive lock, which
		// stops every relay meanwhile: twice in the run is enough.
		op.vacuum(ctx, round == 5 || round == 15)
		op.update(ctx, `SET headers = headers`, `status = 'pending' AND lease_token IS NOT NULL`)
	}
}

// update runs one UPDATE of the rows matching where and counts them.
func (op *operator) update(ctx context.Context, set, where string) {
	var rows, leased int
	err := op.conn.QueryRow(ctx, `WITH u AS (UPDATE `+op.table+` `+set+` WHERE `+where+` RETURNING lease_token)
		SELECT count(*), count(lease_token) FROM u`).Scan(&rows, &leased)
	op.mu.Lock()
	defer op.mu.Unlock()
	if err != nil {
		op.failed(ctx, err)
		return
	}
	op.st.updates++
	op.st.updated += rows
	op.st.leased += leased
}

// vacuumRemoved finds the count of removed dead row versions in VACUUM
// VERBOSE's report: "tuples: N removed" (PostgreSQL 15 and later) for a
// VACUUM, "found N removable" for a VACUUM FULL.
var vacuumRemoved = regexp.MustCompile(`tuples: (\d+) removed|found (\d+) removable`)

// vacuum runs VACUUM (FULL if full) on the table and counts the dead row
// versions it removed.
func (op *operator) vacuum(ctx context.Context, full bool) {
	stmt := `VACUUM (VERBOSE) ` + op.table
	if full {
		stmt = `VACUUM (FULL, VERBOSE) ` + op.table
	}
	op.mu.Lock()
	op.notices = op.notices[:0]
	op.mu.Unlock()
	_, err := op.conn.Exec(ctx, stmt)
	op.mu.Lock()
	defer op.mu.Unlock()
	if err != nil {
		op.failed(ctx, err)
		return
	}
	op.st.vacuums++
	if full {
		op.st.full++
	}
	for _, n := range op.notices {
		for _, m := range vacuumRemoved.FindAllStringSubmatch(n, -1) {
			v, _ := strconv.Atoi(m[1] + m[2])
			op.st.removed += v
		}
	}
}

// failed counts a statement that failed; the first few are logged. One
// cut short by the end of the run is not counted. The caller holds op.mu.
func (op *operator) failed(ctx context.Context, err error) {
	if ctx.Err() != nil {
		return
	}
	op.st.failed++
	if op.st.failed <= 3 {
		op.t.Logf("operator: %v", err)
	}
}
