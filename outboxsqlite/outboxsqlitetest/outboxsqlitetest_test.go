package outboxsqlitetest_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/faketb"
	"github.com/go-outbox/outbox/outboxsqlite"
	"github.com/go-outbox/outbox/outboxsqlite/outboxsqlitetest"
	"github.com/go-outbox/outbox/outboxtest"
)

func createOrders(ctx context.Context, db *sql.DB) error {
	_, err := db.ExecContext(ctx, `CREATE TABLE orders (id TEXT PRIMARY KEY) STRICT`)
	return err
}

func newWriter(t *testing.T, db *outboxsqlitetest.Database) *outbox.Writer[*sql.Tx] {
	w, err := outbox.NewWriter[*sql.Tx](db.Store, outbox.WriterConfig{})
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func TestRequireWrittenSeesTheCommittedMessagesAndFailsNamingTheTopicOfARolledBackOne(t *testing.T) {
	t.Parallel()
	db := outboxsqlitetest.NewDatabase(t, outboxsqlitetest.Config{Setup: createOrders})
	outboxtest.RequireNothingWritten(t, db)
	writer := newWriter(t, db)
	ctx := t.Context()
	if err := writer.Transact(ctx, func(ctx context.Context, tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `INSERT INTO orders (id) VALUES ('o-1')`); err != nil {
			return err
		}
		return writer.Write(ctx, tx, &outbox.Message{Topic: "orders.created", Key: "o-1", Payload: []byte(`{"id":"o-1"}`), Headers: map[string]string{"content-type": "application/json"}})
	}); err != nil {
		t.Fatal(err)
	}
	rollBack := errors.New("roll back")
	if err := writer.Transact(ctx, func(ctx context.Context, tx *sql.Tx) error {
		if err := writer.Write(ctx, tx, &outbox.Message{Topic: "orders.cancelled", Key: "o-1", Payload: []byte("{}")}); err != nil {
			return err
		}
		return rollBack
	}); !errors.Is(err, rollBack) {
		t.Fatalf("Transact: %v, want the roll-back", err)
	}
	got := outboxtest.RequireWritten(t, db, outboxtest.Match{Topic: "orders.created", Key: "o-1", Headers: map[string]string{"content-type": "application/json"}})
	if string(got[0].Payload) != `{"id":"o-1"}` {
		t.Fatalf("RequireWritten returned %+v, want the stored message", got[0])
	}
	f := faketb.Run(t, func(tb testing.TB) {
		outboxtest.RequireWritten(tb, outboxsqlitetest.Table(db.Store), outboxtest.Match{Topic: "orders.cancelled"})
	})
	if msg := f.Failures(); !strings.Contains(msg, `Topic: "orders.cancelled"`) || !strings.Contains(msg, `topic="orders.created"`) {
		t.Fatalf("RequireWritten of the rolled-back message did not fail naming it and listing what is pending:\n%s", msg)
	}
}

func TestDrainPublishesWhatIsDueInKeyOrderAndLeavesTheRetryPending(t *testing.T) {
	t.Parallel()
	db := outboxsqlitetest.NewDatabase(t, outboxsqlitetest.Config{Options: outboxsqlite.Options{OrderByKey: true}})
	writer := newWriter(t, db)
	ctx := t.Context()
	var msgs []*outbox.Message
	for i, key := range []string{"a", "a", "a", "b", "b", "c"} {
		msgs = append(msgs, &outbox.Message{Topic: "t", Key: key, Payload: []byte{byte('0' + i)}})
	}
	if err := writer.Transact(ctx, func(ctx context.Context, tx *sql.Tx) error { return writer.Write(ctx, tx, msgs...) }); err != nil {
		t.Fatal(err)
	}
	rec := &outboxtest.Recorder{Fail: func(m outbox.Message, attempt int) error {
		if m.Key == "b" {
			return errors.New("timeout") // holds back the rest of b
		}
		return nil
	}}
	published := outboxtest.DrainWith(t, db.Store, rec, outboxtest.DrainConfig{Relay: outbox.Config{BackoffBase: time.Hour, BackoffMax: time.Hour}})
	var order string
	for _, m := range published {
		order += m.Key + string(m.Payload)
	}
	if order != "a0a1a2c5" && order != "c5a0a1a2" {
		t.Fatalf("published %q, want a's three in order and c's, not b's", order)
	}
	outboxtest.RequireWritten(t, db, outboxtest.Match{Key: "b"}, outboxtest.Match{Key: "b"})
}

func TestAnInboxOnTheTestDatabaseAppliesRedeliveredMessagesOnce(t *testing.T) {
	t.Parallel()
	db := outboxsqlitetest.NewDatabase(t, outboxsqlitetest.Config{Inbox: true, Setup: createOrders})
	inbox, err := outbox.NewInbox(db.Inbox, "billing")
	if err != nil {
		t.Fatal(err)
	}
	handle := inbox.Apply(func(ctx context.Context, tx *sql.Tx, m outbox.Message) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO orders (id) VALUES (?)`, m.Key) // a second insert would fail
		return err
	})
	got := outboxtest.DeliverWith(t, handle, outboxtest.DeliverConfig{Copies: 3, Concurrent: true},
		outbox.Message{Topic: "orders.created", Key: "o-1"}, outbox.Message{Topic: "orders.created", Key: "o-2"})
	for _, d := range got {
		if d.Acked != 3 {
			t.Errorf("message %s: %+v, want every copy acknowledged", d.Message.Key, d)
		}
	}
	var n int
	if err := db.Store.DB().QueryRowContext(t.Context(), `SELECT count(*) FROM orders`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 2 {
		t.Fatalf("%d orders, want each of the 2 messages applied once", n)
	}
}

func TestDrainFailsTheTestOnATableNotMigrated(t *testing.T) {
	t.Parallel()
	db := outboxsqlitetest.NewDatabase(t, outboxsqlitetest.Config{})
	store, err := outboxsqlite.New(db.Store.DB(), outboxsqlite.Options{Table: "not_there"})
	if err != nil {
		t.Fatal(err)
	}
	f := faketb.Run(t, func(tb testing.TB) { outboxtest.Drain(tb, store, &outboxtest.Recorder{}) })
	if msg := f.Failures(); !strings.Contains(msg, "relay stopped") || !strings.Contains(msg, "not_there") {
		t.Fatalf("Drain on a missing table: %q, want a failure naming the table", msg)
	}
}
