package outboxpg

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/outboxdriver"
)

// openClaims are the open claims of a Store with TransactionLeases: each
// claim's transaction deleted its rows and stays open, on a connection of
// its own, until the exchange that settles the claim commits it. The rows
// are gone for nobody else until then: other transactions still see them,
// pending, and skip them because they are locked (SKIP LOCKED), and in key
// order an open claim's head still holds back the rest of its key. Whoever takes a
// claim out of the map owns its connection; a claim never settled is
// rolled back when its lease ends: its connection is closed, and PostgreSQL
// rolls the transaction back (as it does by itself, through
// idle_in_transaction_session_timeout, or when the relay's process dies).
//
// The claims of every Store of the process are kept together, by token, so
// that any Store of the table settles or releases a claim, whichever one
// made it, as it could a lease written into the rows.
type openClaims struct {
	mu     sync.Mutex
	claims map[uuid.UUID]*openClaim
}

// allOpenClaims are the open claims of every Store in the process.
var allOpenClaims openClaims

// openClaim is one open claim.
type openClaim struct {
	store *Store // the claim's, whose statements put its rows back
	conn  *openClaimConn
	// rows are the claim's rows as they were stored, to put back those
	// that are not published.
	rows     map[uuid.UUID]storedRow
	deadline time.Time   // the end of the lease
	expiry   *time.Timer // rolls the claim back at deadline
}

// openClaimConn is the connection of an open claim, and the place it takes
// among its pool's openClaimPlaces, given back with it.
type openClaimConn struct {
	*pgxpool.Conn
	place chan struct{}
}

// Release returns the connection to its pool (which closes it if a
// transaction is left open, rolling it back) and its place.
func (c *openClaimConn) Release() {
	c.Conn.Release()
	<-c.place
}

// openClaimPlaces bounds the open claims on each pool to half its
// connections (at least one). The other half is left to what else
// runs on the pool: the relay's probes and leased claims, writers, and
// publishers that run transactions of their own on it (in-process handlers
// with an inbox, outboxevents.Dispatcher), which each worker's batch needs
// while its claim holds a connection. A claim that finds no place is leased
// by its columns instead (slower, never stuck): with every connection taken
// by open claims, such handlers would wait out their deadlines until the
// messages were dead letters (TestTransactionLeasesLeaveConnectionsForHandlersOnTheSamePool).
var openClaimPlaces struct {
	mu     sync.Mutex
	byPool map[*pgxpool.Pool]*poolPlaces
}

// poolPlaces are a pool's places for open claims, and whether the warning
// that they ran out was logged: once per pool, not per table (a relay of
// many tables shares one pool among them).
type poolPlaces struct {
	places chan struct{}
	warned atomic.Bool
}

// openClaimPlacesOf returns pool's places, made on first use.
func openClaimPlacesOf(pool *pgxpool.Pool) *poolPlaces {
	openClaimPlaces.mu.Lock()
	defer openClaimPlaces.mu.Unlock()
	if openClaimPlaces.byPool == nil {
		openClaimPlaces.byPool = map[*pgxpool.Pool]*poolPlaces{}
	}
	p, ok := openClaimPlaces.byPool[pool]
	if !ok {
		p = &poolPlaces{places: make(chan struct{}, max(1, pool.Config().MaxConns/2))}
		openClaimPlaces.byPool[pool] = p
	}
	return p
}

// storedRow is a claimed row as it was stored.
type storedRow struct {
	msg     outbox.Message
	headers []byte // as stored; nil for NULL
	seq     int64
	// overtaken is the row's count of the messages that overtook it, read
	// only by a store that skips dead messages in key order (0 otherwise),
	// so that a message retried by force keeps it when put back.
	overtaken int32
}

