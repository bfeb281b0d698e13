package outboxmysql_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/mysqltest"
	"github.com/go-outbox/outbox/outboxdriver"
	"github.com/go-outbox/outbox/outboxmysql"
	"github.com/go-outbox/outbox/storetest"
)

var errRollback = errors.New("roll back on purpose")

// randomTable returns a table name no other test uses, so that the
// in-process wake-ups of parallel tests (keyed by Store.Name) never cross.
func randomTable() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "outbox_" + hex.EncodeToString(b[:])
}

// newStore migrates a table in a fresh database and returns its Store.
func newStore(t *testing.T, opts outboxmysql.Options) *outboxmysql.Store {
	t.Helper()
	return migrated(t, mysqltest.DB(t), opts)
}

func migrated(t *testing.T, db *sql.DB, opts outboxmysql.Options) *outboxmysql.Store {
	t.Helper()
	m, err := outboxmysql.NewMigrator(db, opts)
	if err != nil {
		t.Fatalf("new migrator: %v", err)
	}
	if _, err := m.Up(t.Context()); err != nil {
		t.Fatalf("migrate up: %v", err)
	}
	s, err := outboxmysql.New(db, opts)
	if err != nil {
		t.Fatalf("new store: %v", err)
	}
	if opts.TransactionLeases {
		t.Cleanup(func() { outboxmysql.RollBackHeldClaims(s) })
	}
	return s
}

func newWriter(t *testing.T, in outbox.Inserter[*sql.Tx]) *outbox.Writer[*sql.Tx] {
	t.Helper()
	w, err := outbox.NewWriter(in, outbox.WriterConfig{})
	if err != nil {
		t.Fatalf("new writer: %v", err)
	}
	return w
}

// harness writes through the Store's own transactions (RunInTx), and
// claims in key order through Stores of the same table with OrderByKey,
// with and without SkipDeadInKeyOrder.
func harness(t *testing.T, store *outboxmysql.Store) storetest.Harness {
	w := newWriter(t, store)
	return storetest.Harness{
		Admin:                  store,
		Store:                  store,
		KeyOrdered:             keyOrdered(t, store, outboxmysql.Options{}),
		KeyOrderedSkippingDead: keyOrdered(t, store, outboxmysql.Options{SkipDeadInKeyOrder: true}),
		Now:                    func(ctx context.Context) (time.Time, error) { return outboxmysql.Now(ctx, store) },
		Write: func(ctx context.Context, msgs ...*outbox.Message) error {
			return w.Transact(ctx, func(ctx context.Context, tx *sql.Tx) error { return w.Write(ctx, tx, msgs...) })
		},
		WriteRollback: func(ctx context.Context, msgs ...*outbox.Message) error {
			return rollback(store.RunInTx(ctx, func(tx *sql.Tx) error {
				if err := w.Write(ctx, tx, msgs...); err != nil {
					return err
				}
				return errRollback
			}))
		},
		SetStoredHeaders: func(ctx context.Context, id uuid.UUID, raw string) error {
			_, err := store.DB().ExecContext(ctx, "UPDATE `"+store.Name()+"` SET headers = ? WHERE id = ?", raw, id[:])
			return err
		},
		SetMinute: func(ctx context.Context, m outboxdriver.Minute) error {
			var pending, oldestMS sql.NullInt64
			if m.Sampled {
				pending = sql.NullInt64{Int64: m.Pending, Valid: true}
				oldestMS = sql.NullInt64{Int64: m.OldestPending.Milliseconds(), Valid: true}
			}
			_, err := store.DB().ExecContext(ctx, "INSERT INTO `"+store.Name()+"_minutes` (minute, published, failed, pending, oldest_ms) VALUES (?, ?, ?, ?, ?)",
				m.Start.UTC().Format(time.DateTime), m.Published, m.Failed, pending, oldestMS)
			return err
		},
	}
}

func rollback(err error) error {
	if errors.Is(err, errRollback) {
		return nil
	}
	if err == nil {
		return errors.New("the transaction committed; want it rolled back")
	}
	return err
}

// keyOrdered returns a Store of store's table that claims in key order,
// with the rest of opts.
func keyOrdered(t *testing.T, store *outboxmysql.Store, opts outboxmysql.Options) *outboxmysql.Store {
	t.Helper()
	opts.Table, opts.OrderByKey = store.Name(), true
	s, err := outboxmysql.New(store.DB(), opts)
	if err != nil {
		t.Fatalf("new key-ordered store: %v", err)
	}
	return s
}
