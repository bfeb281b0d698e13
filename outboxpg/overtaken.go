package outboxpg

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/sqlrow"
	"github.com/go-outbox/outbox/outboxdriver"
)

// skipsDead reports whether, in key order, the store lets a key go on past
// a dead message, and so counts the messages that overtake it.
func (o Options) skipsDead() bool { return o.OrderByKey && o.SkipDeadInKeyOrder }

// countOvertakenOpen counts, for a store that skips dead messages in key
// order (statements.countOvertaken), the messages that settle publishes
// from an open claim on the dead messages of their keys they passed. The
// claim's transaction deleted its rows when it claimed them, and its
// commit publishes them, so the count runs in that transaction, before
// the exchange commits it: both happen, or neither. The claim's rows give
// each message's key and place in it. A settlement of a claim leased by
// its columns counts in its own statements (countingOvertaken).
func (s *Store) countOvertakenOpen(ctx context.Context, settle outboxdriver.Settlement) error {
	if s.stmts.countOvertaken == "" || len(settle.Published) == 0 {
		return nil
	}
	claim := allOpenClaims.take(settle.Token)
	if claim == nil {
		return nil // not open, or rolled back: nothing of it is published
	}
	var keys []string
	var seqs []int64
	for _, id := range settle.Published {
		if row, ok := claim.rows[id]; ok && row.msg.Key != "" {
			keys, seqs = append(keys, row.msg.Key), append(seqs, row.seq)
		}
	}
	if len(keys) > 0 {
		if _, err := claim.conn.Exec(ctx, s.stmts.countOvertaken, keys, seqs); err != nil {
			claim.conn.Release() // in a transaction, so the pool closes it: the claim rolls back
			return err
		}
	}
	allOpenClaims.put(settle.Token, claim)
	return nil
}

// queryListed runs q, a query of messageColumns and overtaken (Get,
// ListDead), and reads its messages. On a table before migration 6, which
// has no overtaken column, it runs old instead, which reads 0: nothing
// counted there (only relays of this release on a migrated table count),
// and `outbox dead` keeps working on a table that a relay needing no newer
// migration uses.
func (s *Store) queryListed(ctx context.Context, q, old string, args ...any) ([]outbox.Message, error) {
	rows, _ := s.pool.Query(ctx, q, args...)
	msgs, err := collectListed(rows)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42703" { // undefined_column
		rows, _ = s.pool.Query(ctx, old, args...)
		msgs, err = collectListed(rows)
	}
	return msgs, err
}

// collectListed reads rows of messageColumns and overtaken, and closes
// rows. A row whose headers do not decode comes without them.
func collectListed(rows pgx.Rows) ([]outbox.Message, error) {
	defer rows.Close()
	sc := newMessageScanner()
	sc.dest = append(sc.dest, &sc.msg.Overtaken)
	msgs, _, err := sqlrow.Collect(rows, 0, func(rows pgx.Rows) (outbox.Message, error, error) {
		m, _, headerErr, err := sc.scan(rows)
		return m, headerErr, err
	})
	return msgs, err
}