// put keeps claim under token until it is taken or its lease ends.
func (h *openClaims) put(token uuid.UUID, claim *openClaim) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.claims == nil {
		h.claims = map[uuid.UUID]*openClaim{}
	}
	if old := h.claims[token]; old != nil && old != claim {
		// A token claimed twice: the first claim would be out of reach.
		old.expiry.Stop()
		old.conn.Release()
	}
	h.claims[token] = claim
	claim.expiry = time.AfterFunc(time.Until(claim.deadline), func() {
		if h.remove(token, claim) {
			claim.conn.Release() // in a transaction, so the pool closes it
		}
	})
}

// remove removes token's claim if it is claim, and reports whether it was.
func (h *openClaims) remove(token uuid.UUID, claim *openClaim) bool {
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
func (h *openClaims) take(token uuid.UUID) *openClaim {
	h.mu.Lock()
	claim := h.claims[token]
	delete(h.claims, token)
	h.mu.Unlock()
	if claim == nil {
		return nil
	}
	claim.expiry.Stop()
	if time.Now().After(claim.deadline) {
		claim.conn.Release()
		return nil
	}
	return claim
}

// rollBack rolls back every claim store holds: their messages are due
// again.
func (h *openClaims) rollBack(store *Store) {
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
			claim.conn.Release()
		}
	}
}

// exchangeOpen is SettleAndClaim with TransactionLeases: one round trip
// puts back the settled claim's unpublished rows, commits its transaction,
// and opens the next claim's on the same connection.
func (s *Store) exchangeOpen(ctx context.Context, settle outboxdriver.Settlement, claim outboxdriver.Claim) ([]outbox.Message, error) {
	prev := allOpenClaims.take(settle.Token)
	var conn *openClaimConn
	switch {
	case prev != nil:
		conn = prev.conn
	case claim.Limit > 0:
		p := openClaimPlacesOf(s.pool)
		select {
		case p.places <- struct{}{}:
			conn = &openClaimConn{place: p.places}
		default:
			s.warnNoPlaceForOpenClaim(p)
			return s.exchangeLeased(ctx, settle, claim, s.leasedClaim)
		}
	}
	if prev == nil && !settle.Empty() {
		// Not an open claim: leased by its columns (ClaimIDs),
		// or its transaction ended, rolled back, and the outcomes find
		// nothing leased to the token.
		if _, err := s.exchangeLeased(ctx, settle, outboxdriver.Claim{}, ""); err != nil {
			if conn != nil {
				<-conn.place
			}
			return nil, err
		}
	}
	if prev == nil && claim.Limit == 0 {
		return nil, nil
	}
	if conn.Conn == nil {
		var err error
		if conn.Conn, err = s.pool.Acquire(ctx); err != nil {
			<-conn.place
			return nil, exchangeError(s.Name(), settle, claim, err)
		}
	}
	b := &pgx.Batch{}
	if prev != nil {
		queuePutBack(b, prev, settle, true)
		b.Queue(`COMMIT`)
	}
	if claim.Limit > 0 {
		b.Queue(`BEGIN`)
		// The lease: a relay that stops talking to the database (hung,
		// or cut off without its connection closing) loses the claim when
		// the lease ends, as a leased claim would.
		b.Queue(`SELECT set_config('idle_in_transaction_session_timeout', $1, true)`, idleTimeout(claim.Lease))
		if s.opts.OrderByKey {
			b.Queue(genericPlans) // see exchangeLeased
		}
		b.Queue(s.stmts.claim, claim.Limit)
	}
	claimed := time.Now()
	br := conn.SendBatch(ctx, b)
	settles := b.Len()
	if claim.Limit > 0 {
		settles-- // the claim, read last
	}
	res, err := s.readSettleAndClaim(br, settles, claim.Limit)
	if cerr := br.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil {
		conn.Release() // closed if a transaction is left open: it rolls back
		return nil, exchangeError(s.Name(), settle, claim, err)
	}
	open := &openClaim{store: s, conn: conn, rows: res.stored, deadline: claimed.Add(claim.Lease)}
	if len(res.undecodable) > 0 {
		// As exchangeLeased does: dead letters, within the claim.
		if err := putBackNow(ctx, open, outboxdriver.Settlement{Dead: res.undecodable, Release: res.held}); err != nil {
			s.logger().Error("outboxpg: dead-lettering messages whose stored row cannot be decoded failed; the claim is rolled back and they are tried again (check the database's log, and the rows' headers column)",
				slog.String("table", s.Name()), slog.Int("messages", len(res.undecodable)), slog.String("first_message_id", res.undecodable[0].ID.String()), slog.Any("error", err))
			conn.Release()
			return nil, nil
		}
	}
	if len(res.msgs) == 0 {
		if claim.Limit > 0 {
			if _, err := conn.Exec(ctx, `COMMIT`); err != nil {
				conn.Release()
				return nil, exchangeError(s.Name(), settle, claim, err)
			}
		}
		conn.Release()
		return nil, nil
	}
	allOpenClaims.put(claim.Token, open)
	return res.msgs, nil
}

