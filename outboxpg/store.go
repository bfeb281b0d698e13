package outboxpg

import (
	"bytes"
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/sqlrow"
	"github.com/go-outbox/outbox/outboxdriver"
)

// Store is an outbox table in PostgreSQL, used through a pgx connection pool.
// It is safe for concurrent use. Create the table with a Migrator first.
type Store struct {
	ins   inserter
	names names
	opts  Options
	pool  *pgxpool.Pool
	stmts statements

	addresses addressBook // where claimed rows are, to delete them by address

	// leasedClaim, with TransactionLeases, is the claim that writes a
	// lease instead, for when the pool has no place for another open
	// claim (see openClaimPlaces).
	leasedClaim string
}

// The interfaces Store implements.
var (
	_ outboxdriver.Store           = (*Store)(nil)
	_ outboxdriver.Admin           = (*Store)(nil)
	_ outboxdriver.WriteListener   = (*Store)(nil)
	_ outboxdriver.KeyOrderClaimer = (*Store)(nil)
	_ outbox.Inserter[pgx.Tx]      = (*Store)(nil)
	_ outbox.TxRunner[pgx.Tx]      = (*Store)(nil)
	_ outbox.Inserter[*sql.Tx]     = (*SQLWriter)(nil)
	_ outbox.TxRunner[*sql.Tx]     = (*SQLWriter)(nil)
)

// New returns a Store for the table opts names. It validates opts and does not
// touch the database; run a Migrator to create the table.
func New(pool *pgxpool.Pool, opts Options) (*Store, error) {
	if pool == nil {
		return nil, &outbox.ConfigError{Field: "outboxpg.New pool", Value: "nil",
			Fix: "pass a pool from pgxpool.New(ctx, url)"}
	}
	n, err := opts.resolve()
	if err != nil {
		return nil, err
	}
	s := &Store{names: n, opts: opts, pool: pool, stmts: newStatements(n, opts)}
	if opts.TransactionLeases {
		s.leasedClaim = leasedClaimBesideOpen(n, opts)
	}
	s.ins = newInserter(n, &s.stmts, opts.Notify)
	return s, nil
}

func (s *Store) logger() *slog.Logger {
	if s.opts.Logger != nil {
		return s.opts.Logger
	}
	return slog.Default()
}

// ClaimsInKeyOrder reports whether the store's claims keep key order
// (Options.OrderByKey); see outboxdriver.KeyOrderClaimer.
func (s *Store) ClaimsInKeyOrder() bool { return s.opts.OrderByKey }

// Name returns "schema.table".
func (s *Store) Name() string { return s.ins.name }

// SettleAndClaim records settle and claims the next batch in one round trip and one
// transaction: the statements go out as one pgx.Batch, which pgx sends as a
// pipeline closed by a single Sync, and PostgreSQL runs everything before a
// Sync as one implicit transaction. If any statement fails, nothing is
// recorded and nothing is claimed. (pgx prepares a statement the first time a
// connection sees it, which costs one extra round trip per connection, once.)
//
// One statement is sent per non-empty outcome kind, then the claim if
// claim.Limit > 0. Claimed messages come back ordered by due time, then id;
// in key order, each key's run comes together, in insert order. Their
// AvailableAt is the time they were due (the lease is kept apart, in
// locked_until, so available_at keeps their place in the queue).
func (s *Store) SettleAndClaim(ctx context.Context, settle outboxdriver.Settlement, claim outboxdriver.Claim) ([]outbox.Message, error) {
	if claim.Limit < 0 {
		return nil, fmt.Errorf("outboxpg: exchange on %s: claim limit %d is negative", s.Name(), claim.Limit)
	}
	if claim.Limit > 0 && claim.Lease <= 0 {
		return nil, fmt.Errorf("outboxpg: exchange on %s: claim lease %v must be positive", s.Name(), claim.Lease)
	}
	if s.opts.TransactionLeases {
		if err := s.countOvertakenOpen(ctx, settle); err != nil {
			return nil, exchangeError(s.Name(), settle, claim, err)
		}
		return s.exchangeOpen(ctx, settle, claim)
	}
	return s.exchangeLeased(ctx, settle, claim, "")
}

