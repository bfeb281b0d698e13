package outboxmysql

import (
	"cmp"
	"context"
	"database/sql"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/sqlrow"
	"github.com/go-outbox/outbox/outboxdriver"
)

// headRounds bounds the lock statements a claim in key order spends on
// heads: when other claims hold some of the heads it read, it goes on down
// its candidates for the places left, so that claims side by side do not
// come back short (spec I4), but not forever.
const headRounds = 3

// runRow is a message a claim in key order takes, with its insert order
// (seq), the turn of its key's head among the batch's candidates (prio)
// and its place in its key's run (r, 1 for the head).
type runRow struct {
	m    outbox.Message
	seq  int64
	prio int
	r    int
}

// candidate is a row a step read without locking it.
type candidate struct {
	id   uuid.UUID
	seq  int64
	key  string
	prio int
	r    int
}

// claimRuns reads and locks what a claim in key order leases, in tx, by
// the steps of docs/design/key-order-claim.md (spec): the due heads (walk
// to due_head, one statement), locked in turn order (take), then for the
// keys whose heads it holds their next due messages in two passes (top_up,
// second_top_up) as outboxsqlite shares them, ranked and cut (wanted),
// locked (locked_run) and cut again at the first one that could not be
// (gap). It returns the messages in run order (sort), and the undecodable
// ones among them. Every message it returns is locked by tx.
func (s *Store) claimRuns(ctx context.Context, tx *sql.Tx, limit int) ([]outbox.Message, []outboxdriver.Failure, error) {
	window := min(limit, outboxdriver.KeyWindow)
	cands, err := s.readCandidates(ctx, tx, s.kstmts.heads, []any{window, window, 2 * limit}, func(c *candidate, i int) { c.prio, c.r = i, 1 })
	if err != nil {
		return nil, nil, err
	}
	// spec §4.5 take.
	var heads []runRow
	var undecodable []outboxdriver.Failure
	for round := 0; round < headRounds && len(heads) < limit && len(cands) > 0; round++ {
		n := min(limit-len(heads), len(cands))
		got, bad, err := s.lockRows(ctx, tx, cands[:n])
		if err != nil {
			return nil, nil, err
		}
		heads = append(heads, got...)
		undecodable = append(undecodable, bad...)
		cands = cands[n:]
	}
	slices.SortFunc(heads, func(a, b runRow) int { return cmp.Compare(a.prio, b.prio) })

	// spec §4.6 top_up, §4.7 second_top_up: the places take left, shared
	// among the keyed heads; the second pass gives what short runs left
	// to the runs that took their whole share.
	places := limit - len(heads)
	var keyed []candidate
	for _, h := range heads {
		if h.m.Key != "" {
			keyed = append(keyed, candidate{id: h.m.ID, seq: h.seq, key: h.m.Key, prio: h.prio, r: 1})
		}
	}
	var wanted []candidate
	for pass := 0; pass < 2 && places > len(wanted) && len(keyed) > 0; pass++ {
		each := (places - len(wanted) + len(keyed) - 1) / len(keyed)
		runs, err := s.readRuns(ctx, tx, keyed, each)
		if err != nil {
			return nil, nil, err
		}
		var full []candidate
		for _, run := range runs {
			wanted = append(wanted, run...)
			if len(run) == each {
				full = append(full, run[len(run)-1])
			}
		}
		keyed = full // the second pass goes on from the last message taken
	}
	// spec §4.8 wanted: ranked by place in run, then turn, so a cut at
	// the places left keeps each run a prefix.
	slices.SortFunc(wanted, func(a, b candidate) int { return cmp.Or(cmp.Compare(a.r, b.r), cmp.Compare(a.prio, b.prio)) })
	wanted = wanted[:min(len(wanted), places)]

	// spec §4.9 locked_run, §4.10 gap.
	locked, bad, err := s.lockRows(ctx, tx, wanted)
	if err != nil {
		return nil, nil, err
	}
	have := make(map[uuid.UUID]bool, len(locked))
	for _, l := range locked {
		have[l.m.ID] = true
	}
	gap := map[string]int{} // key -> the place of its first wanted message not locked
	for _, w := range wanted {
		if !have[w.id] {
			if g, ok := gap[w.key]; !ok || w.r < g {
				gap[w.key] = w.r
			}
		}
	}
	all := heads
	for _, l := range locked {
		if g, ok := gap[l.m.Key]; !ok || l.r < g {
			all = append(all, l)
		}
	}
	// A row locked past its key's gap stays locked, unleased, until the
	// transaction ends: nobody else could have taken it before then.
	undecodable = append(undecodable, bad...)
	kept := make(map[uuid.UUID]bool, len(all))
	for _, r := range all {
		kept[r.m.ID] = true
	}
	undecodable = slices.DeleteFunc(undecodable, func(f outboxdriver.Failure) bool { return !kept[f.ID] })
	return inRunOrder(all), undecodable, nil // spec §4.13 sort
}