// releaseOpen is Release for an open claim: rows go back unchanged; once
// none is left, the transaction rolls back, which puts back every row
// (those put back before too) as it was.
func releaseOpen(ctx context.Context, claim *openClaim, token uuid.UUID, ids []uuid.UUID) error {
	left := len(claim.rows)
	for _, id := range ids {
		if _, ok := claim.rows[id]; ok {
			left--
		}
	}
	if left == 0 {
		_, err := claim.conn.Exec(ctx, `ROLLBACK`)
		claim.conn.Release()
		return err
	}
	if err := putBackNow(ctx, claim, outboxdriver.Settlement{Release: ids}); err != nil {
		claim.conn.Release() // rolls back: every row is due again
		return err
	}
	allOpenClaims.put(token, claim)
	return nil
}

// putBackNow puts back, within claim's transaction, the rows settle
// retries, releases or dead-letters, which the claim then no longer holds.
func putBackNow(ctx context.Context, claim *openClaim, settle outboxdriver.Settlement) error {
	b := &pgx.Batch{}
	queuePutBack(b, claim, settle, false)
	if err := claim.conn.SendBatch(ctx, b).Close(); err != nil {
		return err
	}
	for _, id := range settle.Release {
		delete(claim.rows, id)
	}
	for _, r := range settle.Retry {
		delete(claim.rows, r.ID)
	}
	for _, d := range settle.Dead {
		delete(claim.rows, d.ID)
	}
	return nil
}

// queuePutBack queues the statements that put back rows of claim: those
// settle retries, releases or dead-letters, and published ones kept for
// retention; when the transaction is to commit (final), every row that
// settle does not list goes back too, unchanged, so that no message is
// lost to a settlement that leaves some out. In key order, retried heads
// then take the rest of their keys back with them (postponeHeld), after
// every row is back: the settlement order of spec §7
// (docs/design/key-order-claim.md).
func queuePutBack(b *pgx.Batch, claim *openClaim, settle outboxdriver.Settlement, final bool) {
	var p putBackArgs
	listed := make(map[uuid.UUID]bool, settle.Len())
	for _, id := range settle.Published {
		listed[id] = true
		if row, ok := claim.rows[id]; ok && settle.KeepPublished {
			p.add(claim.rows, id, outboxdriver.StatusPublished, 0, row.msg.LastError, -1)
		}
	}
	retried := make([]pgtype.UUID, 0, len(settle.Retry))
	for _, r := range settle.Retry {
		listed[r.ID] = true
		if p.add(claim.rows, r.ID, outboxdriver.StatusPending, r.Counted(), r.Error, micros(max(r.Delay, 0))) {
			retried = append(retried, pgUUID(r.ID))
		}
	}
	for _, d := range settle.Dead {
		listed[d.ID] = true
		p.add(claim.rows, d.ID, outboxdriver.StatusDead, 1, d.Error, -1)
	}
	released := settle.Release
	if final {
		released = nil
		for id := range claim.rows {
			if !listed[id] {
				released = append(released, id)
			}
		}
	}
	for _, id := range released {
		if row, ok := claim.rows[id]; ok && !listed[id] {
			p.add(claim.rows, id, outboxdriver.StatusPending, 0, row.msg.LastError, -1)
		}
	}
	if len(p.ids) == 0 {
		return
	}
	b.Queue(claim.store.stmts.putBack, p.ids, p.topics, p.keys, p.payloads, p.headers, p.createdAts, p.availableAts,
		p.attempts, p.lastErrors, p.statuses, p.seqs, p.delays, p.overtaken)
	if claim.store.opts.OrderByKey && len(retried) > 0 {
		b.Queue(claim.store.stmts.postponeHeld, retried)
	}
}