// warnNoPlaceForOpenClaim tells, once per pool, that the pool p is too
// small for an open claim per worker.
func (s *Store) warnNoPlaceForOpenClaim(p *poolPlaces) {
	if p.warned.Swap(true) {
		return
	}
	s.logger().Warn("outboxpg: transaction leases: the pool has no place to hold another claim's transaction open, so this claim is leased by its columns instead (slower, safe). Claims hold at most half of the pool's connections, leaving the rest to handlers, writers and probes: set the pool's MaxConns (pool_max_conns in the URL) to at least twice the relay's Workers",
		slog.String("table", s.Name()), slog.Int("max_conns", int(s.pool.Config().MaxConns)))
}

// exchangeLeased is SettleAndClaim with leases written into the rows.
// claimSQL is the claim statement, "" for the store's own.
func (s *Store) exchangeLeased(ctx context.Context, settle outboxdriver.Settlement, claim outboxdriver.Claim, claimSQL string) ([]outbox.Message, error) {
	if claimSQL == "" {
		claimSQL = s.stmts.claim
	}
	b := &pgx.Batch{}
	if len(settle.Published) > 0 {
		if settle.KeepPublished {
			b.Queue(s.stmts.settleKept, pgUUIDs(settle.Published), pgUUID(settle.Token))
		} else {
			s.queueDeletePublished(b, settle.Token, settle.Published)
		}
	}
	if len(settle.Release) > 0 {
		// Before postponeHeld, which moves released rows but no leased one
		// (the settlement order, spec §7 in docs/design/key-order-claim.md).
		b.Queue(s.stmts.release, pgUUIDs(settle.Release), pgUUID(settle.Token))
	}
	if len(settle.Retry) > 0 {
		ids := make([]pgtype.UUID, len(settle.Retry))
		delays := make([]int64, len(settle.Retry))
		errs := make([]string, len(settle.Retry))
		counted := make([]int32, len(settle.Retry))
		for i, r := range settle.Retry {
			ids[i], delays[i], errs[i], counted[i] = pgUUID(r.ID), micros(max(r.Delay, 0)), r.Error, r.Counted()
		}
		retry := s.stmts.settleRetry
		if s.opts.OrderByKey {
			retry = s.stmts.settleRetryKeyOrder
		}
		b.Queue(retry, ids, delays, errs, counted, pgUUID(settle.Token))
	}
	if len(settle.Dead) > 0 {
		b.Queue(s.stmts.settleDead, deadArgs(settle.Dead, settle.Token)...)
	}
	settles := b.Len()
	if claim.Limit > 0 {
		if s.opts.OrderByKey {
			// The claim in key order is a long statement whose custom
			// plans (PostgreSQL's choice for the first five executions
			// on each connection, and whenever they look cheaper) cost
			// more to make than the claim takes to run; its generic plan
			// suits every case (measured: docs/benchmarks.md). For this
			// transaction only.
			b.Queue(genericPlans)
			settles++
		}
		b.Queue(claimSQL, micros(claim.Lease), pgUUID(claim.Token), claim.Limit)
	}
	if b.Len() == 0 {
		return nil, nil
	}

	br := s.pool.SendBatch(ctx, b)
	res, err := s.readSettleAndClaim(br, settles, claim.Limit)
	if cerr := br.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil {
		return nil, exchangeError(s.Name(), settle, claim, err)
	}
	if !settle.Empty() {
		s.addresses.forget(settle.Token)
	}
	msgs, undecodable := res.msgs, res.undecodable
	s.addresses.remember(claim.Token, claim.Lease, res.filenode, res.addresses)
	if len(undecodable) > 0 {
		// No publisher could send these rows and retrying cannot change
		// them: they go to the dead letters with the reason, where an
		// operator sees them, instead of failing every claim that meets
		// them. If this fails, their lease runs out and the next claim
		// tries again; the rest of the batch is ours either way.
		if err := s.settleDeadNow(ctx, claim.Token, undecodable, res.held); err != nil {
			s.logger().Error("outboxpg: dead-lettering messages whose stored row cannot be decoded failed; they are claimed and tried again when their lease expires (check the database's log, and the rows' headers column)",
				slog.String("table", s.Name()), slog.Int("messages", len(undecodable)), slog.String("first_message_id", undecodable[0].ID.String()), slog.Any("error", err))
		}
	}
	return msgs, nil
}

