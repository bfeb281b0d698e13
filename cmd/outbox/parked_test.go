package main

import (
	"context"
	"encoding/json"
	"errors"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/natstest"
	"github.com/go-outbox/outbox/internal/pgtest"
	"github.com/go-outbox/outbox/outboxnats"
	"github.com/go-outbox/outbox/outboxpg"
	"github.com/go-outbox/outbox/outboxsqlite"
	"github.com/go-outbox/outbox/publishertest"
	"github.com/go-outbox/outbox/relaytest"
)

// testParkedCommands runs `outbox inbox parked list|show|retry|discard` and
// the parked column of `outbox inbox status` against a migrated outbox table
// (db: the database flags); table opens its inbox table once `inbox
// migrate` made it, to park messages as consumers would.
func testParkedCommands(t *testing.T, db []string, table func(t *testing.T) inboxTable) {
	with := func(args ...string) []string { return append(append([]string{}, args...), db...) }
	mustCLI(t, with("inbox", "migrate")...)
	if out := mustCLI(t, with("inbox", "parked", "list")...); !strings.Contains(out, "no parked messages") {
		t.Fatalf("inbox parked list of an empty table printed %q", out)
	}
	tb := table(t)
	first, second := publishertest.Messages("orders.created", 1)[0], publishertest.Messages("orders.created", 1)[0]
	for _, p := range []struct {
		consumer string
		m        outbox.Message
	}{{"billing", first}, {"billing", second}, {"shipping", first}} {
		if err := tb.(outbox.ParkStore).Park(t.Context(), p.consumer, p.m, 5, "no such customer"); err != nil {
			t.Fatal(err)
		}
	}

	out := mustCLI(t, with("inbox", "parked", "list")...)
	for _, want := range []string{first.ID.String(), second.ID.String(), "billing", "shipping", "no such customer"} {
		if !strings.Contains(out, want) {
			t.Fatalf("inbox parked list printed %q; want %q in it", out, want)
		}
	}
	var listed struct {
		Parked []struct {
			ID       uuid.UUID `json:"id"`
			Consumer string    `json:"consumer"`
			Attempts int       `json:"attempts"`
			Error    string    `json:"error"`
		} `json:"parked"`
	}
	if err := json.Unmarshal([]byte(mustCLI(t, with("inbox", "parked", "list", "--consumer", "billing", "--json")...)), &listed); err != nil ||
		len(listed.Parked) != 2 || listed.Parked[0].ID != first.ID || listed.Parked[0].Attempts != 5 || listed.Parked[1].Consumer != "billing" {
		t.Fatalf("inbox parked list --consumer billing --json: %+v, %v; want billing's two messages in id order", listed, err)
	}
	if code, out, errOut := cli(t, with("inbox", "parked", "list", "--limit", "1")...); code != 0 || strings.Count(out, "\n") != 2 || !strings.Contains(errOut, "--after "+first.ID.String()) {
		t.Fatalf("inbox parked list --limit 1: exit %d, %q, %q; want one row and how to page on", code, out, errOut)
	}
	if code, _, errOut := cli(t, with("inbox", "parked", "list", "--limit", "0")...); code != 2 || !strings.Contains(errOut, "--limit") {
		t.Fatalf("inbox parked list --limit 0: exit %d, %q; want a usage error naming the flag", code, errOut)
	}

	var shown map[string]any
	if err := json.Unmarshal([]byte(mustCLI(t, with("inbox", "parked", "show", second.ID.String())...)), &shown); err != nil ||
		shown["consumer"] != "billing" || shown["error"] != "no such customer" || shown["payload"] == nil && shown["payload_base64"] == nil {
		t.Fatalf("inbox parked show: %v, %v; want billing's message with its error and payload", shown, err)
	}
	if code, _, errOut := cli(t, with("inbox", "parked", "show", first.ID.String())...); code != 1 || !strings.Contains(errOut, "name one") {
		t.Fatalf("inbox parked show of a message two consumers parked: exit %d, %q; want exit 1 asking to name one", code, errOut)
	}
	mustCLI(t, with("inbox", "parked", "show", "--consumer", "shipping", first.ID.String())...)

	if code, _, errOut := cli(t, with("inbox", "parked", "retry", first.ID.String())...); code != 1 || !strings.Contains(errOut, "name one") || !strings.Contains(errOut, "--consumer") {
		t.Fatalf("inbox parked retry without --consumer of a message two consumers parked: exit %d, %q; want exit 1 asking to name one with --consumer, as show does", code, errOut)
	}
	if code, _, errOut := cli(t, with("inbox", "parked", "retry", "--consumer", "billing")...); code != 2 || !strings.Contains(errOut, "--all") {
		t.Fatalf("inbox parked retry with no ids: exit %d, %q; want a usage error offering --all", code, errOut)
	}
	if out := mustCLI(t, with("inbox", "parked", "retry", "--consumer", "billing", first.ID.String())...); !strings.Contains(out, "1 parked message(s) of billing marked") {
		t.Fatalf("inbox parked retry printed %q", out)
	}
	if code, _, errOut := cli(t, with("inbox", "parked", "retry", "--consumer", "billing", uuid.NewString())...); code != 1 || !strings.Contains(errOut, "matched no message parked by billing") {
		t.Fatalf("inbox parked retry of an unknown id: exit %d, %q; want exit 1 saying so", code, errOut)
	}
	// The running consumer's process takes the request.
	taken, err := tb.(outbox.ParkStore).TakeRetries(t.Context(), "billing", 10)
	if err != nil || len(taken) != 1 || taken[0].ID != first.ID {
		t.Fatalf("retries taken after inbox parked retry: %v, %v; want billing's %s only", taken, err, first.ID)
	}
	// The first is in that process's handler: left alone.
	if out := mustCLI(t, with("inbox", "parked", "retry", "--consumer", "billing", "--all")...); !strings.Contains(out, "1 parked message(s)") ||
		!strings.Contains(out, "1 taken by a consumer process left alone") {
		t.Fatalf("inbox parked retry --all printed %q; want billing's second marked, the first (taken) left alone", out)
	}

	// One consumer parked it: found without --consumer, as show finds it.
	if out := mustCLI(t, with("inbox", "parked", "discard", second.ID.String())...); !strings.Contains(out, "1 parked message(s) of billing discarded") {
		t.Fatalf("inbox parked discard printed %q", out)
	}
	if code, _, errOut := cli(t, with("inbox", "parked", "show", "--consumer", "billing", second.ID.String())...); code != 1 || !strings.Contains(errOut, "parked no message") {
		t.Fatalf("inbox parked show of a discarded message: exit %d, %q; want exit 1, not found", code, errOut)
	}

	var st struct {
		ParkedTable string `json:"parked_table"`
		Consumers   []struct {
			Consumer string `json:"consumer"`
			Records  int64  `json:"records"`
			Parked   int64  `json:"parked"`
		} `json:"consumers"`
	}
	if err := json.Unmarshal([]byte(mustCLI(t, with("inbox", "status", "--json")...)), &st); err != nil || len(st.Consumers) != 2 ||
		st.Consumers[0].Consumer != "billing" || st.Consumers[0].Parked != 1 || st.Consumers[1].Consumer != "shipping" || st.Consumers[1].Parked != 1 {
		t.Fatalf("inbox status --json: %+v, %v; want billing and shipping with one parked message each", st, err)
	}
	if out := mustCLI(t, with("inbox", "status")...); !strings.Contains(out, "PARKED") {
		t.Fatalf("inbox status printed %q; want a PARKED column", out)
	}
}