// readCandidates runs a statement that returns id, seq and key, and gives
// each row its turn with set.
func (s *Store) readCandidates(ctx context.Context, tx *sql.Tx, query string, args []any, set func(c *candidate, i int)) ([]candidate, error) {
	rows, err := tx.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []candidate
	for rows.Next() {
		var (
			id, key []byte
			c       candidate
		)
		if err := rows.Scan(&id, &c.seq, &key); err != nil {
			return nil, err
		}
		if c.id, err = uuid.FromBytes(id); err != nil {
			return nil, err
		}
		c.key = string(key)
		set(&c, len(out))
		out = append(out, c)
	}
	return out, rows.Err()
}

// readRuns reads, for each of after, up to n messages of its key that
// follow it in seq order, as long as they are due and not leased (and
// below the dead floor), with one statement for all keys.
func (s *Store) readRuns(ctx context.Context, tx *sql.Tx, after []candidate, n int) ([][]candidate, error) {
	args := make([]any, 0, 5*len(after))
	for _, a := range after {
		args = append(args, []byte(a.key), a.seq)
		if s.set.deadHoldsKey {
			args = append(args, []byte(a.key), a.seq)
		}
		args = append(args, n)
	}
	rows, err := tx.QueryContext(ctx, s.kstmts.runSQL(len(after)), args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	byKey := make(map[string]int, len(after))
	for i, a := range after {
		byKey[a.key] = i
	}
	runs := make([][]candidate, len(after))
	ended := make([]bool, len(after))
	var read []candidate
	oks := map[uuid.UUID]bool{}
	for rows.Next() {
		var (
			id, key []byte
			c       candidate
			ok      bool
		)
		if err := rows.Scan(&id, &c.seq, &key, &ok); err != nil {
			return nil, err
		}
		if c.id, err = uuid.FromBytes(id); err != nil {
			return nil, err
		}
		c.key = string(key)
		oks[c.id] = ok
		read = append(read, c)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	// The parts of a UNION ALL come back in no promised order.
	slices.SortFunc(read, func(a, b candidate) int { return cmp.Compare(a.seq, b.seq) })
	for _, c := range read {
		i, ok := byKey[c.key]
		if !ok || ended[i] {
			continue
		}
		if ended[i] = !oks[c.id]; ended[i] {
			continue
		}
		a := after[i]
		c.prio, c.r = a.prio, a.r+len(runs[i])+1
		runs[i] = append(runs[i], c)
	}
	return runs, nil
}

// lockRows locks the rows of cands that are still pending, due and not
// leased, passing over those another transaction holds, and reads them.
// Each comes back with the turn and place of its candidate.
func (s *Store) lockRows(ctx context.Context, tx *sql.Tx, cands []candidate) ([]runRow, []outboxdriver.Failure, error) {
	if len(cands) == 0 {
		return nil, nil, nil
	}
	rows, err := tx.QueryContext(ctx, s.kstmts.lockSQL(len(cands)), idArgs(candidateIDs(cands))...)
	if err != nil {
		return nil, nil, err
	}
	byID := make(map[uuid.UUID]candidate, len(cands))
	for _, c := range cands {
		byID[c.id] = c
	}
	var out []runRow
	var seq int64
	_, undecodable, err := collectMessagesWith(rows, func(m outbox.Message) {
		c := byID[m.ID]
		out = append(out, runRow{m: m, seq: seq, prio: c.prio, r: c.r})
	}, &seq)
	if err != nil {
		return nil, nil, err
	}
	return out, undecodable, nil
}

func candidateIDs(cands []candidate) []uuid.UUID {
	ids := make([]uuid.UUID, len(cands))
	for i, c := range cands {
		ids[i] = c.id
	}
	return ids
}

// inRunOrder returns the messages of rows with each key's messages together
// in seq order, the keys (and the messages without a key) by due time.
func inRunOrder(rows []runRow) []outbox.Message {
	type groupKey struct {
		key string
		id  uuid.UUID // a message without a key is a group of its own
	}
	group := func(r runRow) groupKey {
		if r.m.Key == "" {
			return groupKey{id: r.m.ID}
		}
		return groupKey{key: r.m.Key}
	}
	first := map[groupKey]time.Time{}
	for _, r := range rows {
		g := group(r)
		if t, ok := first[g]; !ok || r.m.AvailableAt.Before(t) {
			first[g] = r.m.AvailableAt
		}
	}
	slices.SortFunc(rows, func(a, b runRow) int {
		ga, gb := group(a), group(b)
		return cmp.Or(first[ga].Compare(first[gb]), strings.Compare(ga.key, gb.key), cmp.Compare(a.seq, b.seq))
	})
	msgs := make([]outbox.Message, len(rows))
	for i := range rows {
		msgs[i] = rows[i].m
	}
	return msgs
}

// collectMessagesWith reads rows of messageColumns followed by the columns
// scanned into extra, calling add after each row with extra filled, and
// closes rows.
func collectMessagesWith(rows *sql.Rows, add func(m outbox.Message), extra ...any) ([]outbox.Message, []outboxdriver.Failure, error) {
	defer rows.Close()
	return sqlrow.Collect(rows, 0, func(rows *sql.Rows) (outbox.Message, error, error) {
		m, headerErr, err := scanMessage(rows, extra...)
		if err == nil {
			add(m)
		}
		return m, headerErr, err
	})
}
