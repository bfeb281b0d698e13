package outboxsqlite

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/sqlrow"
	"github.com/go-outbox/outbox/outboxdriver"
)

// Store is an outbox table in an SQLite database file, used through
// database/sql. It is safe for concurrent use, and any number of Stores, in
// one process or many on the same machine, may share the file. Create the
// table with a Migrator first.
type Store struct {
	db    *sql.DB
	gate  writeGate
	owned bool   // Open made db; Close closes it
	path  string // the database file, "" if unknown (New)
	set   settings
	stmts statements

	insertChunk string      // insert statement for insertChunkRows messages
	purging     atomic.Bool // a PurgePublished of this Store is running
	watchers    watchers    // the write watcher of ListenForWrites
}

// The interfaces Store implements.
var (
	_ outboxdriver.Store           = (*Store)(nil)
	_ outboxdriver.Admin           = (*Store)(nil)
	_ outboxdriver.WriteListener   = (*Store)(nil)
	_ outboxdriver.KeyOrderClaimer = (*Store)(nil)
	_ outbox.Inserter[*sql.Tx]     = (*Store)(nil)
	_ outbox.TxRunner[*sql.Tx]     = (*Store)(nil)
)

// New returns a Store for the table opts names, on a *sql.DB the caller
// opened and keeps: Close leaves it open. It validates opts and does not
// touch the database. Use Open unless the application needs its own
// *sql.DB; then open it as Open does, with the modernc.org/sqlite driver
// (or another SQLite driver), WAL mode, a busy_timeout, synchronous=FULL and
// _txlock=immediate (see Open), and with room for at least two connections
// if a relay uses it (ListenForWrites holds one). The Store sets
// busy_timeout to Options.BusyTimeout on the connections it writes with.
func New(db *sql.DB, opts Options) (*Store, error) {
	if db == nil {
		return nil, &outbox.ConfigError{Field: "outboxsqlite.New db", Value: "nil",
			Fix: "pass a *sql.DB opened on an SQLite file, or use outboxsqlite.Open(ctx, path, opts)"}
	}
	set, err := opts.resolve()
	if err != nil {
		return nil, err
	}
	return newStore(db, set, "", false), nil
}

func newStore(db *sql.DB, set settings, path string, owned bool) *Store {
	s := &Store{db: db, gate: newWriteGate(), owned: owned, path: path, set: set, stmts: newStatements(set)}
	s.insertChunk = s.insertSQL(insertChunkRows)
	return s
}

// ClaimsInKeyOrder reports whether the store's claims keep key order
// (Options.OrderByKey); see outboxdriver.KeyOrderClaimer.
func (s *Store) ClaimsInKeyOrder() bool { return s.set.orderByKey }

// Name returns "main.<table>": SQLite's name for the schema of the database
// file, and the table. Writers and relays of one process that use the same
// name wake each other.
func (s *Store) Name() string { return "main." + s.set.table }

// DB returns the *sql.DB the Store uses, for a Migrator and for the
// application's own transactions.
func (s *Store) DB() *sql.DB { return s.db }

// Close closes the *sql.DB if Open made it, and does nothing for a Store
// made by New. Stop relays and writers that use the Store first.
func (s *Store) Close() error {
	if !s.owned {
		return nil
	}
	return s.db.Close()
}

// writeTx runs fn in a write transaction (see immediateTx) after the Store's
// earlier writers. now is the time, in microseconds since the Unix epoch,
// read once the write lock is taken, so waiting for the lock can neither
// shorten a lease nor make a message due early.
//
// Times come from the clock of the machine the Store runs on (time.Now),
// not from SQLite's. The Store interface asks for the database's clock so
// that relays on machines with skewed clocks agree; every process that
// opens an SQLite file runs on the machine that holds it (SQLite's locks do
// not work across network file systems), so the local clock is the
// database's clock. SQLite's own clock (unixepoch('subsec')) reads the same
// system clock, but only to the millisecond.
func (s *Store) writeTx(ctx context.Context, fn func(ctx context.Context, c *sql.Conn, now int64) error) error {
	if err := s.gate.enter(ctx, s.set.busyTimeout); err != nil {
		return err
	}
	defer s.gate.leave()
	return immediateTx(ctx, s.db, s.set.busyTimeout, func(ctx context.Context, c *sql.Conn) error {
		return fn(ctx, c, time.Now().UnixMicro())
	})
}

