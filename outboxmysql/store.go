package outboxmysql

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/sqlrow"
	"github.com/go-outbox/outbox/outboxdriver"
)

// Store is an outbox table in a MySQL or MariaDB database, used through
// database/sql with github.com/go-sql-driver/mysql. It is safe for
// concurrent use, and any number of Stores, in any number of processes,
// may share the table. Create the table with a Migrator first.
type Store struct {
	db     *sql.DB
	set    settings
	stmts  statements
	kstmts keyStatements // key order only

	purging     atomic.Bool // a PurgePublished of this Store is running
	warnNoPlace sync.Once   // TransactionLeases: a claim found no connection to hold
}

// The interfaces Store implements.
var (
	_ outboxdriver.Store           = (*Store)(nil)
	_ outboxdriver.Admin           = (*Store)(nil)
	_ outboxdriver.KeyOrderClaimer = (*Store)(nil)
	_ outboxdriver.SchemaChecker   = (*Store)(nil)
	_ outbox.Inserter[*sql.Tx]     = (*Store)(nil)
	_ outbox.TxRunner[*sql.Tx]     = (*Store)(nil)
)

// New returns a Store for the table opts names, in the database db connects
// to. It validates opts and does not touch the database. Open db with the
// github.com/go-sql-driver/mysql driver; the store reads and writes its
// times itself, so it works whatever parseTime and loc say, but
// interpolateParams=true saves a round trip per statement (see the
// package documentation).
func New(db *sql.DB, opts Options) (*Store, error) {
	if db == nil {
		return nil, &outbox.ConfigError{Field: "outboxmysql.New db", Value: "nil",
			Fix: `pass a *sql.DB opened with the mysql driver, e.g. sql.Open("mysql", "user:password@tcp(host:3306)/db?interpolateParams=true") after importing github.com/go-sql-driver/mysql`}
	}
	set, err := opts.resolve()
	if err != nil {
		return nil, err
	}
	return &Store{db: db, set: set, stmts: newStatements(set), kstmts: newKeyStatements(set)}, nil
}

// ClaimsInKeyOrder reports whether the store's claims keep key order
// (Options.OrderByKey); see outboxdriver.KeyOrderClaimer.
func (s *Store) ClaimsInKeyOrder() bool { return s.set.orderByKey }

// Name returns the table's name. Writers and relays of one process that
// use the same name wake each other; give tables of different databases
// that one process serves different names.
func (s *Store) Name() string { return s.set.table }

// DB returns the *sql.DB the Store uses, for a Migrator and for the
// application's own transactions.
func (s *Store) DB() *sql.DB { return s.db }

// SettleAndClaim records settle and claims the next batch in one READ
// COMMITTED transaction: if any statement fails, nothing is recorded and
// nothing is claimed. It runs one statement per non-empty outcome kind,
// then, if claim.Limit > 0, reads the due messages with FOR UPDATE SKIP
// LOCKED and leases them. A deadlock or lock wait timeout runs the whole
// transaction again (see inTx).
//
// A settlement of a claim held in a transaction (TransactionLeases, by a
// Store of any mode) is recorded in that transaction, which commits before
// the next claim begins: an error may then come after the settlement was
// recorded, and sending it again records nothing more. If the held
// transaction fails, or its lease has ended, nothing of the claim is
// recorded and its messages are due again (published again, as after a
// lapsed lease); a settlement sent after that records nothing and reports
// no error, as one under a token whose lease ran out.
//
// A claim with nothing to settle first asks, without a transaction, whether
// any message is due: an idle relay that is woken needlessly only reads.
//
// Claimed messages come back ordered by due time, then id (in key order,
// each key's run together, in insert order, see claimRuns); their
// AvailableAt is the time they were due when claimed, which the lease
// leaves as it was.
func (s *Store) SettleAndClaim(ctx context.Context, settle outboxdriver.Settlement, claim outboxdriver.Claim) ([]outbox.Message, error) {
	if claim.Limit < 0 {
		return nil, fmt.Errorf("outboxmysql: exchange on %s: claim limit %d is negative", s.Name(), claim.Limit)
	}
	if claim.Limit > 0 && claim.Lease <= 0 {
		return nil, fmt.Errorf("outboxmysql: exchange on %s: claim lease %v must be positive", s.Name(), claim.Lease)
	}
	fail := func(err error) error {
		return fmt.Errorf("outboxmysql: exchange on %s (settle %d published, %d retried, %d dead, %d released; claim %d): %w",
			s.Name(), len(settle.Published), len(settle.Retry), len(settle.Dead), len(settle.Release), claim.Limit, err)
	}
	var conn *heldConn // a held claim's, for the next one
	if prev := allHeldClaims.take(settle.Token); prev != nil {
		// Whichever store made it, as a lease written into the rows
		// would be settled by any store of the table.
		if err := s.settleHeld(ctx, prev, settle); err != nil {
			return nil, fail(err)
		}
		if claim.Limit == 0 || !s.set.held {
			prev.conn.close()
			return s.exchangeLeased(ctx, outboxdriver.Settlement{}, claim, fail)
		}
		conn, settle = prev.conn, outboxdriver.Settlement{}
	}
	if s.set.held {
		return s.exchangeHeld(ctx, conn, settle, claim, fail)
	}
	return s.exchangeLeased(ctx, settle, claim, fail)
}

