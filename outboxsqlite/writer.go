package outboxsqlite

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/sqlrow"
	"github.com/go-outbox/outbox/internal/txn"
)

// insertChunkRows is how many messages one INSERT statement carries at most:
// 7 parameters each stays far below SQLite's limit of 32,766 parameters per
// statement, and a fixed size lets the statement text be built once.
const insertChunkRows = 100

// insertSQL returns the INSERT statement for rows messages.
func (s *Store) insertSQL(rows int) string {
	var b strings.Builder
	b.Grow(len(s.stmts.insertPrefix) + rows*(len(s.stmts.insertRow)+2))
	b.WriteString(s.stmts.insertPrefix)
	for i := range rows {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(s.stmts.insertRow)
	}
	return b.String()
}

// InsertTx inserts msgs in tx with one multi-row INSERT per 100 messages.
// It never commits or rolls back tx. Messages must have an ID; outbox.Writer
// assigns them. A message without AvailableAt is due at the time of the
// insert (the commit comes later; the relay cannot see the message before).
//
// tx should have been begun with BEGIN IMMEDIATE (Open's *sql.DB does that
// for every read-write transaction): a deferred transaction that reads
// before it writes fails with "database is locked" if another connection
// commits in between, without waiting.
func (s *Store) InsertTx(ctx context.Context, tx *sql.Tx, msgs []*outbox.Message) error {
	if len(msgs) == 0 {
		return nil
	}
	now := time.Now().UnixMicro()
	args := make([]any, 0, 7*min(len(msgs), insertChunkRows))
	for start := 0; start < len(msgs); start += insertChunkRows {
		chunk := msgs[start:min(start+insertChunkRows, len(msgs))]
		args = args[:0]
		for i, m := range chunk {
			row, err := s.insertArgs(m, start+i, len(msgs), now)
			if err != nil {
				return err
			}
			args = append(args, row...)
		}
		query := s.insertChunk
		if len(chunk) < insertChunkRows {
			query = s.insertSQL(len(chunk))
		}
		if _, err := tx.ExecContext(ctx, query, args...); err != nil {
			return fmt.Errorf("outboxsqlite: insert %d message(s) into %s: %w", len(msgs), s.Name(), explain(err, s.path))
		}
	}
	return nil
}

// insertArgs returns the parameters of message i of n for insertRow.
func (s *Store) insertArgs(m *outbox.Message, i, n int, now int64) ([]any, error) {
	payload, encoded, err := sqlrow.Insertable("outboxsqlite", s.Name(), m, i, n)
	if err != nil {
		return nil, err
	}
	var headers any // NULL
	if encoded != nil {
		headers = string(encoded)
	}
	createdAt := now
	if !m.CreatedAt.IsZero() {
		createdAt = m.CreatedAt.UnixMicro()
	}
	availableAt := now
	if !m.AvailableAt.IsZero() {
		availableAt = ceilMicros(m.AvailableAt)
	}
	return []any{m.ID.String(), m.Topic, m.Key, payload, headers, createdAt, availableAt}, nil
}

// RunInTx begins a transaction on the Store's *sql.DB, runs fn in it, and
// commits if fn returns nil. It rolls back if fn returns an error (which it
// returns as is) or panics (and then panics again).
//
// The transaction waits behind the Store's other writes of this process and
// takes the write lock the way the Store's own transactions do (see
// Options.BusyTimeout): if the *sql.DB begins transactions with BEGIN
// IMMEDIATE (Open's does), it holds the lock from its first statement. Do
// not call the Store's methods that write from inside fn: they wait for fn's
// transaction.
func (s *Store) RunInTx(ctx context.Context, fn func(tx *sql.Tx) error) (err error) {
	if err := s.gate.enter(ctx, s.set.busyTimeout); err != nil {
		return fmt.Errorf("outboxsqlite: begin transaction: %w", err)
	}
	defer s.gate.leave()
	c, err := s.db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("outboxsqlite: begin transaction: %w", explain(err, s.path))
	}
	defer c.Close()
	var tx *sql.Tx
	err = takeWriteLock(ctx, c, s.set.busyTimeout, func() (err error) {
		tx, err = c.BeginTx(ctx, nil)
		return err
	})
	if err != nil {
		if tx != nil {
			_ = tx.Rollback()
		}
		return fmt.Errorf("outboxsqlite: begin transaction: %w", explain(err, s.path))
	}
	commit := func(tx *sql.Tx) error {
		if err := tx.Commit(); err != nil {
			return fmt.Errorf("outboxsqlite: commit transaction: %w", explain(err, s.path))
		}
		return nil
	}
	return txn.Run(tx, fn, commit, func(tx *sql.Tx) { _ = tx.Rollback() })
}