func TestInboxParkedCommandsOnPostgreSQL(t *testing.T) {
	t.Parallel()
	onPostgreSQL(t, testParkedCommands)
}

func TestInboxParkedCommandsOnSQLite(t *testing.T) {
	t.Parallel()
	onSQLite(t, testParkedCommands)
}

func TestInboxParkedRetryKeepsKeyOrderOnPostgreSQL(t *testing.T) {
	t.Parallel()
	onPostgreSQL(t, testParkedRetryKeepsKeyOrder)
}

func TestInboxParkedRetryKeepsKeyOrderOnSQLite(t *testing.T) {
	t.Parallel()
	onSQLite(t, testParkedRetryKeepsKeyOrder)
}

// onPostgreSQL runs a test of the parked commands on a new schema.
func onPostgreSQL(t *testing.T, run func(t *testing.T, db []string, table func(t *testing.T) inboxTable)) {
	schema := pgtest.Schema(t)
	db := []string{"--database-url", pgtest.URL(t), "--schema", schema}
	mustCLI(t, append([]string{"migrate", "up"}, db...)...)
	run(t, db, func(t *testing.T) inboxTable {
		table, err := outboxpg.NewInboxTable(pgtest.Pool(t), outboxpg.InboxOptions{Schema: schema})
		if err != nil {
			t.Fatal(err)
		}
		return table
	})
}

