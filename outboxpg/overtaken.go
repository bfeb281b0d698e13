package outboxpg

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

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

var _ outboxdriver.KeyOrderRetrier = (*Store)(nil)

// RetryDeadUnlessOvertaken retries the dead messages ids (every dead
// message if all) unless later messages of their key overtook one of
// them; then it retries none and returns those (see
// outboxdriver.KeyOrderRetrier). One statement locks the dead messages
// asked for, so no settlement can count on them until it commits, and
// retries them only if none is overtaken. On a table before migration 6,
// which has no count, it retries as RetryDead and RetryAllDead do.
func (s *Store) RetryDeadUnlessOvertaken(ctx context.Context, ids []uuid.UUID, all bool) (int, []outbox.Message, error) {
	if !all && len(ids) == 0 {
		return 0, nil, nil
	}
	q, args := retryUnlessOvertaken(s.names.qTable, `id = ANY($1::uuid[])`), []any{pgUUIDs(ids)}
	if all {
		q, args = retryUnlessOvertaken(s.names.qTable, `true`), nil
	}
	var retried int
	var overtaken []pgtype.UUID
	err := s.pool.QueryRow(ctx, q, args...).Scan(&retried, &overtaken)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42703" { // undefined_column: nothing counted
		if all {
			retried, err = s.RetryAllDead(ctx)
		} else {
			retried, err = s.RetryDead(ctx, ids...)
		}
		return retried, nil, err
	}
	if err != nil {
		return 0, nil, fmt.Errorf("outboxpg: retry dead messages in %s unless overtaken: %w", s.Name(), err)
	}
	if len(overtaken) == 0 {
		return retried, nil, nil
	}
	// The statement left them as they were; read them to name them.
	rows, _ := s.pool.Query(ctx, `SELECT `+messageColumns+`, overtaken FROM `+s.names.qTable+` WHERE id = ANY($1::uuid[]) ORDER BY id`, overtaken)
	msgs, err := collectListed(rows)
	if err != nil {
		return 0, nil, fmt.Errorf("outboxpg: read the overtaken dead messages of %s: %w", s.Name(), err)
	}
	return 0, msgs, nil
}

// retryUnlessOvertaken is RetryDeadUnlessOvertaken's statement on table
// t, for the dead messages that asked selects. asked locks them (in id
// order, as every retry of many takes them), with their counts as of the
// lock: a settlement that counts on one of them waits for the statement
// to commit, and by then finds it pending, no longer dead. The update
// applies only if none of them is overtaken, so a request is retried whole
// or not at all. It returns how many it retried and the ids of the
// overtaken ones.
func retryUnlessOvertaken(t, asked string) string {
	return `
WITH asked AS MATERIALIZED (
	SELECT id, overtaken FROM ` + t + ` WHERE status = 'dead' AND ` + asked + `
	ORDER BY id
	FOR UPDATE
), retried AS (
	UPDATE ` + t + ` AS t SET status = 'pending', attempts = 0, available_at = now(), lease_token = NULL, locked_until = NULL
	FROM asked AS a
	WHERE t.id = a.id AND t.status = 'dead' AND t.overtaken = 0
		AND NOT EXISTS (SELECT FROM asked WHERE overtaken > 0)
	RETURNING t.id
)
SELECT (SELECT count(*) FROM retried), ARRAY(SELECT id FROM asked WHERE overtaken > 0 ORDER BY id)`
}