// settleDeadNow dead-letters failed messages leased to token, outside a
// relay's exchange, and then hands back held (messages of their keys claimed
// behind them) untried. If the release fails, their lease runs out.
func (s *Store) settleDeadNow(ctx context.Context, token uuid.UUID, failed []outboxdriver.Failure, held []uuid.UUID) error {
	if _, err := s.pool.Exec(ctx, s.stmts.settleDead, deadArgs(failed, token)...); err != nil {
		return err
	}
	return s.Release(ctx, token, held)
}

// deadArgs are the arguments of statements.settleDead.
func deadArgs(failed []outboxdriver.Failure, token uuid.UUID) []any {
	ids := make([]pgtype.UUID, len(failed))
	errs := make([]string, len(failed))
	for i, f := range failed {
		ids[i], errs[i] = pgUUID(f.ID), f.Error
	}
	return []any{ids, errs, pgUUID(token)}
}

// exchangeResult is what readSettleAndClaim reads.
type exchangeResult struct {
	msgs        []outbox.Message       // claimed, headers decoded
	undecodable []outboxdriver.Failure // claimed, headers not decodable
	held        []uuid.UUID            // claimed behind an undecodable message of their key, to hand back
	addresses   map[uuid.UUID]pgtype.TID
	filenode    uint32
	stored      map[uuid.UUID]storedRow // the claimed rows as stored (TransactionLeases)
}

// readSettleAndClaim reads the results of SettleAndClaim's batch: the
// settles statements' outcomes, then the claimed messages and where they
// are, if the exchange claimed up to limit (> 0).
func (s *Store) readSettleAndClaim(br pgx.BatchResults, settles, limit int) (res exchangeResult, err error) {
	for range settles {
		if _, err := br.Exec(); err != nil {
			return res, err
		}
	}
	if limit <= 0 {
		return res, nil
	}
	rows, err := br.Query()
	if err != nil {
		return res, err
	}
	if s.opts.TransactionLeases {
		res.stored = make(map[uuid.UUID]storedRow, limit)
	} else {
		// Where each row is, for the delete by address; an open claim's
		// rows are deleted already.
		res.addresses = make(map[uuid.UUID]pgtype.TID, limit)
	}
	var seqs map[uuid.UUID]int64 // key order only
	if s.opts.OrderByKey {
		seqs = make(map[uuid.UUID]int64, limit)
	}
	var tid pgtype.TID
	var seq int64
	var overtaken int32
	extra := []any{&tid, &res.filenode, &seq}
	if s.opts.skipsDead() {
		extra = append(extra, &overtaken) // see buildStatements
	}
	sc := newMessageScanner(extra...)
	msgs, undecodable, err := sqlrow.Collect(rows, limit, func(rows pgx.Rows) (outbox.Message, error, error) {
		m, headers, headerErr, err := sc.scan(rows)
		if res.addresses != nil {
			res.addresses[m.ID] = tid
		}
		if seqs != nil {
			seqs[m.ID] = seq
		}
		if res.stored != nil {
			res.stored[m.ID] = storedRow{msg: m, headers: headers, seq: seq, overtaken: overtaken}
		}
		return m, headerErr, err
	})
	rows.Close()
	if err != nil {
		return res, err
	}
	res.undecodable = undecodable
	if s.opts.OrderByKey {
		sortRuns(msgs, seqs)
		if s.opts.deadHoldsKey() {
			// The undecodable go to the dead letters, so their keys'
			// later messages wait behind them (spec §8).
			res.msgs, res.held = outboxdriver.HoldBehindFailures(msgs, undecodable)
			return res, nil
		}
		res.msgs = withoutFailures(msgs, undecodable)
		return res, nil
	}
	res.msgs = withoutFailures(msgs, undecodable)
	sortByDue(res.msgs)
	return res, nil
}

