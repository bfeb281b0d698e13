package mysqltest

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/go-sql-driver/mysql"
)

// StatementLog records what the connections of a counting pool send, in the
// order their calls returned. Statements are what the server runs: each
// Exec and Query, a prepared statement's every execution (its Prepare is a
// round trip but no statement), and transaction control in the words the
// relay suite and readers expect: "BEGIN ...", "COMMIT", "ROLLBACK". A
// begin with an isolation level is one statement and two round trips, since
// the driver sends SET TRANSACTION ISOLATION LEVEL before START
// TRANSACTION.
type StatementLog struct {
	mu         sync.Mutex
	sql        []string
	roundTrips atomic.Int64
}

// All returns the SQL of every statement sent so far.
func (l *StatementLog) All() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.sql)
}

// Len is how many statements were sent so far.
func (l *StatementLog) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.sql)
}

// RoundTrips is how many requests that wait for the server's answer were
// sent so far: statements, prepares, pings and the driver's SET
// TRANSACTION.
func (l *StatementLog) RoundTrips() int64 { return l.roundTrips.Load() }

func (l *StatementLog) add(sql string, roundTrips int64) {
	l.roundTrips.Add(roundTrips)
	l.mu.Lock()
	l.sql = append(l.sql, sql)
	l.mu.Unlock()
}

// Counted opens a second pool, with the same bounds as Database's, on the
// database named name (made by Database) whose statements go to the returned
// log. It is closed when the test ends, before Database drops the database.
func Counted(t testing.TB, name string) (*sql.DB, *StatementLog) {
	t.Helper()
	cfg := Config(t)
	cfg.DBName = name
	inner, err := mysql.NewConnector(cfg)
	if err != nil {
		t.Fatalf("mysqltest: connector on database %s: %v", name, err)
	}
	log := &StatementLog{}
	db := sql.OpenDB(NewCountingConnector(inner, log))
	db.SetMaxOpenConns(maxConns)
	db.SetMaxIdleConns(maxConns)
	t.Cleanup(func() { _ = db.Close() })
	return db, log
}

// NewCountingConnector wraps a go-sql-driver/mysql connector so that every
// statement its connections send is recorded in log. Its connections offer
// database/sql exactly the optional interfaces the driver's do (contexts,
// BeginTx, NamedValueChecker, SessionResetter, Validator, Pinger), so a pool
// on it talks to the server as a pool on the bare connector would: a
// missing one would make database/sql fall back to other calls, prepared
// statements instead of interpolated ones, say, and the count would
// measure a different program.
func NewCountingConnector(c driver.Connector, log *StatementLog) driver.Connector {
	return &countingConnector{inner: c, log: log}
}

type countingConnector struct {
	inner driver.Connector
	log   *StatementLog
}

// fullConn is what the driver's connections implement and the wrapper
// forwards; Connect refuses a connection that lacks any of it.
type fullConn interface {
	driver.Conn
	driver.ConnBeginTx
	driver.ConnPrepareContext
	driver.ExecerContext
	driver.NamedValueChecker
	driver.Pinger
	driver.QueryerContext
	driver.SessionResetter
	driver.Validator
}

// fullStmt is what the driver's prepared statements implement.
type fullStmt interface {
	driver.Stmt
	//lint:ignore SA1019 the driver's statements implement it, and database/sql still consults it
	driver.ColumnConverter
	driver.NamedValueChecker
	driver.StmtExecContext
	driver.StmtQueryContext
}

// Close closes the inner connector if it has a Close (database/sql calls it
// from DB.Close).
func (c *countingConnector) Close() error {
	if cl, ok := c.inner.(io.Closer); ok {
		return cl.Close()
	}
	return nil
}

func (c *countingConnector) Connect(ctx context.Context) (driver.Conn, error) {
	conn, err := c.inner.Connect(ctx)
	if err != nil {
		return nil, err
	}
	full, ok := conn.(fullConn)
	if !ok {
		_ = conn.Close()
		return nil, fmt.Errorf("mysqltest: the counting connector forwards go-sql-driver/mysql's connection interfaces; %T lacks some", conn)
	}
	return &countingConn{inner: full, log: c.log}, nil
}

func (c *countingConnector) Driver() driver.Driver { return c.inner.Driver() }

type countingConn struct {
	inner fullConn
	log   *StatementLog
}

