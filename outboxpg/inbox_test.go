package outboxpg_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/pgtest"
	"github.com/go-outbox/outbox/outboxpg"
	"github.com/go-outbox/outbox/relaytest"
	"github.com/go-outbox/outbox/storetest"
)

func TestInboxConformance(t *testing.T) {
	t.Parallel()
	storetest.RunInbox(t, func(t *testing.T) storetest.InboxHarness[pgx.Tx] {
		pool := pgtest.Pool(t)
		store := newStore(t, pool, outboxpg.Options{})
		schema, _, _ := strings.Cut(store.Name(), ".")
		table, err := outboxpg.NewInboxTable(pool, outboxpg.InboxOptions{Schema: schema})
		if err != nil {
			t.Fatalf("new inbox table: %v", err)
		}
		// Migrate twice: it must be idempotent.
		for range 2 {
			if err := table.Migrate(t.Context()); err != nil {
				t.Fatalf("migrate: %v", err)
			}
		}
		effects := `"` + schema + `".effects`
		if _, err := pool.Exec(t.Context(), `CREATE TABLE `+effects+` (message_id uuid NOT NULL)`); err != nil {
			t.Fatalf("create effects table: %v", err)
		}
		return storetest.InboxHarness[pgx.Tx]{
			Table:  table,
			Parked: table,
			Purge:  table.PurgeProcessed,
			Outbox: store,
			Writer: newWriter(t, outbox.Inserter[pgx.Tx](store)),
			Effect: func(ctx context.Context, tx pgx.Tx, id uuid.UUID) error {
				_, err := tx.Exec(ctx, `INSERT INTO `+effects+` VALUES ($1)`, id)
				return err
			},
			Effects: func(ctx context.Context, id uuid.UUID) (n int, err error) {
				err = pool.QueryRow(ctx, `SELECT count(*) FROM `+effects+` WHERE message_id = $1`, id).Scan(&n)
				return n, err
			},
		}
	})
}

// A handler can write outgoing messages through a Writer in the inbox's
// transaction: they exist only if the message was applied.
func TestInboxHandlerWritesToTheOutboxInItsTransaction(t *testing.T) {
	t.Parallel()
	store, table := newOutboxAndInbox(t)
	in, err := outbox.NewInbox(table, "shipping")
	if err != nil {
		t.Fatalf("new inbox: %v", err)
	}
	w := newWriter(t, store)
	id := uuid.Must(uuid.NewV7())
	errLater := errors.New("fails after writing")
	for i, fail := range []bool{true, false, false} {
		_, err := in.Handle(t.Context(), id, func(ctx context.Context, tx pgx.Tx) error {
			if err := w.Write(ctx, tx, &outbox.Message{Topic: "shipments.requested", Payload: []byte(id.String())}); err != nil {
				return err
			}
			if fail {
				return errLater
			}
			return nil
		})
		if fail != errors.Is(err, errLater) || !fail && err != nil {
			t.Fatalf("delivery %d: %v", i+1, err)
		}
	}
	st, err := store.Stats(t.Context())
	if err != nil {
		t.Fatalf("stats: %v", err)
	}
	if st.Pending != 1 {
		t.Fatalf("after a failed, an applied and a duplicate delivery the outbox holds %d messages; want 1", st.Pending)
	}
}

// Outgoing messages written by a handler go out at once through a relay of
// the same process, woken by the inbox's commit as Writer.Transact wakes it,
// not at the relay's next poll (an hour away here).
func TestInboxCommitWakesTheRelayOfItsOutgoingMessages(t *testing.T) {
	t.Parallel()
	store, table := newOutboxAndInbox(t)
	in, err := outbox.NewInbox(table, "shipping")
	if err != nil {
		t.Fatal(err)
	}
	rec := relaytest.NewRecorder()
	relay := relaytest.StartRelay(t, store, rec, outbox.Config{PollInterval: time.Hour, ActivePollInterval: time.Hour})
	rec.WaitFor(t, 10*time.Second, "the relay's first exchange", func() bool { return relay.Ready() == nil })
	w := newWriter(t, store)
	out := &outbox.Message{Topic: "shipments.requested", Payload: []byte("{}")}
	if _, err := in.Handle(t.Context(), uuid.Must(uuid.NewV7()), func(ctx context.Context, tx pgx.Tx) error {
		return w.Write(ctx, tx, out)
	}); err != nil {
		t.Fatal(err)
	}
	rec.WaitFor(t, 10*time.Second, "the outgoing message published after the inbox's commit", func() bool { return rec.Count(out.ID) == 1 })
}

// newOutboxAndInbox returns a migrated outbox table and inbox table in a
// fresh schema.
func newOutboxAndInbox(t *testing.T) (*outboxpg.Store, *outboxpg.InboxTable) {
	t.Helper()
	pool := pgtest.Pool(t)
	store := newStore(t, pool, outboxpg.Options{})
	schema, _, _ := strings.Cut(store.Name(), ".")
	table, err := outboxpg.NewInboxTable(pool, outboxpg.InboxOptions{Schema: schema})
	if err != nil {
		t.Fatalf("new inbox table: %v", err)
	}
	if err := table.Migrate(t.Context()); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	return store, table
}