// exchangeLeased is SettleAndClaim for claims leased by their columns.
func (s *Store) exchangeLeased(ctx context.Context, settle outboxdriver.Settlement, claim outboxdriver.Claim, fail func(error) error) ([]outbox.Message, error) {
	if settle.Empty() {
		if claim.Limit == 0 {
			return nil, nil
		}
		anyDue := s.stmts.anyDue
		if s.set.orderByKey {
			anyDue = s.kstmts.anyDue
		}
		var due bool
		if err := s.db.QueryRowContext(ctx, anyDue).Scan(&due); err != nil {
			return nil, fail(err)
		}
		if !due {
			return nil, nil
		}
	}
	var msgs []outbox.Message
	err := s.inTx(ctx, func(ctx context.Context, tx *sql.Tx) (err error) {
		msgs = nil
		if err := s.settle(ctx, tx, settle); err != nil {
			return err
		}
		if claim.Limit == 0 {
			return nil
		}
		msgs, err = s.claim(ctx, tx, claim)
		return err
	})
	if err != nil {
		return nil, fail(err)
	}
	return msgs, nil
}

// claim reads and leases up to claim.Limit due messages in tx.
func (s *Store) claim(ctx context.Context, tx *sql.Tx, claim outboxdriver.Claim) ([]outbox.Message, error) {
	var (
		msgs        []outbox.Message
		undecodable []outboxdriver.Failure
		err         error
	)
	if s.set.orderByKey {
		msgs, undecodable, err = s.claimRuns(ctx, tx, claim.Limit)
	} else {
		var rows *sql.Rows
		if rows, err = tx.QueryContext(ctx, s.stmts.claimSelect, claim.Limit); err == nil {
			msgs, undecodable, err = collectMessages(rows, claim.Limit)
		}
	}
	if err != nil || len(msgs) == 0 {
		return nil, err
	}
	claimed := make([]uuid.UUID, len(msgs))
	for i := range msgs {
		claimed[i] = msgs[i].ID
	}
	args := append([]any{micros(claim.Lease), claim.Token[:]}, idArgs(claimed)...)
	res, err := tx.ExecContext(ctx, idList(s.stmts.claimUpdate, len(claimed)), args...)
	if err != nil {
		return nil, err
	}
	// Each row gets a new token, so each counts as changed even where the
	// driver reports changed rather than matched rows.
	if n, err := res.RowsAffected(); err != nil || n != int64(len(msgs)) {
		return nil, fmt.Errorf("leased %d of the %d messages read (%v); nothing claimed", n, len(msgs), err)
	}
	if len(undecodable) == 0 {
		return msgs, nil
	}
	// No publisher could send these rows and retrying cannot change them:
	// they go to the dead letters with the reason, in the same
	// transaction, instead of failing every claim that meets them.
	if s.set.deadHoldsKey {
		// In key order their keys' later messages wait behind them (spec
		// §8): handed back untried.
		var held []uuid.UUID
		msgs, held = outboxdriver.HoldBehindFailures(msgs, undecodable)
		if err := s.settle(ctx, tx, outboxdriver.Settlement{Token: claim.Token, Dead: undecodable, Release: held}); err != nil {
			return nil, err
		}
		return msgs, nil
	}
	if err := s.settle(ctx, tx, outboxdriver.Settlement{Token: claim.Token, Dead: undecodable}); err != nil {
		return nil, err
	}
	return dropFailed(msgs, undecodable), nil
}

