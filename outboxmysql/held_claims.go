package outboxmysql

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/outboxdriver"
)

// heldClaims are the claims of Stores with TransactionLeases: each
// claim's transaction locked its rows (FOR UPDATE) and stays open, on a
// connection of its own, until the exchange that settles the claim records
// the outcomes and commits it. The rows are not changed until then: other
// claims pass over them because they are locked (SKIP LOCKED), and reads
// that lock nothing see them pending. Whoever takes a claim out of the map
// owns its connection. A claim never settled is rolled back when its lease
// ends: its transaction's context ends then, and database/sql rolls it
// back (and the expiry timer gives the connection back); so does the
// server when the relay's process dies (the connection closes) or stops
// talking to it (wait_timeout, set to the lease on the claim's
// connection).
//
// A claim's locking read of the pending index keeps, on MariaDB, its lock
// on the index entry of a row it passed over because another transaction
// had locked the row by its primary key (a claim by id, an operator's
// UPDATE by id), of a row it read and left because its lease by columns
// was in force, and of the entry just past the due rows it read: until
// the claim ends, other claims and NextDue pass over such a row too (once
// it is due), and a change of its due time or status waits. Such waits
// last one publish at most; the claim's own worker takes the row at its
// next exchange, or a relay's poll does.
//
// The claims of every Store of the process are kept together, by token, so
// that any Store of the table settles or releases a claim, whichever one
// made it, as it could a lease written into the rows.
type heldClaims struct {
	mu     sync.Mutex
	claims map[uuid.UUID]*heldClaim
}

// allHeldClaims are the held claims of every Store in the process.
var allHeldClaims heldClaims

// heldClaim is one claim held in a transaction.
type heldClaim struct {
	store    *Store
	conn     *heldConn
	tx       *sql.Tx
	end      context.CancelFunc // ends the transaction's context
	ids      map[uuid.UUID]bool // the rows the claim holds and has not released
	deadline time.Time          // the end of the lease
	expiry   *time.Timer        // gives the connection back at deadline
}

// heldConn is the connection of held claims, one after the other, and the
// place it takes among its *sql.DB's heldPlaces, given back with it.
type heldConn struct {
	*sql.Conn
	place chan struct{} // nil when the pool is unbounded
}

// close gives the connection back to its pool with the server's idle
// timeout restored, or closes it if that fails (then the server ends its
// session, and with it any transaction left open), and gives back its
// place.
func (c *heldConn) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := c.ExecContext(ctx, `SET SESSION wait_timeout = @@GLOBAL.wait_timeout`); err != nil {
		_ = c.Raw(func(any) error { return driver.ErrBadConn })
	}
	_ = c.Close()
	if c.place != nil {
		<-c.place
	}
}

// heldPlaces bounds the held claims on each *sql.DB to half its
// SetMaxOpenConns (at least one), leaving the other half to what else runs
// on it: the relay's probes, writers, and publishers that run transactions
// of their own on it (in-process handlers with an inbox), which each
// worker's batch needs while its claim holds a connection. A claim that
// finds no place is leased by its columns instead (slower, never stuck).
// An unbounded *sql.DB (the default) puts no bound.
var heldPlaces struct {
	mu   sync.Mutex
	byDB map[*sql.DB]chan struct{}
}

// heldPlacesOf returns db's places, made on first use, or nil if db is
// unbounded.
func heldPlacesOf(db *sql.DB) chan struct{} {
	maxOpen := db.Stats().MaxOpenConnections
	if maxOpen <= 0 {
		return nil
	}
	heldPlaces.mu.Lock()
	defer heldPlaces.mu.Unlock()
	if heldPlaces.byDB == nil {
		heldPlaces.byDB = map[*sql.DB]chan struct{}{}
	}
	places, ok := heldPlaces.byDB[db]
	if !ok {
		places = make(chan struct{}, max(1, maxOpen/2))
		heldPlaces.byDB[db] = places
	}
	return places
}