// sortByDue orders a claim by due time, then id, as the claim took it from
// the pending index (its rows come back in no order). It sorts positions,
// not the messages themselves, which are large to swap.
func sortByDue(msgs []outbox.Message) {
	order := make([]int, len(msgs))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int {
		ma, mb := &msgs[a], &msgs[b]
		return cmp.Or(ma.AvailableAt.Compare(mb.AvailableAt), bytes.Compare(ma.ID[:], mb.ID[:]))
	})
	permute(msgs, order)
}

// sortRuns orders a claim in key order: each key's messages together, in
// insert order (seq), the keys by the due time of their first message, then
// by key; a message without a key is a key of its own. Each message's sort
// key is worked out once, not in every comparison.
func sortRuns(msgs []outbox.Message, seqs map[uuid.UUID]int64) {
	type sortKey struct {
		group    string
		firstDue time.Time
		seq      int64
	}
	keys := make([]sortKey, len(msgs))
	firstDue := map[string]time.Time{}
	for i, m := range msgs {
		g := m.Key
		if g == "" {
			g = m.ID.String()
		}
		keys[i] = sortKey{group: g, seq: seqs[m.ID]}
		if t, ok := firstDue[g]; !ok || m.AvailableAt.Before(t) {
			firstDue[g] = m.AvailableAt
		}
	}
	order := make([]int, len(msgs))
	for i := range order {
		order[i] = i
		keys[i].firstDue = firstDue[keys[i].group]
	}
	slices.SortFunc(order, func(a, b int) int {
		ka, kb := keys[a], keys[b]
		return cmp.Or(ka.firstDue.Compare(kb.firstDue), strings.Compare(ka.group, kb.group), cmp.Compare(ka.seq, kb.seq))
	})
	permute(msgs, order)
}

// permute puts msgs in order: msgs[order[0]] first, and so on.
func permute(msgs []outbox.Message, order []int) {
	sorted := make([]outbox.Message, len(msgs))
	for i, j := range order {
		sorted[i] = msgs[j]
	}
	copy(msgs, sorted)
}

// queueDeletePublished queues the delete of published messages: by address
// those whose address the claim left (see addressBook; those no longer
// there by id, in the same statement), by id the others.
func (s *Store) queueDeletePublished(b *pgx.Batch, token uuid.UUID, published []uuid.UUID) {
	tids, addressed, filenode, unknown := s.addresses.lookUp(token, published)
	if len(tids) > 0 {
		// In its generic plan: custom plans of the delete by address
		// (with the arrays as constants) scanned the whole table, 7 to
		// 46 ms for 1,000 rows against under 2 ms for the generic plan's
		// TID scan, and PostgreSQL may keep preferring them.
		b.Queue(genericPlans)
		b.Queue(s.stmts.deleteAt, tids, pgUUID(token), filenode, pgUUIDs(addressed), string(addressPairs(tids, addressed)))
		b.Queue(autoPlans)
	}
	if len(unknown) > 0 {
		b.Queue(s.stmts.settlePublished, pgUUIDs(unknown), pgUUID(token))
	}
}

