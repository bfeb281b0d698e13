package outboxmysql_test

import (
	"context"
	"database/sql"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/outboxmysql"
)

// An unpark of a key's first message and a discard of the message behind it
// that overlap must still pass the key on to the third message: otherwise
// it is left first of its key, waiting, and requested by nobody. A
// transaction that holds the rows of both makes the two wait, so that they
// run together once it ends.
func TestInboxParkedUnparkAndDiscardOfTheNextTogetherPassTheKeyOn(t *testing.T) {
	t.Parallel()
	store := newStore(t, outboxmysql.Options{Table: randomTable()})
	table := migratedInbox(t, store)
	ctx := t.Context()
	for round := range 5 {
		key := "order-" + uuid.NewString()
		first, second, third := keyMessage(key), keyMessage(key), keyMessage(key)
		if err := table.Park(ctx, "billing", first, 5, "failed"); err != nil {
			t.Fatal(err)
		}
		for _, m := range []outbox.Message{second, third} {
			if head, err := table.ParkBehind(ctx, "billing", m); err != nil || head != first.ID {
				t.Fatalf("round %d: park %s behind %s: head %s, %v", round, m.ID, first.ID, head, err)
			}
		}

		gate, err := store.DB().BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		rows, err := gate.QueryContext(ctx, "SELECT message_id FROM processed_messages_parked WHERE consumer = ? AND message_id IN (?, ?) FOR UPDATE",
			[]byte("billing"), first.ID[:], second.ID[:])
		if err == nil {
			err = rows.Close()
		}
		if err != nil {
			_ = gate.Rollback()
			t.Fatal(err)
		}
		var (
			wg                    sync.WaitGroup
			unparkErr, discardErr error
			discarded             int
		)
		wg.Go(func() { unparkErr = table.Unpark(context.WithoutCancel(ctx), "billing", first.ID) })
		wg.Go(func() { discarded, discardErr = table.DiscardParked(context.WithoutCancel(ctx), "billing", second.ID) })
		waitForBlocked(t, store.DB(), 2)
		if err := gate.Commit(); err != nil {
			t.Fatal(err)
		}
		wg.Wait()
		if unparkErr != nil || discardErr != nil || discarded != 1 {
			t.Fatalf("round %d: unpark %s: %v; discard %s: %d, %v; want both done", round, first.ID, unparkErr, second.ID, discarded, discardErr)
		}
		got, err := table.GetParked(ctx, "billing", third.ID)
		if err != nil || !got.RetryRequested || !got.Waiting {
			t.Fatalf("round %d: message %s after its key's first two were unparked and discarded together: %+v, %v; want it waiting with its retry requested",
				round, third.ID, got, err)
		}
		next, ok, err := table.TakeNextWaiting(ctx, "billing", key)
		if err != nil || !ok || next.ID != third.ID {
			t.Fatalf("round %d: take the next waiting message of %s: %s, %v, %v; want %s", round, key, next.ID, ok, err, third.ID)
		}
	}
}

func keyMessage(key string) outbox.Message {
	return outbox.Message{ID: uuid.Must(uuid.NewV7()), Topic: "orders.created", Key: key, Payload: []byte(`{}`)}
}

func migratedInbox(t *testing.T, store *outboxmysql.Store) *outboxmysql.InboxTable {
	t.Helper()
	table, err := outboxmysql.NewInboxTable(store, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := table.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	return table
}

// waitForBlocked waits until n statements on db's database, other than its
// own, have run for a while: with the gate held, those are waiting for it.
// (MariaDB's INNODB_TRX does not list them.)
func waitForBlocked(t *testing.T, db *sql.DB, n int) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		var blocked int
		err := db.QueryRowContext(t.Context(), `SELECT COUNT(*) FROM information_schema.PROCESSLIST
WHERE DB = DATABASE() AND ID <> CONNECTION_ID() AND COMMAND = 'Query' AND TIME_MS > 50`).Scan(&blocked)
		if err != nil {
			t.Fatalf("count the statements waiting for the gate: %v", err)
		}
		if blocked >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d statement(s) wait for the gate after 20s; want %d", blocked, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