// onSQLite runs a test of the parked commands on a new database file.
func onSQLite(t *testing.T, run func(t *testing.T, db []string, table func(t *testing.T) inboxTable)) {
	path := filepath.Join(t.TempDir(), "app.db")
	db := []string{"--database-url", "sqlite://" + path}
	mustCLI(t, append([]string{"migrate", "up"}, db...)...)
	run(t, db, func(t *testing.T) inboxTable {
		store, err := outboxsqlite.Open(t.Context(), path, outboxsqlite.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = store.Close() })
		table, err := outboxsqlite.NewInboxTable(store, "")
		if err != nil {
			t.Fatal(err)
		}
		return table
	})
}

// testParkedRetryKeepsKeyOrder: a message waiting behind a parked one of
// its key shows so in `parked list` and `inbox status`, and cannot be
// retried by itself; a parked message that later messages of its key
// overtook (a consumer set to SkipParkedInKeyOrder) is retried only with
// --force, and retry says how many overtook it.
func testParkedRetryKeepsKeyOrder(t *testing.T, db []string, table func(t *testing.T) inboxTable) {
	with := func(args ...string) []string { return append(append([]string{}, args...), db...) }
	mustCLI(t, with("inbox", "migrate")...)
	ks := table(t).(outbox.KeyParkStore)
	msgs := publishertest.Messages("orders.paid", 3)
	paid, cancelled, other := msgs[0], msgs[1], msgs[2]
	paid.Key, cancelled.Key, other.Key = "order-1", "order-1", "order-2"
	if err := ks.Park(t.Context(), "billing", paid, 5, "no such customer"); err != nil {
		t.Fatal(err)
	}
	if head, err := ks.ParkBehind(t.Context(), "billing", cancelled); err != nil || head != paid.ID {
		t.Fatalf("park %s behind its key: %s, %v; want behind %s", cancelled.ID, head, err, paid.ID)
	}
	if out := mustCLI(t, with("inbox", "parked", "list")...); !strings.Contains(out, "waiting behind "+paid.ID.String()) {
		t.Fatalf("inbox parked list printed %q; want %s shown waiting behind %s", out, cancelled.ID, paid.ID)
	}
	var st struct {
		Consumers []struct {
			Consumer string `json:"consumer"`
			Parked   int64  `json:"parked"`
			Waiting  int64  `json:"waiting"`
		} `json:"consumers"`
	}
	if err := json.Unmarshal([]byte(mustCLI(t, with("inbox", "status", "--json")...)), &st); err != nil || len(st.Consumers) != 1 ||
		st.Consumers[0].Parked != 2 || st.Consumers[0].Waiting != 1 {
		t.Fatalf("inbox status --json: %+v, %v; want billing with 2 parked, 1 of them waiting", st, err)
	}
	if out := mustCLI(t, with("inbox", "status")...); !strings.Contains(out, "WAITING") {
		t.Fatalf("inbox status printed %q; want a WAITING column", out)
	}
	if code, _, errOut := cli(t, with("inbox", "parked", "retry", "--consumer", "billing", cancelled.ID.String())...); code != 1 ||
		!strings.Contains(errOut, "waits behind parked message "+paid.ID.String()) {
		t.Fatalf("inbox parked retry of a waiting message: exit %d, %q; want exit 1 naming the message it waits behind", code, errOut)
	}

	// A consumer that skips parked messages applied two later messages of
	// order-2 past its parked one.
	if err := ks.Park(t.Context(), "billing", other, 5, "no such customer"); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := ks.CountOvertaken(t.Context(), "billing", "order-2"); err != nil {
			t.Fatal(err)
		}
	}
	for _, args := range [][]string{{other.ID.String()}, {"--all"}} {
		code, _, errOut := cli(t, with(append([]string{"inbox", "parked", "retry", "--consumer", "billing"}, args...)...)...)
		if code != 1 || !strings.Contains(errOut, other.ID.String()) || !strings.Contains(errOut, "2 later message(s)") || !strings.Contains(errOut, "--force") {
			t.Fatalf("inbox parked retry %v of a message 2 later messages overtook: exit %d, %q; want exit 1 with the count and --force", args, code, errOut)
		}
	}
	consoleRefusesOutOfOrderRetry(t, nil, table(t), "/inbox/parked/retry", url.Values{"consumer": {"billing"}, "id": {other.ID.String()}},
		other.ID, "outbox inbox parked retry --consumer billing --force")
	if got, err := table(t).GetParked(t.Context(), "billing", other.ID); err != nil || got.RetryRequested {
		t.Fatalf("message %s after a refused retry: %+v, %v; want it parked, no retry requested", other.ID, got, err)
	}
	if out := mustCLI(t, with("inbox", "parked", "retry", "--consumer", "billing", "--force", other.ID.String())...); !strings.Contains(out, "1 parked message(s) of billing marked") {
		t.Fatalf("inbox parked retry --force printed %q", out)
	}
	if out := mustCLI(t, with("inbox", "parked", "retry", "--consumer", "billing", paid.ID.String())...); !strings.Contains(out, "1 parked message(s) of billing marked") {
		t.Fatalf("inbox parked retry of the head printed %q", out)
	}
}