// dropFailed returns msgs without those failed lists.
func dropFailed(msgs []outbox.Message, failed []outboxdriver.Failure) []outbox.Message {
	return slices.DeleteFunc(msgs, func(m outbox.Message) bool {
		return slices.ContainsFunc(failed, func(f outboxdriver.Failure) bool { return f.ID == m.ID })
	})
}

// settle runs one statement per non-empty outcome kind of st, in the
// settlement order of docs/design/key-order-claim.md §7, as the other
// stores do: published, release, retry and postponeHeld, dead. Each finds
// its rows by primary key and applies only to rows still leased to
// st.Token.
func (s *Store) settle(ctx context.Context, tx *sql.Tx, st outboxdriver.Settlement) error {
	return s.settleAs(ctx, tx, st, owner{token: st.Token[:]})
}

// owner is how a settlement's statements find the rows it may change: by
// their lease token, or, for a claim held in the settlement's transaction
// (Options.TransactionLeases), by the locks the claim took on them, so the
// statements leave the token out.
type owner struct {
	token []byte
	held  bool
}

// heldOwner leaves the token out of statements.
var heldOwner = owner{held: true}

// leaveOutToken takes the token's condition out of a statement.
var leaveOutToken = strings.NewReplacer("p.lease_token = ? AND ", "", "lease_token = ? AND ", "")

// sql returns stmt as the owner runs it.
func (o owner) sql(stmt string) string {
	if o.held {
		return leaveOutToken.Replace(stmt)
	}
	return stmt
}

// args returns the arguments of a statement that, but for the owner's
// token, are rest.
func (o owner) args(rest ...any) []any {
	if o.held {
		return rest
	}
	return append([]any{o.token}, rest...)
}

// settleAs is settle for the rows o owns. A held claim's rows need nothing
// to be released: they were never changed, and its commit frees them.
func (s *Store) settleAs(ctx context.Context, tx *sql.Tx, st outboxdriver.Settlement, o owner) error {
	if len(st.Published) > 0 {
		if err := s.countOvertaken(ctx, tx, o, st.Published); err != nil {
			return err
		}
		var err error
		switch {
		case st.KeepPublished:
			_, err = tx.ExecContext(ctx, o.sql(idList(s.stmts.settleKept, len(st.Published))), o.args(idArgs(st.Published)...)...)
		case o.held:
			_, err = tx.ExecContext(ctx, s.stmts.deleteByID, hexIDList(st.Published))
		default:
			_, err = tx.ExecContext(ctx, s.stmts.settlePublished, hexIDList(st.Published), o.token)
		}
		if err != nil {
			return err
		}
	}
	if len(st.Release) > 0 && !o.held {
		// Before postponeHeld, so that the rest of a retried head's run
		// is free when it moves (spec §7).
		if _, err := tx.ExecContext(ctx, idList(s.stmts.release, len(st.Release)), o.args(idArgs(st.Release)...)...); err != nil {
			return err
		}
	}
	if n := len(st.Retry); n > 0 {
		var retried []uuid.UUID
		if s.set.orderByKey {
			ids := make([]uuid.UUID, n)
			for i, r := range st.Retry {
				ids[i] = r.ID
			}
			var err error
			if retried, err = s.retriedHeads(ctx, tx, o, ids); err != nil {
				return err
			}
		}
		args := make([]any, 0, 7*n+1)
		for _, r := range st.Retry {
			args = append(args, r.ID[:], r.Counted())
		}
		for _, r := range st.Retry {
			args = append(args, r.ID[:], micros(r.Delay))
		}
		for _, r := range st.Retry {
			args = append(args, r.ID[:], sqlrow.StorableText(r.Error))
		}
		args = append(args, o.args()...)
		for _, r := range st.Retry {
			args = append(args, r.ID[:])
		}
		if _, err := tx.ExecContext(ctx, o.sql(retrySQL(s.set, n)), args...); err != nil {
			return err
		}
		if len(retried) > 0 {
			if err := s.postponeHeld(ctx, tx, retried); err != nil {
				return err
			}
		}
	}
	if n := len(st.Dead); n > 0 {
		args := make([]any, 0, 3*n+1)
		for _, d := range st.Dead {
			args = append(args, d.ID[:], sqlrow.StorableText(d.Error))
		}
		args = append(args, o.args()...)
		for _, d := range st.Dead {
			args = append(args, d.ID[:])
		}
		if _, err := tx.ExecContext(ctx, o.sql(deadSQL(s.set, n)), args...); err != nil {
			return err
		}
	}
	return nil
}

