package outboxpg

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/sqlrow"
	"github.com/go-outbox/outbox/internal/txn"
)

// InsertTx inserts msgs in tx with one statement, whatever their number: the
// columns travel as arrays and unnest turns them back into rows. With
// Options.Notify the same statement also queues a NOTIFY, delivered only if tx
// commits. InsertTx never commits or rolls back tx. Messages must have an ID;
// outbox.Writer assigns them.
func (s *Store) InsertTx(ctx context.Context, tx pgx.Tx, msgs []*outbox.Message) error {
	if len(msgs) == 0 {
		return nil
	}
	query, args, err := s.ins.build(msgs)
	if err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, query, args...); err != nil {
		return fmt.Errorf("outboxpg: insert %d message(s) into %s: %w", len(msgs), s.ins.name, err)
	}
	return nil
}

// RunInTx begins a transaction on the store's pool, runs fn in it, and commits
// if fn returns nil. It rolls back if fn returns an error (which it returns as
// is) or panics (and then panics again).
func (s *Store) RunInTx(ctx context.Context, fn func(tx pgx.Tx) error) (err error) {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("outboxpg: begin transaction: %w", err)
	}
	commit := func(tx pgx.Tx) error { return commitError(tx.Commit(ctx)) }
	return txn.Run(tx, fn, commit, func(tx pgx.Tx) { _ = tx.Rollback(context.WithoutCancel(ctx)) })
}

// commitError wraps the error of a failed commit, if any, so that it reads
// apart from fn's errors, which RunInTx returns as is.
func commitError(err error) error {
	if err != nil {
		return fmt.Errorf("outboxpg: commit transaction: %w", err)
	}
	return nil
}

// SQLWriter writes messages through database/sql, for applications whose
// transactions are *sql.Tx. The *sql.DB must use the pgx driver
// (github.com/jackc/pgx/v5/stdlib), which passes the array arguments through.
// It writes exactly as Store.InsertTx does, and has the same Name, so a relay
// in the same process wakes on its writes.
type SQLWriter struct {
	db  *sql.DB
	ins inserter
}

// NewSQL returns an SQLWriter for the table opts names. It validates opts as
// New does and does not touch the database.
func NewSQL(db *sql.DB, opts Options) (*SQLWriter, error) {
	if db == nil {
		return nil, &outbox.ConfigError{Field: "outboxpg.NewSQL db", Value: "nil",
			Fix: `pass a *sql.DB opened with the pgx driver, e.g. sql.Open("pgx", url) after importing github.com/jackc/pgx/v5/stdlib`}
	}
	n, err := opts.resolve()
	if err != nil {
		return nil, err
	}
	stmts := newStatements(n, Options{})
	return &SQLWriter{db: db, ins: newInserter(n, &stmts, opts.Notify)}, nil
}

// InsertTx inserts msgs in tx with one statement; see Store.InsertTx.
func (w *SQLWriter) InsertTx(ctx context.Context, tx *sql.Tx, msgs []*outbox.Message) error {
	if len(msgs) == 0 {
		return nil
	}
	query, args, err := w.ins.build(msgs)
	if err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, query, args...); err != nil {
		return fmt.Errorf("outboxpg: insert %d message(s) into %s: %w", len(msgs), w.ins.name, err)
	}
	return nil
}

// Name returns "schema.table", the same as Store.Name for the same table.
func (w *SQLWriter) Name() string { return w.ins.name }

// RunInTx begins a transaction on the writer's *sql.DB, runs fn in it, and
// commits if fn returns nil; see Store.RunInTx.
func (w *SQLWriter) RunInTx(ctx context.Context, fn func(tx *sql.Tx) error) (err error) {
	tx, err := w.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("outboxpg: begin transaction: %w", err)
	}
	commit := func(tx *sql.Tx) error { return commitError(tx.Commit()) }
	return txn.Run(tx, fn, commit, func(tx *sql.Tx) { _ = tx.Rollback() })
}

// inserter builds the insert statement and its arguments; both drivers use it.
type inserter struct {
	name    string
	channel string
	notify  bool
	stmts   *statements
}

func newInserter(n names, stmts *statements, notify bool) inserter {
	return inserter{name: n.schema + "." + n.table, channel: n.channel, notify: notify, stmts: stmts}
}

// build returns the statement and its arguments: one array per column, so the
// statement text and the parameter count do not depend on len(msgs), or plain
// values for a single message.
func (in *inserter) build(msgs []*outbox.Message) (string, []any, error) {
	var (
		ids      = make([]pgtype.UUID, len(msgs))
		topics   = make([]string, len(msgs))
		keys     = make([]string, len(msgs))
		payloads = make([][]byte, len(msgs))
		headers  = make([]*string, len(msgs))
		created  = make([]*time.Time, len(msgs))
		due      = make([]*time.Time, len(msgs))
	)
	for i, m := range msgs {
		payload, encoded, err := sqlrow.Insertable("outboxpg", in.name, m, i, len(msgs))
		if err != nil {
			return "", nil, err
		}
		ids[i] = pgUUID(m.ID)
		topics[i] = m.Topic
		keys[i] = m.Key
		payloads[i] = payload
		if encoded != nil {
			h := string(encoded)
			headers[i] = &h
		}
		if !m.CreatedAt.IsZero() {
			created[i] = &m.CreatedAt
		}
		if !m.AvailableAt.IsZero() {
			due[i] = &m.AvailableAt
		}
	}
	if len(msgs) == 1 {
		args := []any{ids[0], topics[0], keys[0], payloads[0], headers[0], created[0], due[0]}
		if in.notify {
			return in.stmts.insertOneNotify, append(args, in.channel), nil
		}
		return in.stmts.insertOne, args, nil
	}
	args := []any{ids, topics, keys, payloads, headers, created, due}
	if in.notify {
		return in.stmts.insertNotify, append(args, in.channel), nil
	}
	return in.stmts.insert, args, nil
}