// SettleAndClaim records settle and claims the next batch in one write transaction
// (BEGIN IMMEDIATE): if any statement fails, nothing is recorded and nothing
// is claimed. It runs one statement per non-empty outcome kind, then, if
// claim.Limit > 0, reads the due messages and leases them. SQLite runs in
// this process, so the statements cost no round trips.
//
// A claim with nothing to settle first asks, without a transaction, whether
// any message is due: an idle relay that is woken needlessly only reads, and
// never takes the write lock that writers need.
//
// Claimed messages come back ordered by due time, then id (in key order,
// each key's run together, in insert order); their AvailableAt is the time they were due when claimed, which the lease
// leaves as it was.
func (s *Store) SettleAndClaim(ctx context.Context, settle outboxdriver.Settlement, claim outboxdriver.Claim) ([]outbox.Message, error) {
	if claim.Limit < 0 {
		return nil, fmt.Errorf("outboxsqlite: exchange on %s: claim limit %d is negative", s.Name(), claim.Limit)
	}
	if claim.Limit > 0 && claim.Lease <= 0 {
		return nil, fmt.Errorf("outboxsqlite: exchange on %s: claim lease %v must be positive", s.Name(), claim.Lease)
	}
	fail := func(err error) error {
		return fmt.Errorf("outboxsqlite: exchange on %s (settle %d published, %d retried, %d dead, %d released; claim %d): %w",
			s.Name(), len(settle.Published), len(settle.Retry), len(settle.Dead), len(settle.Release), claim.Limit, explain(err, s.path))
	}
	if settle.Empty() {
		if claim.Limit == 0 {
			return nil, nil
		}
		var due bool
		if err := s.db.QueryRowContext(ctx, s.stmts.anyDue, time.Now().UnixMicro()).Scan(&due); err != nil {
			return nil, fail(err)
		}
		if !due {
			return nil, nil
		}
	}
	var msgs []outbox.Message
	err := s.writeTx(ctx, func(ctx context.Context, c *sql.Conn, now int64) error {
		if err := s.settle(ctx, c, now, settle); err != nil {
			return err
		}
		if claim.Limit == 0 {
			return nil
		}
		var undecodable []outboxdriver.Failure
		var err error
		if s.set.orderByKey {
			msgs, undecodable, err = s.claimRuns(ctx, c, now, claim.Limit)
		} else {
			var rows *sql.Rows
			if rows, err = c.QueryContext(ctx, s.stmts.claimSelect, now, claim.Limit); err == nil {
				msgs, undecodable, err = collectMessages(rows)
			}
		}
		if err != nil || len(msgs) == 0 {
			return err
		}
		claimed := make([]uuid.UUID, len(msgs))
		for i := range msgs {
			claimed[i] = msgs[i].ID
		}
		res, err := c.ExecContext(ctx, s.stmts.claimUpdate, now+micros(claim.Lease), claim.Token.String(), idsJSON(claimed))
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n != int64(len(msgs)) {
			return fmt.Errorf("leased %d of the %d messages read (%v); nothing claimed", n, len(msgs), err)
		}
		if len(undecodable) == 0 {
			return nil
		}
		// No publisher could send these rows and retrying cannot change
		// them: they go to the dead letters with the reason, in the same
		// transaction, instead of failing every claim that meets them.
		if s.set.deadHoldsKey {
			// In key order their keys' later messages wait behind them
			// (spec §8): handed back untried.
			var held []uuid.UUID
			msgs, held = outboxdriver.HoldBehindFailures(msgs, undecodable)
			return s.settle(ctx, c, now, outboxdriver.Settlement{Token: claim.Token, Dead: undecodable, Release: held})
		}
		msgs = slices.DeleteFunc(msgs, func(m outbox.Message) bool {
			return slices.ContainsFunc(undecodable, func(f outboxdriver.Failure) bool { return f.ID == m.ID })
		})
		return s.settle(ctx, c, now, outboxdriver.Settlement{Token: claim.Token, Dead: undecodable})
	})
	if err != nil {
		return nil, fail(err)
	}
	return msgs, nil
}

