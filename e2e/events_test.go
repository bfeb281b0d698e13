package e2e_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/pgtest"
	"github.com/go-outbox/outbox/outboxdriver"
	"github.com/go-outbox/outbox/outboxevents"
	"github.com/go-outbox/outbox/outboxpg"
	"github.com/go-outbox/outbox/outboxsqlite"
)

// The process running the event handlers is SIGKILLed between two
// handlers' commits (the first handler of an event has committed, the
// second is inside its transaction), then started again: at the end every
// handler has applied every event exactly once.
//
// The handler process is this test binary run again: TestMain hands over to
// eventsChild when the environment says so.

const (
	envChild    = "OUTBOX_E2E_EVENTS_CHILD"    // "sqlite" or "postgres"
	envDatabase = "OUTBOX_E2E_EVENTS_DATABASE" // the file, or the URL
	envSchema   = "OUTBOX_E2E_EVENTS_SCHEMA"   // PostgreSQL schema
	envKill     = "OUTBOX_E2E_EVENTS_KILL"     // "1": SIGKILL inside the second handler
)

// killEvents is how many events the test writes.
const killEvents = 5

// killHandlers are the handlers of every event, in the order they run.
var killHandlers = []string{"read-model", "welcome-mail", "ledger"}

type Placed struct {
	OrderID string `json:"order_id"`
}