// Begin is driver.Conn's; database/sql calls BeginTx.
func (c *countingConn) Begin() (driver.Tx, error) {
	return c.BeginTx(context.Background(), driver.TxOptions{})
}

func (c *countingConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	tx, err := c.inner.BeginTx(ctx, opts)
	stmt, trips := "BEGIN", int64(1)
	if opts.Isolation != driver.IsolationLevel(sql.LevelDefault) {
		stmt += " ISOLATION LEVEL " + strings.ToUpper(sql.IsolationLevel(opts.Isolation).String())
		trips++
	}
	if opts.ReadOnly {
		stmt += " READ ONLY"
	}
	c.log.add(stmt, trips)
	if err != nil {
		return nil, err
	}
	return &countingTx{inner: tx, log: c.log}, nil
}

func (c *countingConn) CheckNamedValue(v *driver.NamedValue) error {
	return c.inner.CheckNamedValue(v)
}

func (c *countingConn) Close() error { return c.inner.Close() }

// ExecContext records nothing when the driver declines with ErrSkip (it does
// for arguments without interpolateParams): database/sql then prepares the
// statement, and its execution is recorded there.
func (c *countingConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	res, err := c.inner.ExecContext(ctx, query, args)
	if err != driver.ErrSkip {
		c.log.add(query, 1)
	}
	return res, err
}

func (c *countingConn) IsValid() bool { return c.inner.IsValid() }

func (c *countingConn) Ping(ctx context.Context) error {
	c.log.roundTrips.Add(1)
	return c.inner.Ping(ctx)
}

func (c *countingConn) Prepare(query string) (driver.Stmt, error) {
	return c.PrepareContext(context.Background(), query)
}

func (c *countingConn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	c.log.roundTrips.Add(1)
	s, err := c.inner.PrepareContext(ctx, query)
	if err != nil {
		return nil, err
	}
	full, ok := s.(fullStmt)
	if !ok {
		_ = s.Close()
		return nil, fmt.Errorf("mysqltest: the counting connector forwards go-sql-driver/mysql's statement interfaces; %T lacks some", s)
	}
	return &countingStmt{inner: full, log: c.log, query: query}, nil
}

// QueryContext records nothing on ErrSkip, as ExecContext.
func (c *countingConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	rows, err := c.inner.QueryContext(ctx, query, args)
	if err != driver.ErrSkip {
		c.log.add(query, 1)
	}
	return rows, err
}

func (c *countingConn) ResetSession(ctx context.Context) error { return c.inner.ResetSession(ctx) }

type countingTx struct {
	inner driver.Tx
	log   *StatementLog
}

func (t *countingTx) Commit() error {
	t.log.add("COMMIT", 1)
	return t.inner.Commit()
}

func (t *countingTx) Rollback() error {
	t.log.add("ROLLBACK", 1)
	return t.inner.Rollback()
}

type countingStmt struct {
	inner fullStmt
	log   *StatementLog
	query string
}

func (s *countingStmt) CheckNamedValue(v *driver.NamedValue) error {
	return s.inner.CheckNamedValue(v)
}

// Close sends the driver's COM_STMT_CLOSE, which the server does not answer:
// no round trip.
func (s *countingStmt) Close() error { return s.inner.Close() }

func (s *countingStmt) ColumnConverter(idx int) driver.ValueConverter {
	return s.inner.ColumnConverter(idx)
}

// Exec and Query are driver.Stmt's; database/sql calls the Context forms.
func (s *countingStmt) Exec(args []driver.Value) (driver.Result, error) {
	s.log.add(s.query, 1)
	return s.inner.Exec(args)
}

func (s *countingStmt) ExecContext(ctx context.Context, args []driver.NamedValue) (driver.Result, error) {
	s.log.add(s.query, 1)
	return s.inner.ExecContext(ctx, args)
}

func (s *countingStmt) NumInput() int { return s.inner.NumInput() }

func (s *countingStmt) Query(args []driver.Value) (driver.Rows, error) {
	s.log.add(s.query, 1)
	return s.inner.Query(args)
}

func (s *countingStmt) QueryContext(ctx context.Context, args []driver.NamedValue) (driver.Rows, error) {
	s.log.add(s.query, 1)
	return s.inner.QueryContext(ctx, args)
}