// withoutFailures returns msgs less those listed in failed, reusing msgs.
func withoutFailures(msgs []outbox.Message, failed []outboxdriver.Failure) []outbox.Message {
	if len(failed) == 0 {
		return msgs
	}
	return slices.DeleteFunc(msgs, func(m outbox.Message) bool {
		return slices.ContainsFunc(failed, func(f outboxdriver.Failure) bool { return f.ID == m.ID })
	})
}

// pgUUID and pgUUIDs convert ids to a type pgx encodes in every query mode,
// the simple protocol (PgBouncer set-ups) included, where it cannot ask the
// server for the parameter types.
func pgUUID(id uuid.UUID) pgtype.UUID { return pgtype.UUID{Bytes: id, Valid: true} }

func pgUUIDs(ids []uuid.UUID) []pgtype.UUID {
	out := make([]pgtype.UUID, len(ids))
	for i, id := range ids {
		out[i] = pgUUID(id)
	}
	return out
}

// micros rounds d up to whole microseconds, the database's resolution, so
// leases and retry delays are never shorter than asked.
func micros(d time.Duration) int64 {
	return int64((d + time.Microsecond - 1) / time.Microsecond)
}

// Release ends token's leases on ids; the messages are due at once and no
// attempt is counted.
func (s *Store) Release(ctx context.Context, token uuid.UUID, ids []uuid.UUID) error {
	if len(ids) == 0 {
		return nil
	}
	if s.opts.TransactionLeases {
		if claim := allOpenClaims.take(token); claim != nil {
			if err := releaseOpen(ctx, claim, token, ids); err != nil {
				return fmt.Errorf("outboxpg: release %d message(s) in %s: %w", len(ids), s.Name(), err)
			}
			return nil
		}
	}
	if _, err := s.pool.Exec(ctx, s.stmts.release, pgUUIDs(ids), pgUUID(token)); err != nil {
		return fmt.Errorf("outboxpg: release %d message(s) in %s: %w", len(ids), s.Name(), err)
	}
	return nil
}

// NextDue returns how long until the earliest pending message is due, by the
// database's clock, leased ones included (they are due when their lease ends).
// It is one read-only query on the pending index: a due message stops it at
// once, and otherwise it reads only the messages in flight and the first
// message due later. In key order only the head of a key is due, and the
// probe looks for one among the first outboxdriver.KeyWindow due messages
// only: if all of them wait behind heads in flight, it answers "due now"
// without reading further, and the claim that follows finds out (at most
// one empty claim per poll). The wait is rounded up to whole microseconds,
// so a relay that sleeps for it never wakes too early.
func (s *Store) NextDue(ctx context.Context) (time.Duration, bool, error) {
	var wait pgtype.Int8
	if err := s.pool.QueryRow(ctx, s.stmts.nextDue).Scan(&wait); err != nil {
		return 0, false, fmt.Errorf("outboxpg: find next due message in %s: %w", s.Name(), err)
	}
	if !wait.Valid {
		return 0, false, nil
	}
	return time.Duration(wait.Int64) * time.Microsecond, true, nil
}

// PurgePublished deletes up to limit published messages published more than
// olderThan ago by the database's clock, in a transaction that first tries a transaction-scoped advisory lock derived
// from the table's name: if another caller holds it, PurgePublished returns
// (0, nil) at once.
func (s *Store) PurgePublished(ctx context.Context, olderThan time.Duration, limit int) (n int, err error) {
	if limit <= 0 {
		return 0, fmt.Errorf("outboxpg: purge published messages in %s: limit %d must be positive", s.Name(), limit)
	}
	if olderThan < 0 {
		return 0, fmt.Errorf("outboxpg: purge published messages in %s: age %v must not be negative", s.Name(), olderThan)
	}
	n, err = execIfLocked(ctx, s.pool, s.names.purgeLockKey, s.stmts.purge, olderThan.Microseconds(), limit)
	if err != nil {
		return 0, fmt.Errorf("outboxpg: purge published messages in %s: %w", s.Name(), err)
	}
	return n, nil
}