// put keeps claim under token until it is taken or its lease ends.
func (h *heldClaims) put(token uuid.UUID, claim *heldClaim) {
	h.mu.Lock()
	if h.claims == nil {
		h.claims = map[uuid.UUID]*heldClaim{}
	}
	old := h.claims[token]
	h.claims[token] = claim
	claim.expiry = time.AfterFunc(time.Until(claim.deadline), func() {
		if h.remove(token, claim) {
			claim.rollBack()
		}
	})
	h.mu.Unlock()
	if old != nil && old != claim && old.expiry.Stop() {
		// A token claimed twice: the first claim would be out of reach.
		old.rollBack()
	}
}

// remove removes token's claim if it is claim, and reports whether it was.
func (h *heldClaims) remove(token uuid.UUID, claim *heldClaim) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.claims[token] != claim {
		return false
	}
	delete(h.claims, token)
	return true
}

// take removes token's claim and returns it, or nil if there is none or
// its lease ended (then it is rolled back).
func (h *heldClaims) take(token uuid.UUID) *heldClaim {
	h.mu.Lock()
	claim := h.claims[token]
	delete(h.claims, token)
	h.mu.Unlock()
	if claim == nil {
		return nil
	}
	claim.expiry.Stop()
	if !time.Now().Before(claim.deadline) {
		claim.rollBack()
		return nil
	}
	return claim
}

// rollBack ends the claim without recording anything: its rows are due
// again as they were. It gives the connection back.
func (c *heldClaim) rollBack() {
	_ = c.tx.Rollback()
	c.end()
	c.conn.close()
}

// commit records nothing more and commits the claim's transaction,
// keeping the connection for the next claim; on failure it gives the
// connection back.
func (c *heldClaim) commit() error {
	err := c.tx.Commit()
	c.end()
	if err != nil {
		c.conn.close()
	}
	return err
}

// only returns the part of st about rows the claim still holds, the rows
// its statements may change without a lease token.
func (c *heldClaim) only(st outboxdriver.Settlement) outboxdriver.Settlement {
	st.Published = keepHeld(st.Published, c.ids, func(id uuid.UUID) uuid.UUID { return id })
	st.Retry = keepHeld(st.Retry, c.ids, func(r outboxdriver.Retry) uuid.UUID { return r.ID })
	st.Dead = keepHeld(st.Dead, c.ids, func(f outboxdriver.Failure) uuid.UUID { return f.ID })
	st.Release = nil // unchanged rows, freed by the commit
	return st
}

// keepHeld returns the items of list whose ids are in held, in a new slice.
func keepHeld[T any](list []T, held map[uuid.UUID]bool, id func(T) uuid.UUID) []T {
	var kept []T
	for _, item := range list {
		if held[id(item)] {
			kept = append(kept, item)
		}
	}
	return kept
}

// settleHeld records settle, the settlement of the held claim prev, in
// its transaction and commits it, keeping its connection; on failure it
// rolls the claim back and gives the connection back.
func (s *Store) settleHeld(ctx context.Context, prev *heldClaim, settle outboxdriver.Settlement) error {
	if err := s.settleAs(ctx, prev.tx, prev.only(settle), heldOwner); err != nil {
		prev.rollBack()
		return err
	}
	return prev.commit()
}

// exchangeHeld is SettleAndClaim with TransactionLeases, after a held
// claim it settled: conn is that claim's connection (nil if there was
// none), for the next claim's transaction, which stays open. A settlement
// left (of a claim by ClaimIDs, or one whose lease ended) is recorded as
// a leased claim's.
func (s *Store) exchangeHeld(ctx context.Context, conn *heldConn, settle outboxdriver.Settlement, claim outboxdriver.Claim, fail func(error) error) ([]outbox.Message, error) {
	if !settle.Empty() {
		if err := s.settleLeasedBesideHeld(ctx, settle); err != nil {
			return nil, fail(err)
		}
	}
	if claim.Limit == 0 {
		return nil, nil
	}
	if conn == nil {
		var due bool
		// A locking read can lose a deadlock (waiting for a row that
		// another transaction deletes); reading again is safe.
		err := retryTx(ctx, func() error {
			err := s.db.QueryRowContext(ctx, s.stmts.anyDueFree).Scan(&due)
			if errors.Is(err, sql.ErrNoRows) {
				return nil
			}
			return err
		})
		if err != nil {
			return nil, fail(err)
		}
		if !due {
			return nil, nil
		}
		if conn, err = s.heldConn(ctx, claim.Lease); err != nil {
			return nil, fail(err)
		}
		if conn == nil {
			s.warnNoPlaceForHeldClaim()
			return s.exchangeLeased(ctx, outboxdriver.Settlement{}, claim, fail)
		}
	}
	held, msgs, err := s.claimHeld(ctx, conn, claim)
	if err != nil {
		conn.close()
		return nil, fail(err)
	}
	if held == nil {
		conn.close()
		return nil, nil
	}
	allHeldClaims.put(claim.Token, held)
	return msgs, nil
}