// Issue 15's story end to end: a JetStream consumer applying messages
// through an inbox on PostgreSQL, with the inbox table as its park store,
// parks a poison message after MaxDeliver attempts; `outbox inbox parked
// list` shows it with its error; once the handler is fixed, `outbox inbox
// parked retry` makes the running consumer apply it, and the list is empty.
func TestAPoisonMessageIsParkedAfterNAttemptsAndRetriedFromTheCLI(t *testing.T) {
	t.Parallel()
	schema := pgtest.Schema(t)
	db := []string{"--database-url", pgtest.URL(t), "--schema", schema}
	with := func(args ...string) []string { return append(append([]string{}, args...), db...) }
	mustCLI(t, with("migrate", "up")...)
	mustCLI(t, with("inbox", "migrate")...)
	pool := pgtest.Pool(t)
	table, err := outboxpg.NewInboxTable(pool, outboxpg.InboxOptions{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	effects := `"` + schema + `".effects`
	if _, err := pool.Exec(t.Context(), `CREATE TABLE `+effects+` (message_id uuid NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	applied := func(id uuid.UUID) bool {
		var n int
		if err := pool.QueryRow(t.Context(), `SELECT count(*) FROM `+effects+` WHERE message_id = $1`, id).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n == 1
	}
	inbox, err := outbox.NewInbox(table, "billing")
	if err != nil {
		t.Fatal(err)
	}

	srv := natstest.Start(t)
	js := srv.JetStream(t)
	stream, prefix := natstest.NewStream(t, js, jetstream.StreamConfig{})
	pub, err := outboxnats.Dial(srv.URL(), outboxnats.Config{Stream: stream, SubjectPrefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pub.Close() })
	batch := publishertest.Messages("orders.created", 3)
	poison := batch[1].ID
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for i, err := range pub.Publish(ctx, batch) {
		if err != nil {
			t.Fatalf("publish %s: %v", batch[i].ID, err)
		}
	}

	var (
		broken atomic.Bool
		mu     sync.Mutex
		tries  int
	)
	broken.Store(true)
	handler := inbox.Apply(func(ctx context.Context, tx pgx.Tx, m outbox.Message) error {
		if m.ID == poison {
			mu.Lock()
			tries++
			mu.Unlock()
			if broken.Load() {
				return errors.New("no such customer (injected)")
			}
		}
		_, err := tx.Exec(ctx, `INSERT INTO `+effects+` VALUES ($1)`, m.ID)
		return err
	})
	consumeCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- outboxnats.Consume(consumeCtx, js, outboxnats.ConsumerConfig{Stream: stream, Durable: "billing", MaxDeliver: 3,
			BackoffBase: time.Millisecond, BackoffMax: 5 * time.Millisecond, Parked: table,
			// Its own logger: the CLI run in-process sets slog.Default to
			// one writing to its output.
			Logger: relaytest.TestLogger(t)}, handler)
	}()
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("Consume: %v", err)
		}
	}()

	waitUntil(t, 20*time.Second, "the poison message listed by `outbox inbox parked list`", func() bool {
		return strings.Contains(mustCLI(t, with("inbox", "parked", "list", "--consumer", "billing")...), poison.String())
	})
	if out := mustCLI(t, with("inbox", "parked", "list")...); !strings.Contains(out, "no such customer") || !strings.Contains(out, " 3 ") {
		t.Fatalf("inbox parked list printed %q; want the poison message with its error after 3 attempts", out)
	}
	waitUntil(t, 20*time.Second, "the other messages applied", func() bool { return applied(batch[0].ID) && applied(batch[2].ID) })

	broken.Store(false) // the fix is deployed
	mustCLI(t, with("inbox", "parked", "retry", "--consumer", "billing", poison.String())...)
	waitUntil(t, 20*time.Second, "the retried message applied", func() bool { return applied(poison) })
	waitUntil(t, 20*time.Second, "the parked list empty", func() bool {
		return strings.Contains(mustCLI(t, with("inbox", "parked", "list")...), "no parked messages")
	})
	mu.Lock()
	defer mu.Unlock()
	if tries != 4 {
		t.Fatalf("the poison message reached the handler %d times; want 3 attempts and the retry", tries)
	}
}