// execIfLocked runs stmt in a transaction that first tries the
// transaction-scoped advisory lock lockKey, and returns the rows it changed;
// if another transaction holds the lock it returns (0, nil) at once. Bounded
// clean-ups use it so that one caller at a time does the work.
func execIfLocked(ctx context.Context, pool *pgxpool.Pool, lockKey int64, stmt string, args ...any) (n int, err error) {
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		var locked bool
		if err := tx.QueryRow(ctx, `SELECT pg_try_advisory_xact_lock($1)`, lockKey).Scan(&locked); err != nil {
			return fmt.Errorf("take lock: %w", err)
		}
		if !locked {
			return nil
		}
		tag, err := tx.Exec(ctx, stmt, args...)
		n = int(tag.RowsAffected())
		return err
	})
	return n, err
}

// Stats counts messages by state with one query.
func (s *Store) Stats(ctx context.Context) (outboxdriver.Stats, error) {
	var st outboxdriver.Stats
	var oldestMicros int64
	err := s.pool.QueryRow(ctx, s.stmts.stats).Scan(&st.Pending, &st.InFlight, &st.Dead, &st.Published, &oldestMicros, &st.PublishedLastMinute, &st.BehindDead)
	if err != nil {
		return outboxdriver.Stats{}, fmt.Errorf("outboxpg: count messages in %s: %w", s.Name(), err)
	}
	st.OldestPending = time.Duration(oldestMicros) * time.Microsecond
	return st, nil
}

// Get returns the message with the given id, in any state, or an error
// wrapping outbox.ErrNotFound.
func (s *Store) Get(ctx context.Context, id uuid.UUID) (outbox.Message, error) {
	msgs, err := s.queryListed(ctx, s.stmts.get, s.stmts.getOld, pgUUID(id))
	if err != nil {
		return outbox.Message{}, fmt.Errorf("outboxpg: get message %s from %s: %w", id, s.Name(), err)
	}
	if len(msgs) == 0 {
		return outbox.Message{}, fmt.Errorf("outboxpg: get message %s from %s: %w", id, s.Name(), outbox.ErrNotFound)
	}
	return msgs[0], nil
}

// ListDead returns up to limit dead messages with ids above after, in id
// order; pass the last id of a page to get the next one.
func (s *Store) ListDead(ctx context.Context, after uuid.UUID, limit int) ([]outbox.Message, error) {
	if limit <= 0 {
		return nil, fmt.Errorf("outboxpg: list dead messages in %s: limit %d must be positive", s.Name(), limit)
	}
	msgs, err := s.queryListed(ctx, s.stmts.listDead, s.stmts.listDeadOld, pgUUID(after), limit)
	if err != nil {
		return nil, fmt.Errorf("outboxpg: list dead messages in %s after %s: %w", s.Name(), after, err)
	}
	return msgs, nil
}

// RetryDead makes the given dead messages pending and due at once, with their
// attempt count reset and their last error kept for reference. It returns how
// many it changed. With no ids it changes nothing; see RetryAllDead.
func (s *Store) RetryDead(ctx context.Context, ids ...uuid.UUID) (int, error) {
	if len(ids) == 0 {
		return 0, nil
	}
	return s.retryDead(ctx, s.stmts.retryDead, pgUUIDs(ids))
}

// RetryAllDead makes every dead message pending and due at once, as
// RetryDead does for chosen ones.
func (s *Store) RetryAllDead(ctx context.Context) (int, error) {
	return s.retryDead(ctx, s.stmts.retryAll)
}

func (s *Store) retryDead(ctx context.Context, q string, args ...any) (int, error) {
	tag, err := s.pool.Exec(ctx, q, args...)
	if err != nil {
		return 0, fmt.Errorf("outboxpg: retry dead messages in %s: %w", s.Name(), err)
	}
	return int(tag.RowsAffected()), nil
}

