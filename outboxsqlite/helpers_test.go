package outboxsqlite_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"database/sql/driver"
	"encoding/hex"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/google/uuid"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/outboxdriver"
	"github.com/go-outbox/outbox/outboxsqlite"
	"github.com/go-outbox/outbox/storetest"
)

var errRollback = errors.New("roll back on purpose")

// dbPath returns a path for a new database file in a fresh directory.
func dbPath(t *testing.T) string {
	t.Helper()
	return filepath.Join(t.TempDir(), "outbox.db")
}

// randomTable returns a table name no other test uses, so that the in-process
// wake-ups of parallel tests (keyed by Store.Name) never cross.
func randomTable() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "outbox_" + hex.EncodeToString(b[:])
}

// newStore opens a new database file, migrates it and returns the Store.
func newStore(t *testing.T, opts outboxsqlite.Options) *outboxsqlite.Store {
	t.Helper()
	return openMigrated(t, dbPath(t), opts, nil)
}

func openMigrated(t *testing.T, path string, opts outboxsqlite.Options, log *statementLog) *outboxsqlite.Store {
	t.Helper()
	opts.CreateIfMissing = true
	var wrap func(driver.Connector) driver.Connector
	if log != nil {
		wrap = func(c driver.Connector) driver.Connector { return &tracingConnector{Connector: c, log: log} }
	}
	s, err := outboxsqlite.OpenWith(t.Context(), path, opts, wrap)
	if err != nil {
		t.Fatalf("open %s: %v", path, err)
	}
	t.Cleanup(func() { _ = s.Close() })
	m, err := outboxsqlite.NewMigrator(s.DB(), opts)
	if err != nil {
		t.Fatalf("new migrator: %v", err)
	}
	if _, err := m.Up(t.Context()); err != nil {
		t.Fatalf("migrate up: %v", err)
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

// harness writes through the Store's own transactions (RunInTx).
func harness(t *testing.T, store *outboxsqlite.Store) storetest.Harness {
	w := newWriter(t, store)
	ordered, err := outboxsqlite.New(store.DB(), outboxsqlite.Options{Table: strings.TrimPrefix(store.Name(), "main."), OrderByKey: true})
	if err != nil {
		t.Fatalf("new key-ordered store: %v", err)
	}
	skipping, err := outboxsqlite.New(store.DB(), outboxsqlite.Options{Table: strings.TrimPrefix(store.Name(), "main."), OrderByKey: true, SkipDeadInKeyOrder: true})
	if err != nil {
		t.Fatalf("new key-ordered store skipping dead messages: %v", err)
	}
	return storetest.Harness{
		Admin:                  store,
		Store:                  store,
		KeyOrdered:             ordered,
		KeyOrderedSkippingDead: skipping,
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
			_, err := store.DB().ExecContext(ctx, `UPDATE `+store.Name()+` SET headers = ? WHERE id = ?`, raw, id.String())
			return err
		},
		SetMinute: func(ctx context.Context, m outboxdriver.Minute) error {
			var pending, oldestMS sql.NullInt64
			if m.Sampled {
				pending = sql.NullInt64{Int64: m.Pending, Valid: true}
				oldestMS = sql.NullInt64{Int64: m.OldestPending.Milliseconds(), Valid: true}
			}
			_, err := store.DB().ExecContext(ctx, `INSERT INTO `+store.Name()+`_minutes (minute, published, failed, pending, oldest_ms) VALUES (?, ?, ?, ?, ?)`,
				m.Start.UnixMicro(), m.Published, m.Failed, pending, oldestMS)
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

// statementLog records the SQL a *sql.DB sends to SQLite, transaction
// control included.
type statementLog struct {
	mu  sync.Mutex
	sql []string
}

func (l *statementLog) add(sql string) {
	l.mu.Lock()
	l.sql = append(l.sql, sql)
	l.mu.Unlock()
}

func (l *statementLog) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.sql)
}

// sent returns every statement except the write watcher's PRAGMA
// data_version: that is a look at the file's shared memory on a connection
// of its own, not a query the relay's probing sends.
func (l *statementLog) sent() []string {
	return slices.DeleteFunc(l.all(), isWatch)
}

func isWatch(sql string) bool { return strings.Contains(sql, "data_version") }

// tracingConnector wraps the driver's connections to log what they run.
type tracingConnector struct {
	driver.Connector
	log *statementLog
}

func (c *tracingConnector) Connect(ctx context.Context) (driver.Conn, error) {
	conn, err := c.Connector.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &tracingConn{inner: conn, log: c.log}, nil
}

// innerConn is what the modernc driver's connections implement.
type innerConn interface {
	driver.Conn
	driver.ConnBeginTx
	driver.ConnPrepareContext
	driver.ExecerContext
	driver.QueryerContext
}

type tracingConn struct {
	inner driver.Conn
	log   *statementLog
}

func (c *tracingConn) conn() innerConn { return c.inner.(innerConn) }

func (c *tracingConn) Prepare(query string) (driver.Stmt, error) {
	return c.PrepareContext(context.Background(), query)
}

func (c *tracingConn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	st, err := c.conn().PrepareContext(ctx, query)
	if err != nil {
		return nil, err
	}
	return &tracingStmt{inner: st, query: query, log: c.log}, nil
}

func (c *tracingConn) Close() error { return c.inner.Close() }

func (c *tracingConn) Begin() (driver.Tx, error) {
	return c.BeginTx(context.Background(), driver.TxOptions{})
}

func (c *tracingConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	c.log.add("BEGIN (database/sql)")
	tx, err := c.conn().BeginTx(ctx, opts)
	if err != nil {
		return nil, err
	}
	return &tracingTx{inner: tx, log: c.log}, nil
}

func (c *tracingConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	c.log.add(query)
	return c.conn().ExecContext(ctx, query, args)
}

func (c *tracingConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	c.log.add(query)
	return c.conn().QueryContext(ctx, query, args)
}

func (c *tracingConn) ResetSession(ctx context.Context) error {
	if r, ok := c.inner.(driver.SessionResetter); ok {
		return r.ResetSession(ctx)
	}
	return nil
}

func (c *tracingConn) IsValid() bool {
	if v, ok := c.inner.(driver.Validator); ok {
		return v.IsValid()
	}
	return true
}

func (c *tracingConn) IsReadOnly(schema string) (bool, error) {
	return c.inner.(interface{ IsReadOnly(string) (bool, error) }).IsReadOnly(schema)
}

type tracingTx struct {
	inner driver.Tx
	log   *statementLog
}

func (t *tracingTx) Commit() error {
	t.log.add("COMMIT (database/sql)")
	return t.inner.Commit()
}

func (t *tracingTx) Rollback() error {
	t.log.add("ROLLBACK (database/sql)")
	return t.inner.Rollback()
}

type tracingStmt struct {
	inner driver.Stmt
	query string
	log   *statementLog
}

func (s *tracingStmt) Close() error  { return s.inner.Close() }
func (s *tracingStmt) NumInput() int { return s.inner.NumInput() }

// Exec and Query complete driver.Stmt; database/sql calls the Context
// variants below.
func (s *tracingStmt) Exec(args []driver.Value) (driver.Result, error) {
	s.log.add(s.query)
	return s.inner.Exec(args) //lint:ignore SA1019 driver.Stmt requires Exec
}

func (s *tracingStmt) Query(args []driver.Value) (driver.Rows, error) {
	s.log.add(s.query)
	return s.inner.Query(args) //lint:ignore SA1019 driver.Stmt requires Query
}

func (s *tracingStmt) ExecContext(ctx context.Context, args []driver.NamedValue) (driver.Result, error) {
	s.log.add(s.query)
	return s.inner.(driver.StmtExecContext).ExecContext(ctx, args)
}

func (s *tracingStmt) QueryContext(ctx context.Context, args []driver.NamedValue) (driver.Rows, error) {
	s.log.add(s.query)
	return s.inner.(driver.StmtQueryContext).QueryContext(ctx, args)
}

// migratedInbox returns store's inbox table (the default name), migrated.
func migratedInbox(t *testing.T, store *outboxsqlite.Store) *outboxsqlite.InboxTable {
	t.Helper()
	table, err := outboxsqlite.NewInboxTable(store, "")
	if err != nil {
		t.Fatalf("new inbox table: %v", err)
	}
	if err := table.Migrate(t.Context()); err != nil {
		t.Fatalf("migrate the inbox table: %v", err)
	}
	return table
}