// Release ends token's leases on ids; the messages are due at once, in
// their old place in the queue, and no attempt is counted.
func (s *Store) Release(ctx context.Context, token uuid.UUID, ids []uuid.UUID) error {
	if len(ids) == 0 {
		return nil
	}
	if claim := allHeldClaims.take(token); claim != nil {
		return releaseHeld(claim, token, ids)
	}
	if s.set.held {
		if err := s.settleLeasedBesideHeld(ctx, outboxdriver.Settlement{Token: token, Release: ids}); err != nil {
			return fmt.Errorf("outboxmysql: release %d message(s) in %s: %w", len(ids), s.Name(), err)
		}
		return nil
	}
	_, err := s.execCount(ctx, idList(s.stmts.release, len(ids)), append([]any{token[:]}, idArgs(ids)...)...)
	if err != nil {
		return fmt.Errorf("outboxmysql: release %d message(s) in %s: %w", len(ids), s.Name(), err)
	}
	return nil
}

// NextDue returns how long until the earliest pending message is due by the
// database's clock, leased ones included (they are due when their lease
// ends). It is one read-only query on the leased index that locks nothing.
// In key order only a head is due: the query looks for one among the
// first KeyWindow due rows, and answers "due now" if that window is full
// (docs/design/key-order-claim.md §9).
func (s *Store) NextDue(ctx context.Context) (time.Duration, bool, error) {
	if s.set.held {
		return s.nextDueFree(ctx)
	}
	nextDue := s.stmts.nextDue
	if s.set.orderByKey {
		nextDue = s.kstmts.nextDue
	}
	var next sql.NullInt64
	if err := s.db.QueryRowContext(ctx, nextDue).Scan(&next); err != nil {
		return 0, false, fmt.Errorf("outboxmysql: find next due message in %s: %w", s.Name(), err)
	}
	if !next.Valid {
		return 0, false, nil
	}
	return time.Duration(next.Int64) * time.Microsecond, true, nil
}

// PurgePublished deletes up to limit published messages published more than
// olderThan ago by the database's clock, oldest first, with one DELETE.
//
// At most one caller does the work at a time, across processes: each takes
// the table's purge lock (GET_LOCK, without waiting) on a connection of its
// own, and one that finds it taken returns (0, nil) at once.
func (s *Store) PurgePublished(ctx context.Context, olderThan time.Duration, limit int) (int, error) {
	if limit <= 0 {
		return 0, fmt.Errorf("outboxmysql: purge published messages in %s: limit %d must be positive", s.Name(), limit)
	}
	if olderThan < 0 {
		return 0, fmt.Errorf("outboxmysql: purge published messages in %s: age %v must not be negative", s.Name(), olderThan)
	}
	if !s.purging.CompareAndSwap(false, true) {
		return 0, nil
	}
	defer s.purging.Store(false)
	n, err := s.purge(ctx, olderThan, limit)
	if err != nil {
		return 0, fmt.Errorf("outboxmysql: purge published messages in %s: %w", s.Name(), err)
	}
	return n, nil
}

func (s *Store) purge(ctx context.Context, olderThan time.Duration, limit int) (int, error) {
	c, err := s.db.Conn(ctx)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	name := lockName("purge")
	var got sql.NullInt64
	if err := c.QueryRowContext(ctx, `SELECT GET_LOCK(`+name+`, 0)`, s.set.table).Scan(&got); err != nil {
		return 0, err
	}
	if got.Int64 != 1 {
		return 0, nil
	}
	// Closing a connection whose release failed ends its session, which
	// releases the lock too.
	defer func() { _, _ = c.ExecContext(context.WithoutCancel(ctx), `DO RELEASE_LOCK(`+name+`)`, s.set.table) }()
	var n int64
	err = retryTx(ctx, func() error {
		tx, err := c.BeginTx(ctx, readCommitted)
		if err != nil {
			return err
		}
		res, err := tx.ExecContext(ctx, s.stmts.purge, micros(olderThan), limit)
		if err == nil {
			n, err = res.RowsAffected()
		}
		if err != nil {
			_ = tx.Rollback()
			return err
		}
		return tx.Commit()
	})
	return int(n), err
}

// execCount runs one statement in its own READ COMMITTED transaction and
// returns the rows it changed.
func (s *Store) execCount(ctx context.Context, query string, args ...any) (int, error) {
	var n int64
	err := s.inTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, query, args...)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	return int(n), err
}
