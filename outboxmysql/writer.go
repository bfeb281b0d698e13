package outboxmysql

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/sqlrow"
	"github.com/go-outbox/outbox/internal/txn"
)

// Bounds of one INSERT statement. A call writes its messages with one
// statement unless they exceed them: MySQL takes at most 65,535
// parameters per statement (7 per message), and a statement must fit the
// server's max_allowed_packet (16 MiB by default on MariaDB, 64 MiB on
// MySQL 8).
const (
	insertMaxRows  = 1000
	insertMaxBytes = 4 << 20
)

// InsertTx inserts msgs in tx with one multi-row INSERT (more only past
// 1,000 messages or 4 MiB of payloads and headers). It never commits or
// rolls back tx. Messages must have an ID; outbox.Writer assigns them. A
// message without CreatedAt or AvailableAt gets the database's time of the
// insert (UTC_TIMESTAMP(6)); the relay cannot see it before the commit.
//
// tx may run at any isolation level: the store's claims take no gap locks
// that an INSERT waits for (see migration 1).
func (s *Store) InsertTx(ctx context.Context, tx *sql.Tx, msgs []*outbox.Message) error {
	if len(msgs) == 0 {
		return nil
	}
	args := make([]any, 0, 7*min(len(msgs), insertMaxRows))
	rows, bytes := 0, 0
	flush := func() error {
		if rows == 0 {
			return nil
		}
		var b strings.Builder
		b.WriteString(s.stmts.insertPrefix)
		for i := range rows {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(s.stmts.insertRow)
		}
		if _, err := tx.ExecContext(ctx, b.String(), args...); err != nil {
			return fmt.Errorf("outboxmysql: insert %d message(s) into %s: %w", len(msgs), s.Name(), err)
		}
		args, rows, bytes = args[:0], 0, 0
		return nil
	}
	for i, m := range msgs {
		row, size, err := s.insertArgs(m, i, len(msgs))
		if err != nil {
			return err
		}
		if rows == insertMaxRows || (rows > 0 && bytes+size > insertMaxBytes) {
			if err := flush(); err != nil {
				return err
			}
		}
		args = append(args, row...)
		rows++
		bytes += size
	}
	return flush()
}

// insertArgs returns the parameters of message i of n for insertRow, and
// the bytes of its payload and headers.
func (s *Store) insertArgs(m *outbox.Message, i, n int) ([]any, int, error) {
	payload, encoded, err := sqlrow.Insertable("outboxmysql", s.Name(), m, i, n)
	if err != nil {
		return nil, 0, err
	}
	// A server without strict SQL mode would cut a longer value short
	// with a warning; refused here, the message is never changed.
	switch {
	case len(m.Topic) > MaxTopicBytes:
		return nil, 0, fmt.Errorf("outboxmysql: insert into %s: message %s has a topic of %d bytes; the most is %d (MaxTopicBytes)", s.Name(), m.ID, len(m.Topic), MaxTopicBytes)
	case len(m.Key) > MaxKeyBytes:
		return nil, 0, fmt.Errorf("outboxmysql: insert into %s: message %s has a key of %d bytes; the most is %d (MaxKeyBytes)", s.Name(), m.ID, len(m.Key), MaxKeyBytes)
	}
	var headers, createdAt, availableAt any // NULL
	if encoded != nil {
		headers = string(encoded)
	}
	if !m.CreatedAt.IsZero() {
		createdAt = datetime(m.CreatedAt, false)
	}
	if !m.AvailableAt.IsZero() {
		availableAt = datetime(m.AvailableAt, true)
	}
	return []any{m.ID[:], []byte(m.Topic), []byte(m.Key), payload, headers, createdAt, availableAt}, len(payload) + len(encoded), nil
}

// RunInTx begins a transaction on the Store's *sql.DB, runs fn in it, and
// commits if fn returns nil. It rolls back if fn returns an error (which it
// returns as is) or panics (and then panics again).
func (s *Store) RunInTx(ctx context.Context, fn func(tx *sql.Tx) error) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("outboxmysql: begin transaction: %w", err)
	}
	commit := func(tx *sql.Tx) error {
		if err := tx.Commit(); err != nil {
			return fmt.Errorf("outboxmysql: commit transaction: %w", err)
		}
		return nil
	}
	return txn.Run(tx, fn, commit, func(tx *sql.Tx) { _ = tx.Rollback() })
}