// settleLeasedBesideHeld records settle, a settlement of rows leased by
// their columns, beside claims held in transactions. It settles only the
// rows whose last committed version is leased to its token, found by a
// read that locks nothing: a settlement by primary key would otherwise wait
// for every listed row a held claim locks (InnoDB locks a row before it
// tests the rest of the WHERE clause), though such a row, never leased by
// the held claim, is another token's. A row leased to the token that a
// held claim took once the lease had ended is waited for, and then found
// no longer leased to it.
func (s *Store) settleLeasedBesideHeld(ctx context.Context, settle outboxdriver.Settlement) error {
	return s.inTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		ids := slices.Clone(settle.Published)
		ids = append(ids, settle.Release...)
		for _, r := range settle.Retry {
			ids = append(ids, r.ID)
		}
		for _, d := range settle.Dead {
			ids = append(ids, d.ID)
		}
		leased, err := queryIDs(ctx, tx, idList(s.stmts.leasedTo, len(ids)), append([]any{settle.Token[:]}, idArgs(ids)...)...)
		if err != nil {
			return err
		}
		mine := make(map[uuid.UUID]bool, len(leased))
		for _, id := range leased {
			mine[id] = true
		}
		release := keepHeld(settle.Release, mine, func(id uuid.UUID) uuid.UUID { return id })
		settle = (&heldClaim{ids: mine}).only(settle)
		settle.Release = release
		if settle.Empty() {
			return nil
		}
		return s.settle(ctx, tx, settle)
	})
}

// heldConn takes a connection of s.db for held claims, with the server's
// idle timeout set to the lease, or returns nil if every place for them is
// taken.
func (s *Store) heldConn(ctx context.Context, lease time.Duration) (*heldConn, error) {
	places := heldPlacesOf(s.db)
	if places != nil {
		select {
		case places <- struct{}{}:
		default:
			return nil, nil
		}
	}
	giveBack := func() {
		if places != nil {
			<-places
		}
	}
	c, err := s.db.Conn(ctx)
	if err != nil {
		giveBack()
		return nil, err
	}
	seconds := int64((lease + time.Second - 1) / time.Second)
	if _, err := c.ExecContext(ctx, `SET SESSION wait_timeout = ?`, min(max(seconds, 1), 31536000)); err != nil {
		_ = c.Close()
		giveBack()
		return nil, err
	}
	return &heldConn{Conn: c, place: places}, nil
}