// DiscardDead deletes the given dead messages and returns how many it deleted.
// With no ids it deletes nothing: discarding every dead message must be asked
// for by listing them.
func (s *Store) DiscardDead(ctx context.Context, ids ...uuid.UUID) (int, error) {
	if len(ids) == 0 {
		return 0, nil
	}
	tag, err := s.pool.Exec(ctx, s.stmts.discardDead, pgUUIDs(ids))
	if err != nil {
		return 0, fmt.Errorf("outboxpg: discard dead messages in %s: %w", s.Name(), err)
	}
	return int(tag.RowsAffected()), nil
}

// collectMessages reads rows of messageColumns (see sqlrow.Collect) and
// closes rows.
func collectMessages(rows pgx.Rows) (msgs []outbox.Message, undecodable []outboxdriver.Failure, err error) {
	defer rows.Close()
	sc := newMessageScanner()
	return sqlrow.Collect(rows, 0, func(rows pgx.Rows) (outbox.Message, error, error) {
		m, _, headerErr, err := sc.scan(rows)
		return m, headerErr, err
	})
}

// messageScanner reads rows of messageColumns, then the columns of extra,
// into the same destinations row after row: a claim of 1,000 rows would
// otherwise allocate a destination list and its pointers per row.
type messageScanner struct {
	id          pgtype.UUID // a uuid.UUID would be scanned through its text form
	msg         outbox.Message
	headers     []byte
	lastError   pgtype.Text
	status      string
	publishedAt pgtype.Timestamptz
	dest        []any
}

func newMessageScanner(extra ...any) *messageScanner {
	sc := &messageScanner{}
	m := &sc.msg
	sc.dest = append([]any{&sc.id, &m.Topic, &m.Key, &m.Payload, &sc.headers, &m.CreatedAt, &m.AvailableAt,
		&m.Attempts, &sc.lastError, &sc.status, &sc.publishedAt}, extra...)
	return sc
}

// scan reads the current row: its message, its headers as stored (nil for
// NULL) and, apart from a scan error, why its headers do not decode (the
// message then comes without them).
func (sc *messageScanner) scan(rows pgx.Rows) (m outbox.Message, headers []byte, headerErr, err error) {
	sc.msg, sc.headers, sc.publishedAt = outbox.Message{}, nil, pgtype.Timestamptz{}
	if err := rows.Scan(sc.dest...); err != nil {
		return outbox.Message{}, nil, nil, err
	}
	m = sc.msg
	m.ID = sc.id.Bytes
	c := sqlrow.Columns{Headers: sc.headers, HasHeaders: sc.headers != nil, LastError: sc.lastError.String, Status: sc.status}
	if sc.publishedAt.Valid {
		c.PublishedAt = sc.publishedAt.Time
	}
	headerErr = sqlrow.Fill(&m, "outboxpg", c)
	return m, sc.headers, headerErr, nil
}

// genericPlans and autoPlans switch the plans of the statements that follow
// in the transaction to generic ones, and back to PostgreSQL's choice.
const (
	genericPlans = `SELECT set_config('plan_cache_mode', 'force_generic_plan', true)`
	autoPlans    = `SELECT set_config('plan_cache_mode', 'auto', true)`
)

// addressPairs is the jsonb object {"(block,offset)": "id"} of the delete
// by address: which id each address must hold.
func addressPairs(tids []pgtype.TID, ids []uuid.UUID) []byte {
	b := make([]byte, 0, len(tids)*64)
	b = append(b, '{')
	for i, tid := range tids {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `"(`...)
		b = strconv.AppendUint(b, uint64(tid.BlockNumber), 10)
		b = append(b, ',')
		b = strconv.AppendUint(b, uint64(tid.OffsetNumber), 10)
		b = append(b, `)":"`...)
		b = append(b, ids[i].String()...)
		b = append(b, '"')
	}
	return append(b, '}')
}