func TestMain(m *testing.M) {
	if kind := os.Getenv(envChild); kind != "" {
		if err := eventsChild(kind); err != nil {
			fmt.Fprintln(os.Stderr, "events child:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func eventsRegistry() *outboxevents.Registry {
	r := outboxevents.NewRegistry(outboxevents.Options{Source: "/e2e"})
	outboxevents.MustRegister[Placed](r, "orders.placed")
	return r
}

// eventsChild runs a relay with the handlers until the outbox is drained.
func eventsChild(kind string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	switch kind {
	case "sqlite":
		store, err := outboxsqlite.Open(ctx, os.Getenv(envDatabase), outboxsqlite.Options{})
		if err != nil {
			return err
		}
		defer store.Close()
		inbox, err := outboxsqlite.NewInboxTable(store, "")
		if err != nil {
			return err
		}
		return runHandlers(ctx, store, inbox, func(ctx context.Context, tx *sql.Tx, key string) error {
			_, err := tx.ExecContext(ctx, `INSERT INTO effects VALUES (?)`, key)
			return err
		})
	case "postgres":
		pool, err := pgxpool.New(ctx, os.Getenv(envDatabase))
		if err != nil {
			return err
		}
		defer pool.Close()
		schema := os.Getenv(envSchema)
		store, err := outboxpg.New(pool, outboxpg.Options{Schema: schema})
		if err != nil {
			return err
		}
		inbox, err := outboxpg.NewInboxTable(pool, outboxpg.InboxOptions{Schema: schema})
		if err != nil {
			return err
		}
		return runHandlers(ctx, store, inbox, func(ctx context.Context, tx pgx.Tx, key string) error {
			_, err := tx.Exec(ctx, `INSERT INTO "`+schema+`".effects VALUES ($1)`, key)
			return err
		})
	}
	return fmt.Errorf("unknown kind %q", kind)
}

func runHandlers[TTx any](ctx context.Context, store outboxdriver.Store, inbox outbox.InboxStore[TTx], effect func(ctx context.Context, tx TTx, key string) error) error {
	d, err := outboxevents.NewDispatcher(eventsRegistry(), inbox)
	if err != nil {
		return err
	}
	kill := os.Getenv(envKill) == "1"
	for i, name := range killHandlers {
		err := outboxevents.Handle(d, name, func(ctx context.Context, tx TTx, e Placed) error {
			if kill && i == 1 {
				// The first handler has committed; this one is inside its
				// transaction.
				return syscall.Kill(os.Getpid(), syscall.SIGKILL)
			}
			return effect(ctx, tx, name+"/"+e.OrderID)
		})
		if err != nil {
			return err
		}
	}
	// A short lease: the batch the killed process held is due again soon.
	relay, err := outbox.NewRelay(store, d, outbox.Config{PollInterval: 20 * time.Millisecond, ActivePollInterval: 5 * time.Millisecond, LeaseDuration: time.Second})
	if err != nil {
		return err
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- relay.Run(runCtx) }()
	defer func() { stop(); <-done }()
	for {
		st, err := store.(outboxdriver.Admin).Stats(ctx)
		if err == nil && st.Pending == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("outbox not drained: %+v, %v", st, err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func TestEventHandlersKilledBetweenCommitsApplyEachEventOnce(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		path := filepath.Join(t.TempDir(), "app.db")
		store, err := outboxsqlite.Open(t.Context(), path, outboxsqlite.Options{CreateIfMissing: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = store.Close() })
		m, err := outboxsqlite.NewMigrator(store.DB(), outboxsqlite.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := m.Up(t.Context()); err != nil {
			t.Fatal(err)
		}
		inbox, err := outboxsqlite.NewInboxTable(store, "")
		if err != nil {
			t.Fatal(err)
		}
		if err := inbox.Migrate(t.Context()); err != nil {
			t.Fatal(err)
		}
		if _, err := store.DB().ExecContext(t.Context(), `CREATE TABLE effects (key TEXT NOT NULL)`); err != nil {
			t.Fatal(err)
		}
		w, err := outbox.NewWriter[*sql.Tx](store, outbox.WriterConfig{})
		if err != nil {
			t.Fatal(err)
		}
		count := func(key string) (n int, err error) {
			err = store.DB().QueryRowContext(t.Context(), `SELECT count(*) FROM effects WHERE key = ?`, key).Scan(&n)
			return n, err
		}
		killAndRestart(t, []string{envChild + "=sqlite", envDatabase + "=" + path}, w, count)
	})
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		o := newPGOutbox(t)
		pool := pgtest.Pool(t)
		schema := o.schema
		inbox, err := outboxpg.NewInboxTable(pool, outboxpg.InboxOptions{Schema: schema})
		if err != nil {
			t.Fatal(err)
		}
		if err := inbox.Migrate(t.Context()); err != nil {
			t.Fatal(err)
		}
		if _, err := pool.Exec(t.Context(), `CREATE TABLE "`+schema+`".effects (key text NOT NULL)`); err != nil {
			t.Fatal(err)
		}
		count := func(key string) (n int, err error) {
			err = pool.QueryRow(t.Context(), `SELECT count(*) FROM "`+schema+`".effects WHERE key = $1`, key).Scan(&n)
			return n, err
		}
		killAndRestart(t, []string{envChild + "=postgres", envDatabase + "=" + pgtest.URL(t), envSchema + "=" + schema}, o.w, count)
	})
}

// killAndRestart writes the events, runs the handler process until it is
// killed, runs it again to the end, and checks every effect exists once.
func killAndRestart[TTx any](t *testing.T, env []string, w *outbox.Writer[TTx], count func(key string) (int, error)) {
	t.Helper()
	reg := eventsRegistry()
	var orders []outboxevents.Source
	for i := range killEvents {
		r := &outboxevents.Recorder{}
		r.Record(Placed{OrderID: fmt.Sprintf("o-%d", i)})
		orders = append(orders, r)
	}
	if err := outboxevents.Transact(t.Context(), w, reg, func(context.Context, TTx) error { return nil }, orders...); err != nil {
		t.Fatal(err)
	}

	err := runChild(t, append(env, envKill+"=1"))
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("handler process: %v; want it killed by SIGKILL inside the second handler", err)
	}
	first, err := count(killHandlers[0] + "/o-0")
	if err != nil {
		t.Fatal(err)
	}
	second, err := count(killHandlers[1] + "/o-0")
	if err != nil {
		t.Fatal(err)
	}
	if first != 1 || second != 0 {
		t.Fatalf("after the kill: first handler applied o-0 %d times, second %d; want 1 and 0 (killed between their commits)", first, second)
	}

	if err := runChild(t, env); err != nil {
		t.Fatalf("restarted handler process: %v", err)
	}
	for i := range killEvents {
		for _, h := range killHandlers {
			key := fmt.Sprintf("%s/o-%d", h, i)
			if n, err := count(key); err != nil || n != 1 {
				t.Errorf("effect %s applied %d times (%v), want once", key, n, err)
			}
		}
	}
}

func runChild(t *testing.T, env []string) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if len(out) > 0 {
		t.Logf("handler process output:\n%s", out)
	}
	return err
}
