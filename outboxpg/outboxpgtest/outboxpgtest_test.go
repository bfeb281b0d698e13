package outboxpgtest_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/faketb"
	"github.com/go-outbox/outbox/outboxpg"
	"github.com/go-outbox/outbox/outboxpg/outboxpgtest"
	"github.com/go-outbox/outbox/outboxtest"
)

func createOrders(ctx context.Context, pool *pgxpool.Pool) error {
	_, err := pool.Exec(ctx, `CREATE TABLE orders (id text PRIMARY KEY, paid boolean NOT NULL DEFAULT false)`)
	return err
}

func TestEachTestGetsItsOwnMigratedDatabaseDroppedWhenItEnds(t *testing.T) {
	t.Parallel()
	var names [2]string
	t.Run("group", func(t *testing.T) {
		for i := range names {
			t.Run("", func(t *testing.T) {
				t.Parallel()
				db := outboxpgtest.NewDatabase(t, outboxpgtest.Config{Setup: createOrders})
				names[i] = db.Name
				outboxtest.RequireNothingWritten(t, db)
				writer, err := outbox.NewWriter(db.Store, outbox.WriterConfig{})
				if err != nil {
					t.Fatal(err)
				}
				err = writer.Transact(t.Context(), func(ctx context.Context, tx pgx.Tx) error {
					if _, err := tx.Exec(t.Context(), `INSERT INTO orders (id) VALUES ('o-1')`); err != nil {
						return err
					}
					return writer.Write(t.Context(), tx, &outbox.Message{Topic: "orders.created", Key: "o-1", Payload: []byte("{}")})
				})
				if err != nil {
					t.Fatalf("write in a fresh database: %v", err)
				}
				// The other test wrote the same order to its own database.
				outboxtest.RequireWritten(t, db, outboxtest.Match{Topic: "orders.created", Key: "o-1"})
			})
		}
	})
	if names[0] == names[1] {
		t.Fatalf("both tests got database %s", names[0])
	}
	pool, err := pgxpool.New(t.Context(), os.Getenv("TEST_DATABASE_URL"))
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	var left int
	if err := pool.QueryRow(t.Context(), `SELECT count(*) FROM pg_database WHERE datname = ANY($1)`, names[:]).Scan(&left); err != nil {
		t.Fatal(err)
	}
	if left != 0 {
		t.Fatalf("%d of the databases %v are left after their tests ended", left, names)
	}
}