func TestNewInboxTableRejectsInvalidNames(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	for _, opts := range []outboxpg.InboxOptions{{Table: "Processed"}, {Schema: "a-b"}, {Table: "t;drop"}} {
		_, err := outboxpg.NewInboxTable(pool, opts)
		var cerr *outbox.ConfigError
		if !errors.As(err, &cerr) {
			t.Fatalf("NewInboxTable(%+v): %v; want a *outbox.ConfigError", opts, err)
		}
	}
	if _, err := outbox.NewInbox[pgx.Tx](nil, "x"); err == nil {
		t.Fatalf("NewInbox with a nil table: no error")
	}
	table, _ := outboxpg.NewInboxTable(pool, outboxpg.InboxOptions{})
	if _, err := outbox.NewInbox(table, ""); err == nil {
		t.Fatalf("NewInbox with an empty consumer: no error")
	}
}

// An outbox table the purge cannot read (here: dropped) keeps the records
// waiting for it, and is reported, but the other records are purged.
func TestInboxPurgeGoesOnPastAnOutboxTableItCannotRead(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	store, table := newOutboxAndInbox(t)
	other := newStore(t, pool, outboxpg.Options{})
	in, err := outbox.NewInbox(table, "billing")
	if err != nil {
		t.Fatal(err)
	}
	writeTo := func(s *outboxpg.Store) {
		w := newWriter(t, s)
		if _, err := in.Handle(t.Context(), uuid.Must(uuid.NewV7()), func(ctx context.Context, tx pgx.Tx) error {
			return w.Write(ctx, tx, &outbox.Message{Topic: "invoices.sent", Payload: []byte("{}")})
		}); err != nil {
			t.Fatal(err)
		}
	}
	writeTo(other)
	writeTo(store)
	if _, err := in.Handle(t.Context(), uuid.Must(uuid.NewV7()), func(context.Context, pgx.Tx) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(t.Context(), `DROP TABLE `+other.Name()); err != nil {
		t.Fatal(err)
	}
	n, err := outbox.PurgeInboxOnce(t.Context(), table, 0, 100)
	if n != 1 || err == nil || !strings.Contains(err.Error(), other.Name()) {
		t.Fatalf("purge with an unreadable outbox table: %d deleted, %v; want the record without outgoing messages deleted and an error naming %s", n, err, other.Name())
	}
	stats, err := table.ConsumerStats(t.Context())
	if err != nil || len(stats) != 1 || stats[0].Records != 2 || stats[0].AwaitingOutgoing != 2 {
		t.Fatalf("after the purge: %+v, %v; want the 2 records waiting for outgoing messages kept", stats, err)
	}
}

// A handler that writes to two outbox tables is applied; its record waits
// for the messages of both (TestInboxRecordWaitsForEveryOutboxTableItsHandlerWroteTo).
func TestInboxHandlerMayWriteToTwoOutboxTables(t *testing.T) {
	t.Parallel()
	store, table := newOutboxAndInbox(t)
	other := newStore(t, pgtest.Pool(t), outboxpg.Options{})
	in, err := outbox.NewInbox(table, "billing")
	if err != nil {
		t.Fatal(err)
	}
	w, w2 := newWriter(t, store), newWriter(t, other)
	applied, err := in.Handle(t.Context(), uuid.Must(uuid.NewV7()), func(ctx context.Context, tx pgx.Tx) error {
		if err := w.Write(ctx, tx, &outbox.Message{Topic: "invoices.sent"}); err != nil {
			return err
		}
		return w2.Write(ctx, tx, &outbox.Message{Topic: "audit.logged"})
	})
	if err != nil || !applied {
		t.Fatalf("handler writing to two outbox tables: applied %v, %v; want applied", applied, err)
	}
	stats, err := table.ConsumerStats(t.Context())
	if err != nil || len(stats) != 1 || stats[0].AwaitingOutgoing != 1 {
		t.Fatalf("stats: %+v, %v; want the record waiting for its outgoing messages", stats, err)
	}
}

// Consumers migrate at every start: on a current table Migrate takes no
// lock, so it does not wait for handler transactions in flight.
func TestInboxMigrateOfACurrentTableDoesNotWaitForHandlers(t *testing.T) {
	t.Parallel()
	_, table := newOutboxAndInbox(t)
	in, err := outbox.NewInbox(table, "billing")
	if err != nil {
		t.Fatal(err)
	}
	inFlight, release := make(chan struct{}), make(chan struct{})
	go func() {
		_, _ = in.Handle(context.Background(), uuid.Must(uuid.NewV7()), func(context.Context, pgx.Tx) error {
			close(inFlight)
			<-release
			return nil
		})
	}()
	<-inFlight
	defer close(release)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
	defer cancel()
	if err := table.Migrate(ctx); err != nil {
		t.Fatalf("Migrate of a current table while a handler's transaction is open: %v; want it done at once", err)
	}
}