// putBackArgs are the arguments of statements.putBack, a column each.
type putBackArgs struct {
	ids                      []pgtype.UUID
	topics, keys, statuses   []string
	payloads                 [][]byte
	headers, lastErrors      []pgtype.Text
	createdAts, availableAts []time.Time
	attempts, overtaken      []int32
	seqs, delays             []int64
}

// add appends the row of id, if the claim holds it, with its outcome:
// status, attempts to add, error (empty: NULL) and delay in microseconds
// (-1 keeps its due time). It reports whether the claim has the row.
func (p *putBackArgs) add(rows map[uuid.UUID]storedRow, id uuid.UUID, status outboxdriver.Status, attempts int32, lastError string, delay int64) bool {
	row, ok := rows[id]
	if !ok {
		return false
	}
	m := &row.msg
	p.ids = append(p.ids, pgUUID(id))
	p.topics = append(p.topics, m.Topic)
	p.keys = append(p.keys, m.Key)
	p.payloads = append(p.payloads, m.Payload)
	p.headers = append(p.headers, pgtype.Text{String: string(row.headers), Valid: row.headers != nil})
	p.createdAts = append(p.createdAts, m.CreatedAt)
	p.availableAts = append(p.availableAts, m.AvailableAt)
	p.attempts = append(p.attempts, int32(m.Attempts)+attempts)
	p.lastErrors = append(p.lastErrors, pgtype.Text{String: lastError, Valid: lastError != ""})
	p.statuses = append(p.statuses, string(status))
	p.seqs = append(p.seqs, row.seq)
	p.delays = append(p.delays, delay)
	p.overtaken = append(p.overtaken, row.overtaken)
	return true
}

// idleTimeout is idle_in_transaction_session_timeout for a lease: whole
// milliseconds, rounded up, within the setting's range.
func idleTimeout(lease time.Duration) string {
	ms := (lease + time.Millisecond - 1) / time.Millisecond
	return strconv.FormatInt(int64(min(max(ms, 1), 1<<31-1)), 10)
}

// exchangeError describes a failed exchange.
func exchangeError(table string, settle outboxdriver.Settlement, claim outboxdriver.Claim, err error) error {
	if tableMissing(table, err) {
		// The table is gone (dropped, or renamed away): a relay stopping
		// need not try to record its outcomes until their lease ends.
		err = fmt.Errorf("%w: %w", outboxdriver.ErrNotMigrated, err)
	}
	return fmt.Errorf("outboxpg: exchange on %s (settle %d published, %d retried, %d dead, %d released; claim %d): %w",
		table, len(settle.Published), len(settle.Retry), len(settle.Dead), len(settle.Release), claim.Limit, err)
}

// tableMissing reports whether err says that table ("schema.table") itself
// does not exist: an undefined_table error naming it, raised by the
// statement rather than inside a function (a trigger writing to another
// table that is missing leaves the outbox table and its rows in place).
func tableMissing(table string, err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "42P01" && pgErr.Where == "" &&
		strings.Contains(pgErr.Message, `"`+table+`"`)
}