func TestRequireWrittenSeesTheCommittedMessagesAndFailsNamingTheTopicOfARolledBackOne(t *testing.T) {
	t.Parallel()
	db := outboxpgtest.NewDatabase(t, outboxpgtest.Config{})
	writer, err := outbox.NewWriter(db.Store, outbox.WriterConfig{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	if err := writer.Transact(ctx, func(ctx context.Context, tx pgx.Tx) error {
		return writer.Write(ctx, tx,
			&outbox.Message{Topic: "orders.created", Key: "o-1", Payload: []byte(`{"id":"o-1"}`), Headers: map[string]string{"content-type": "application/json"}},
			&outbox.Message{Topic: "orders.paid", Key: "o-1", Payload: []byte(`{"id":"o-1"}`)})
	}); err != nil {
		t.Fatal(err)
	}
	rollBack := errors.New("roll back")
	if err := writer.Transact(ctx, func(ctx context.Context, tx pgx.Tx) error {
		if err := writer.Write(ctx, tx, &outbox.Message{Topic: "orders.cancelled", Key: "o-1", Payload: []byte("{}")}); err != nil {
			return err
		}
		return rollBack
	}); !errors.Is(err, rollBack) {
		t.Fatalf("Transact: %v, want the roll-back", err)
	}

	got := outboxtest.RequireWritten(t, db,
		outboxtest.Match{Topic: "orders.paid", Key: "o-1"},
		outboxtest.Match{Topic: "orders.created", Headers: map[string]string{"content-type": "application/json"}})
	if string(got[1].Payload) != `{"id":"o-1"}` || got[1].CreatedAt.IsZero() {
		t.Fatalf("RequireWritten returned %+v, want the stored message", got[1])
	}

	f := faketb.Run(t, func(tb testing.TB) {
		outboxtest.RequireWritten(tb, db, outboxtest.Match{Topic: "orders.cancelled"})
	})
	if msg := f.Failures(); !strings.Contains(msg, `Topic: "orders.cancelled"`) || !strings.Contains(msg, `topic="orders.paid"`) {
		t.Fatalf("RequireWritten of the rolled-back message did not fail naming it and listing what is pending:\n%s", msg)
	}
	f = faketb.Run(t, func(tb testing.TB) { outboxtest.RequireNothingWritten(tb, outboxpgtest.Table(db.Pool, db.Store)) })
	if !strings.Contains(f.Failures(), "have 2") {
		t.Fatalf("RequireNothingWritten passed with 2 messages pending:\n%s", f.Failures())
	}
}

func TestDrainPublishesWhatIsDueDeadLettersThePermanentFailureAndLeavesTheRetryPending(t *testing.T) {
	t.Parallel()
	db := outboxpgtest.NewDatabase(t, outboxpgtest.Config{})
	writer, err := outbox.NewWriter(db.Store, outbox.WriterConfig{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	var msgs []*outbox.Message
	for _, topic := range []string{"fine", "poison", "flaky", "fine"} {
		msgs = append(msgs, &outbox.Message{Topic: topic, Payload: []byte(topic)})
	}
	if err := writer.Transact(ctx, func(ctx context.Context, tx pgx.Tx) error { return writer.Write(ctx, tx, msgs...) }); err != nil {
		t.Fatal(err)
	}
	rec := &outboxtest.Recorder{Fail: func(m outbox.Message, attempt int) error {
		switch m.Topic {
		case "poison":
			return outbox.Permanent(errors.New("rejected"))
		case "flaky":
			return errors.New("timeout")
		}
		return nil
	}}
	// The retry comes due only after the drain.
	published := outboxtest.DrainWith(t, db.Store, rec, outboxtest.DrainConfig{Relay: outbox.Config{BackoffBase: time.Hour, BackoffMax: time.Hour, Workers: 3, BatchSize: 1}})
	outboxtest.RequireMessages(t, published, outboxtest.Match{Topic: "fine"}, outboxtest.Match{Topic: "fine"})
	if len(published) != 2 {
		t.Fatalf("Drain returned %d messages, want the 2 confirmed", len(published))
	}
	stats, err := db.Store.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if stats.Dead != 1 || stats.Pending != 1 || stats.InFlight != 0 {
		t.Fatalf("after the drain: %+v, want 1 dead, 1 pending, none in flight", stats)
	}
	outboxtest.RequireWritten(t, db, outboxtest.Match{Topic: "flaky"})
}

func TestDrainFailsTheTestOnATableNotMigrated(t *testing.T) {
	t.Parallel()
	db := outboxpgtest.NewDatabase(t, outboxpgtest.Config{})
	store, err := outboxpg.New(db.Pool, outboxpg.Options{Table: "not_there"})
	if err != nil {
		t.Fatal(err)
	}
	f := faketb.Run(t, func(tb testing.TB) { outboxtest.Drain(tb, store, &outboxtest.Recorder{}) })
	if msg := f.Failures(); !strings.Contains(msg, "relay stopped") || !strings.Contains(msg, "not_there") {
		t.Fatalf("Drain on a missing table: %q, want a failure naming the table", msg)
	}
}

func TestAnInboxOnTheTestDatabaseAppliesRedeliveredMessagesOnce(t *testing.T) {
	t.Parallel()
	db := outboxpgtest.NewDatabase(t, outboxpgtest.Config{Inbox: &outboxpg.InboxOptions{}, Setup: createOrders})
	inbox, err := outbox.NewInbox(db.Inbox, "billing")
	if err != nil {
		t.Fatal(err)
	}
	handle := inbox.Apply(func(ctx context.Context, tx pgx.Tx, m outbox.Message) error {
		_, err := tx.Exec(ctx, `INSERT INTO orders (id) VALUES ($1)`, m.Key) // a second insert would fail
		return err
	})
	got := outboxtest.DeliverWith(t, handle, outboxtest.DeliverConfig{Copies: 4, Concurrent: true},
		outbox.Message{Topic: "orders.created", Key: "o-1"}, outbox.Message{Topic: "orders.created", Key: "o-2"})
	for _, d := range got {
		if d.Acked != 4 || d.Parked != 0 {
			t.Errorf("message %s: %+v, want every copy acknowledged", d.Message.Key, d)
		}
	}
	var n int
	if err := db.Pool.QueryRow(t.Context(), `SELECT count(*) FROM orders`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 2 {
		t.Fatalf("%d orders, want each of the 2 messages applied once", n)
	}
}

func TestWithoutTheServersURLTheTestIsSkippedOrFailsOnCI(t *testing.T) {
	t.Parallel()
	f := faketb.Run(t, func(tb testing.TB) {
		outboxpgtest.NewDatabase(tb, outboxpgtest.Config{URLEnv: "OUTBOXPGTEST_NEVER_SET"})
	})
	if os.Getenv("CI") == "true" {
		if !strings.Contains(f.Failures(), "OUTBOXPGTEST_NEVER_SET is not set") {
			t.Fatalf("on CI: %q, want a failure naming the variable", f.Failures())
		}
		return
	}
	if !strings.Contains(f.SkipReason(), "OUTBOXPGTEST_NEVER_SET is not set") {
		t.Fatalf("skip message %q, want one naming the variable", f.SkipReason())
	}
}