// claimHeld opens a transaction on conn that locks up to claim.Limit due
// messages and stays open until claim.Lease has passed. It returns nil and
// commits if there were none. Rows that cannot be decoded are dead-lettered
// in the transaction, as leased claims do.
func (s *Store) claimHeld(ctx context.Context, conn *heldConn, claim outboxdriver.Claim) (*heldClaim, []outbox.Message, error) {
	deadline := time.Now().Add(claim.Lease)
	var (
		held *heldClaim
		msgs []outbox.Message
	)
	err := retryTx(ctx, func() error {
		held, msgs = nil, nil
		// The transaction lives until the lease ends, whatever ctx does:
		// database/sql rolls it back when its context ends.
		txCtx, end := context.WithDeadline(context.WithoutCancel(ctx), deadline)
		tx, err := conn.BeginTx(txCtx, readCommitted)
		if err != nil {
			end()
			return err
		}
		c := &heldClaim{store: s, conn: conn, tx: tx, end: end, deadline: deadline}
		fail := func(err error) error {
			_ = tx.Rollback()
			end()
			return err
		}
		// The locking read of the pending index, as a leased claim's: the
		// claim then holds its rows' entries in it too, so no other
		// claim's locking read holds one that the claim's settlement
		// must delete.
		rows, err := tx.QueryContext(ctx, s.stmts.claimSelect, claim.Limit)
		if err != nil {
			return fail(err)
		}
		got, undecodable, err := collectMessages(rows, claim.Limit)
		if err != nil {
			return fail(err)
		}
		c.ids = make(map[uuid.UUID]bool, len(got))
		for _, m := range got {
			c.ids[m.ID] = true
		}
		if len(undecodable) > 0 {
			if err := s.settleAs(ctx, tx, outboxdriver.Settlement{Dead: undecodable}, heldOwner); err != nil {
				return fail(err)
			}
			got = dropFailed(got, undecodable)
			for _, f := range undecodable {
				delete(c.ids, f.ID)
			}
		}
		if len(got) == 0 {
			err := tx.Commit()
			end()
			return err
		}
		held, msgs = c, got
		return nil
	})
	return held, msgs, err
}

// rollBackHeld rolls back every held claim of store: their messages are
// due again.
func (h *heldClaims) rollBackHeld(store *Store) {
	h.mu.Lock()
	var tokens []uuid.UUID
	for token, c := range h.claims {
		if c.store == store {
			tokens = append(tokens, token)
		}
	}
	h.mu.Unlock()
	for _, token := range tokens {
		if claim := h.take(token); claim != nil {
			claim.rollBack()
		}
	}
}

// releaseHeld is Release for a held claim: the rows are unchanged, so
// releasing them is forgetting them until the claim ends, which frees
// them; a claim left with none ends now.
func releaseHeld(claim *heldClaim, token uuid.UUID, ids []uuid.UUID) error {
	for _, id := range ids {
		delete(claim.ids, id)
	}
	if len(claim.ids) == 0 {
		claim.rollBack()
		return nil
	}
	allHeldClaims.put(token, claim)
	return nil
}

// warnNoPlaceForHeldClaim logs, once per Store, that a held claim found no
// place and was leased by its columns.
func (s *Store) warnNoPlaceForHeldClaim() {
	s.warnNoPlace.Do(func() {
		s.set.logger.Warn("outboxmysql: transaction leases: the pool has no place to hold another claim's transaction open, so this claim is leased by its columns instead (slower, safe). Claims hold at most half of the pool's connections (SetMaxOpenConns), leaving the rest to handlers, writers and probes: set it to at least twice the relay's Workers",
			slog.String("table", s.Name()), slog.Int("max_open_connections", s.db.Stats().MaxOpenConnections))
	})
}

// errHeldWithKeyOrder is New's error for TransactionLeases with OrderByKey.
var errHeldWithKeyOrder = &outbox.ConfigError{
	Field: "outboxmysql.Options.TransactionLeases",
	Value: "true with OrderByKey",
	Fix:   "claims in key order are leased by their columns on MySQL for now: leave TransactionLeases false with OrderByKey",
}

// nextDueFree is NextDue with TransactionLeases: the earliest due time of
// the rows no held claim locks, the unleased ones' and the leased ones'.
func (s *Store) nextDueFree(ctx context.Context) (wait time.Duration, found bool, err error) {
	// Its locking part can lose a deadlock; reading again is safe.
	err = retryTx(ctx, func() error {
		wait, found = 0, false
		rows, err := s.db.QueryContext(ctx, s.stmts.nextDueFree)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var us int64
			if err := rows.Scan(&us); err != nil {
				return err
			}
			if d := time.Duration(us) * time.Microsecond; !found || d < wait {
				wait, found = d, true
			}
		}
		return rows.Err()
	})
	if err != nil {
		return 0, false, fmt.Errorf("outboxmysql: find next due message in %s: %w", s.Name(), err)
	}
	return wait, found, nil
}

// HoldsClaims reports whether the store's claims hold their rows in a
// transaction (Options.TransactionLeases).
func (s *Store) HoldsClaims() bool { return s.set.held }