// settle runs one statement per non-empty outcome kind of st, in the
// settlement order of docs/design/key-order-claim.md §7, as outboxpg does:
// published, release, retry and postponeHeld, dead.
func (s *Store) settle(ctx context.Context, c *sql.Conn, now int64, st outboxdriver.Settlement) error {
	token := st.Token.String()
	if len(st.Published) > 0 {
		if s.stmts.countOvertaken != "" {
			if _, err := c.ExecContext(ctx, s.stmts.countOvertaken, token, idsJSON(st.Published)); err != nil {
				return err
			}
		}
		var err error
		if st.KeepPublished {
			_, err = c.ExecContext(ctx, s.stmts.settleKept, now, token, idsJSON(st.Published))
		} else {
			_, err = c.ExecContext(ctx, s.stmts.settlePublished, token, idsJSON(st.Published))
		}
		if err != nil {
			return err
		}
	}
	if len(st.Release) > 0 {
		// Before postponeHeld, so that the rest of a retried head's run
		// is free when it moves (spec §7).
		if _, err := c.ExecContext(ctx, s.stmts.release, token, idsJSON(st.Release)); err != nil {
			return err
		}
	}
	if len(st.Retry) > 0 {
		rows := make([][4]any, len(st.Retry))
		for i, r := range st.Retry {
			rows[i] = [4]any{r.ID.String(), micros(max(r.Delay, 0)), r.Error, r.Counted()}
		}
		b, err := json.Marshal(rows)
		if err != nil {
			return err
		}
		retried, err := s.retry(ctx, c, now, token, string(b))
		if err != nil {
			return err
		}
		// Only the retries that applied move their keys: a settlement
		// under a token that holds nothing changes nothing.
		if s.set.orderByKey && len(retried) > 0 {
			ids, err := json.Marshal(retried)
			if err != nil {
				return err
			}
			if _, err := c.ExecContext(ctx, s.stmts.postponeHeld, string(ids)); err != nil {
				return err
			}
		}
	}
	if len(st.Dead) > 0 {
		rows := make([][2]string, len(st.Dead))
		for i, d := range st.Dead {
			rows[i] = [2]string{d.ID.String(), d.Error}
		}
		b, err := json.Marshal(rows)
		if err != nil {
			return err
		}
		if _, err := c.ExecContext(ctx, s.stmts.settleDead, token, string(b)); err != nil {
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
	err := s.writeTx(ctx, func(ctx context.Context, c *sql.Conn, _ int64) error {
		_, err := c.ExecContext(ctx, s.stmts.release, token.String(), idsJSON(ids))
		return err
	})
	if err != nil {
		return fmt.Errorf("outboxsqlite: release %d message(s) in %s: %w", len(ids), s.Name(), explain(err, s.path))
	}
	return nil
}

// NextDue returns how long until the earliest pending message is due,
// leased ones included (they are due when their lease ends). It is one
// read-only query that reads the first entries of the pending index and the
// leased rows, and takes no lock that a writer waits for (WAL mode).
func (s *Store) NextDue(ctx context.Context) (time.Duration, bool, error) {
	var next sql.NullInt64
	if err := s.db.QueryRowContext(ctx, s.stmts.nextDue).Scan(&next); err != nil {
		return 0, false, fmt.Errorf("outboxsqlite: find next due message in %s: %w", s.Name(), explain(err, s.path))
	}
	if !next.Valid {
		return 0, false, nil
	}
	return time.Until(time.UnixMicro(next.Int64)), true, nil
}

// PurgePublished deletes up to limit published messages published more than
// olderThan ago, oldest first, in one write transaction. The clock is this
// process's, which is the database's: SQLite runs in the process, and every
// time the store records comes from the same host's clock.
//
// At most one caller does the work at a time: a caller of this Store that
// finds another of its calls running returns (0, nil) at once, and callers in
// other processes cannot overlap because SQLite admits one write transaction
// at a time. Unlike PostgreSQL's advisory lock, that lock makes a purger of
// another process wait (up to the busy timeout) rather than give up; it
// then deletes the next bounded batch, or finds nothing. Each batch holds
// the write lock for one bounded DELETE.
func (s *Store) PurgePublished(ctx context.Context, olderThan time.Duration, limit int) (int, error) {
	if limit <= 0 {
		return 0, fmt.Errorf("outboxsqlite: purge published messages in %s: limit %d must be positive", s.Name(), limit)
	}
	if olderThan < 0 {
		return 0, fmt.Errorf("outboxsqlite: purge published messages in %s: age %v must not be negative", s.Name(), olderThan)
	}
	if !s.purging.CompareAndSwap(false, true) {
		return 0, nil
	}
	defer s.purging.Store(false)
	var n int64
	err := s.writeTx(ctx, func(ctx context.Context, c *sql.Conn, _ int64) error {
		res, err := c.ExecContext(ctx, s.stmts.purge, time.Now().UnixMicro()-olderThan.Microseconds(), limit)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("outboxsqlite: purge published messages in %s: %w", s.Name(), explain(err, s.path))
	}
	return int(n), nil
}

// Stats counts messages by state with one query.
func (s *Store) Stats(ctx context.Context) (outboxdriver.Stats, error) {
	var (
		st     outboxdriver.Stats
		oldest sql.NullInt64
	)
	now := time.Now().UnixMicro()
	err := s.db.QueryRowContext(ctx, s.stmts.stats, now).Scan(&st.Pending, &st.InFlight, &st.Dead, &st.Published, &oldest, &st.PublishedLastMinute, &st.BehindDead)
	if err != nil {
		return outboxdriver.Stats{}, fmt.Errorf("outboxsqlite: count messages in %s: %w", s.Name(), explain(err, s.path))
	}
	if oldest.Valid {
		st.OldestPending = time.Duration(max(now-oldest.Int64, 0)) * time.Microsecond
	}
	return st, nil
}

// Get returns the message with the given id, in any state, or an error
// wrapping outbox.ErrNotFound.
func (s *Store) Get(ctx context.Context, id uuid.UUID) (outbox.Message, error) {
	msgs, err := s.queryListed(ctx, s.stmts.get, s.stmts.getOld, id.String())
	if err != nil {
		return outbox.Message{}, fmt.Errorf("outboxsqlite: get message %s from %s: %w", id, s.Name(), explain(err, s.path))
	}
	if len(msgs) == 0 {
		return outbox.Message{}, fmt.Errorf("outboxsqlite: get message %s from %s: %w", id, s.Name(), outbox.ErrNotFound)
	}
	return msgs[0], nil
}

// ListDead returns up to limit dead messages with ids above after, in id
// order; pass the last id of a page to get the next one.
func (s *Store) ListDead(ctx context.Context, after uuid.UUID, limit int) ([]outbox.Message, error) {
	if limit <= 0 {
		return nil, fmt.Errorf("outboxsqlite: list dead messages in %s: limit %d must be positive", s.Name(), limit)
	}
	msgs, err := s.queryListed(ctx, s.stmts.listDead, s.stmts.listDeadOld, after.String(), limit)
	if err != nil {
		return nil, fmt.Errorf("outboxsqlite: list dead messages in %s after %s: %w", s.Name(), after, explain(err, s.path))
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
	return s.retryDead(ctx, func(ctx context.Context, c *sql.Conn, now int64) (sql.Result, error) {
		return c.ExecContext(ctx, s.stmts.retryDead, now, idsJSON(ids))
	})
}

// RetryAllDead makes every dead message pending and due at once, as
// RetryDead does for chosen ones.
func (s *Store) RetryAllDead(ctx context.Context) (int, error) {
	return s.retryDead(ctx, func(ctx context.Context, c *sql.Conn, now int64) (sql.Result, error) {
		return c.ExecContext(ctx, s.stmts.retryAll, now)
	})
}

func (s *Store) retryDead(ctx context.Context, stmt func(ctx context.Context, c *sql.Conn, now int64) (sql.Result, error)) (int, error) {
	n, err := s.writeCount(ctx, stmt)
	if err != nil {
		return 0, fmt.Errorf("outboxsqlite: retry dead messages in %s: %w", s.Name(), explain(err, s.path))
	}
	return n, nil
}

// DiscardDead deletes the given dead messages and returns how many it deleted.
// With no ids it deletes nothing: discarding every dead message must be asked
// for by listing them.
func (s *Store) DiscardDead(ctx context.Context, ids ...uuid.UUID) (int, error) {
	if len(ids) == 0 {
		return 0, nil
	}
	n, err := s.writeCount(ctx, func(ctx context.Context, c *sql.Conn, _ int64) (sql.Result, error) {
		return c.ExecContext(ctx, s.stmts.discardDead, idsJSON(ids))
	})
	if err != nil {
		return 0, fmt.Errorf("outboxsqlite: discard dead messages in %s: %w", s.Name(), explain(err, s.path))
	}
	return n, nil
}

// writeCount runs one statement in a write transaction and returns the rows
// it changed.
func (s *Store) writeCount(ctx context.Context, exec func(ctx context.Context, c *sql.Conn, now int64) (sql.Result, error)) (int, error) {
	var n int64
	err := s.writeTx(ctx, func(ctx context.Context, c *sql.Conn, now int64) error {
		res, err := exec(ctx, c, now)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	return int(n), err
}

// runRow is a message a claim in key order read, with its insert order
// (rid), the place of its key's head among the batch's candidates (prio)
// and its place in its key's run (r, 1 for the head).
type runRow struct {
	m    outbox.Message
	rid  int64
	prio int
	r    int
}

// claimRuns reads what a claim in key order leases, under the write lock,
// by the steps of docs/design/key-order-claim.md (spec; §10 for SQLite):
// the heads (claimSelect: walk to take), then for each key with a head its
// next due messages, in two passes (top_up, second_top_up). Each key gets a
// fair share of the places the heads leave (the places divided by the
// keys), and the share that keys with short runs leave goes to the keys
// whose runs filled theirs. The messages come back with each key's run
// together, in insert order (sort).
func (s *Store) claimRuns(ctx context.Context, c *sql.Conn, now int64, limit int) ([]outbox.Message, []outboxdriver.Failure, error) {
	var heads []runRow
	rows, err := c.QueryContext(ctx, s.stmts.claimSelect, now, limit)
	if err != nil {
		return nil, nil, err
	}
	_, undecodable, err := collect(rows, func(m outbox.Message, rid int64, _ bool) {
		heads = append(heads, runRow{m: m, rid: rid, prio: len(heads), r: 1})
	})
	if err != nil {
		return nil, nil, err
	}
	// spec §4.6 top_up, §4.7 second_top_up: the places take left.
	places := limit - len(heads)
	var keyed []runRow
	for _, h := range heads {
		if h.m.Key != "" {
			keyed = append(keyed, h)
		}
	}
	var followers []runRow
	for pass := 0; pass < 2 && places > len(followers) && len(keyed) > 0; pass++ {
		each := (places - len(followers) + len(keyed) - 1) / len(keyed)
		var full []runRow
		for _, h := range keyed {
			run, bad, err := s.readRun(ctx, c, now, h, each)
			if err != nil {
				return nil, nil, err
			}
			undecodable = append(undecodable, bad...)
			followers = append(followers, run...)
			if len(run) == each {
				full = append(full, run[len(run)-1])
			}
		}
		keyed = full // the second pass goes on from the last message taken
	}
	// spec §4.8 wanted: ranked by place in run, then turn, so a cut at the
	// places left keeps each run a prefix.
	slices.SortFunc(followers, func(a, b runRow) int { return cmp.Or(cmp.Compare(a.r, b.r), cmp.Compare(a.prio, b.prio)) })
	all := append(heads, followers[:min(len(followers), places)]...)
	return inRunOrder(all), undecodable, nil // spec §4.13 sort
}

// readRun reads up to n messages of after's key that follow it, in insert
// order, as long as they are due and not leased.
func (s *Store) readRun(ctx context.Context, c *sql.Conn, now int64, after runRow, n int) (run []runRow, undecodable []outboxdriver.Failure, err error) {
	rows, err := c.QueryContext(ctx, s.stmts.claimRun, now, after.m.Key, after.rid, n)
	if err != nil {
		return nil, nil, err
	}
	ended := false
	_, undecodable, err = collect(rows, func(m outbox.Message, rid int64, ok bool) {
		if ended = ended || !ok; !ended {
			run = append(run, runRow{m: m, rid: rid, prio: after.prio, r: after.r + len(run) + 1})
		}
	})
	if err != nil {
		return nil, nil, err
	}
	undecodable = slices.DeleteFunc(undecodable, func(f outboxdriver.Failure) bool {
		return !slices.ContainsFunc(run, func(r runRow) bool { return r.m.ID == f.ID })
	})
	return run, undecodable, nil
}

// inRunOrder returns the messages of rows with each key's messages together
// in insert order, the keys (and the messages without a key) by due time.
func inRunOrder(rows []runRow) []outbox.Message {
	group := func(r runRow) string {
		if r.m.Key == "" {
			return "\x00" + r.m.ID.String() // keys never hold NUL: no clash
		}
		return r.m.Key
	}
	first := map[string]time.Time{}
	for _, r := range rows {
		g := group(r)
		if t, ok := first[g]; !ok || r.m.AvailableAt.Before(t) {
			first[g] = r.m.AvailableAt
		}
	}
	slices.SortFunc(rows, func(a, b runRow) int {
		ga, gb := group(a), group(b)
		return cmp.Or(first[ga].Compare(first[gb]), strings.Compare(ga, gb), cmp.Compare(a.rid, b.rid))
	})
	msgs := make([]outbox.Message, len(rows))
	for i := range rows {
		msgs[i] = rows[i].m
	}
	return msgs
}

// collect reads rows of messageColumns followed by the rowid and, where
// the statement has it (claimRun), whether the message is due, calling add
// for each. It closes rows.
func collect(rows *sql.Rows, add func(m outbox.Message, rid int64, due bool)) ([]outbox.Message, []outboxdriver.Failure, error) {
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return nil, nil, err
	}
	withDue := len(cols) > 12
	return sqlrow.Collect(rows, 0, func(rows *sql.Rows) (outbox.Message, error, error) {
		var rid int64
		due := true
		extra := []any{&rid}
		if withDue {
			extra = append(extra, &due)
		}
		m, headerErr, err := scanMessage(rows, extra...)
		if err == nil {
			add(m, rid, due)
		}
		return m, headerErr, err
	})
}

// collectMessages reads rows of messageColumns (see sqlrow.Collect) and
// closes rows.
func collectMessages(rows *sql.Rows) (msgs []outbox.Message, undecodable []outboxdriver.Failure, err error) {
	defer rows.Close()
	return sqlrow.Collect(rows, 0, func(rows *sql.Rows) (outbox.Message, error, error) { return scanMessage(rows) })
}

// scanMessage reads one row of messageColumns. headerErr says why its headers
// do not decode; the message is then returned without them.
// Columns after them are scanned into extra.
func scanMessage(rows *sql.Rows, extra ...any) (m outbox.Message, headerErr, err error) {
	var (
		headers, lastError     sql.NullString
		createdAt, availableAt int64
		publishedAt            sql.NullInt64
		status                 string
	)
	err = rows.Scan(append([]any{&m.ID, &m.Topic, &m.Key, &m.Payload, &headers, &createdAt, &availableAt,
		&m.Attempts, &lastError, &status, &publishedAt}, extra...)...)
	if err != nil {
		return outbox.Message{}, nil, err
	}
	m.CreatedAt = fromMicros(createdAt)
	m.AvailableAt = fromMicros(availableAt)
	c := sqlrow.Columns{Headers: []byte(headers.String), HasHeaders: headers.Valid, LastError: lastError.String, Status: status}
	if publishedAt.Valid {
		c.PublishedAt = fromMicros(publishedAt.Int64)
	}
	headerErr = sqlrow.Fill(&m, "outboxsqlite", c)
	return m, headerErr, nil
}

// idsJSON encodes ids as a JSON array of strings, for json_each.
func idsJSON(ids []uuid.UUID) string {
	b := make([]byte, 0, 2+len(ids)*39)
	b = append(b, '[')
	for i, id := range ids {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, '"')
		b = append(b, id.String()...)
		b = append(b, '"')
	}
	return string(append(b, ']'))
}

// micros rounds d up to whole microseconds, the stored resolution, so leases
// and retry delays are never shorter than asked.
func micros(d time.Duration) int64 {
	return int64((d + time.Microsecond - 1) / time.Microsecond)
}

// ceilMicros returns t in microseconds since the Unix epoch, rounded up: a
// message scheduled for t is never due before t, and "older than t" keeps
// its meaning for times stored to the microsecond.
func ceilMicros(t time.Time) int64 {
	us := t.UnixMicro()
	if t.Sub(time.UnixMicro(us)) > 0 {
		us++
	}
	return us
}

func fromMicros(us int64) time.Time { return time.UnixMicro(us).UTC() }

// retry runs settleRetry and returns the ids it retried, each as a
// one-element array (postponeHeld's argument).
func (s *Store) retry(ctx context.Context, c *sql.Conn, now int64, token, rows string) ([][1]string, error) {
	rs, err := c.QueryContext(ctx, s.stmts.settleRetry, now, token, rows)
	if err != nil {
		return nil, err
	}
	defer rs.Close()
	var retried [][1]string
	for rs.Next() {
		var id string
		if err := rs.Scan(&id); err != nil {
			return nil, err
		}
		retried = append(retried, [1]string{id})
	}
	return retried, rs.Err()
}
