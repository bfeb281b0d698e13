package outboxpg_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/pgtest"
	"github.com/go-outbox/outbox/outboxpg"
)

const notifyTimeout = 10 * time.Second

// TestNotifyFiresOnCommitOnly listens on the channel itself: after the writes,
// the test sends a marker notification, and everything received before the
// marker came from the writes, in commit order.
func TestNotifyFiresOnCommitOnly(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		notify bool
		commit bool
		sql    bool // write through database/sql instead of pgx
		want   int
	}{
		{"notify on, commit", true, true, false, 1},
		{"notify on, rollback", true, false, false, 0},
		{"notify off, commit", false, true, false, 0},
		{"database/sql, notify on, commit", true, true, true, 1},
		{"database/sql, notify on, rollback", true, false, true, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			pool := pgtest.Pool(t)
			opts := outboxpg.Options{Schema: pgtest.Schema(t), Notify: tt.notify}
			store := newStore(t, pool, opts)
			ctx := t.Context()

			conn, err := pool.Acquire(ctx)
			if err != nil {
				t.Fatalf("acquire: %v", err)
			}
			listener := conn.Hijack()
			defer listener.Close(context.Background())
			if _, err := listener.Exec(ctx, `LISTEN "`+outboxpg.Channel(store)+`"`); err != nil {
				t.Fatalf("listen: %v", err)
			}

			m := &outbox.Message{Topic: "orders.created"}
			end := func(err error) error {
				if err == nil && !tt.commit {
					return errRollback
				}
				return err
			}
			if tt.sql {
				sw, nerr := outboxpg.NewSQL(openDB(t, pool), opts)
				if nerr != nil {
					t.Fatalf("new SQL writer: %v", nerr)
				}
				w := newWriter(t, sw)
				err = sw.RunInTx(ctx, func(tx *sql.Tx) error { return end(w.Write(ctx, tx, m)) })
			} else {
				w := newWriter(t, store)
				err = store.RunInTx(ctx, func(tx pgx.Tx) error { return end(w.Write(ctx, tx, m)) })
			}
			if err != nil && !errors.Is(err, errRollback) {
				t.Fatalf("write: %v", err)
			}
			if _, err := pool.Exec(ctx, `SELECT pg_notify($1, 'marker')`, outboxpg.Channel(store)); err != nil {
				t.Fatalf("send the marker: %v", err)
			}

			got := 0
			waitCtx, cancel := context.WithTimeout(ctx, notifyTimeout)
			defer cancel()
			for {
				n, err := listener.WaitForNotification(waitCtx)
				if err != nil {
					t.Fatalf("wait for notifications: %v (got %d before the marker)", err, got)
				}
				if n.Payload == "marker" {
					break
				}
				got++
			}
			if got != tt.want {
				t.Fatalf("writing message %s (notify %v, commit %v) sent %d notification(s); want %d", m.ID, tt.notify, tt.commit, got, tt.want)
			}
		})
	}
}

func TestListenForWritesWakesOnCommitAndAfterReconnecting(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	store := newStore(t, pool, outboxpg.Options{Notify: true})
	w := newWriter(t, store)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()

	wakes := make(chan struct{}, 16)
	done := make(chan error, 1)
	go func() {
		done <- store.ListenForWrites(ctx, func() {
			select {
			case wakes <- struct{}{}:
			default:
			}
		})
	}()
	waitWake := func(what string) {
		t.Helper()
		select {
		case <-wakes:
		case err := <-done:
			t.Fatalf("%s: ListenForWrites returned %v", what, err)
		case <-time.After(notifyTimeout):
			t.Fatalf("%s: no wake-up within %v", what, notifyTimeout)
		}
	}
	write := func() {
		t.Helper()
		// Written in a transaction of the test's own, so only NOTIFY can
		// wake the listener (Writer.Transact would also wake in-process).
		err := store.RunInTx(ctx, func(tx pgx.Tx) error { return w.Write(ctx, tx, &outbox.Message{Topic: "orders.created"}) })
		if err != nil {
			t.Fatalf("write: %v", err)
		}
	}

	waitWake("start of listening")
	write()
	waitWake("commit")

	// Kill the listening connection; the listener reconnects and wakes once.
	tag, err := pool.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
		WHERE datname = current_database() AND query = $1 AND pid <> pg_backend_pid()`, `LISTEN "`+outboxpg.Channel(store)+`"`)
	if err != nil || tag.RowsAffected() != 1 {
		t.Fatalf("terminate the listening connection: %v, %d rows; want 1", err, tag.RowsAffected())
	}
	waitWake("reconnect")
	write()
	waitWake("commit after reconnecting")

	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("ListenForWrites after cancel: %v; want context.Canceled", err)
		}
	case <-time.After(notifyTimeout):
		t.Fatalf("ListenForWrites did not return within %v of cancel", notifyTimeout)
	}
}
