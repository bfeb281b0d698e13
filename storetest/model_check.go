package storetest

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/google/uuid"

	"github.com/go-outbox/outbox/outboxdriver"
)

// check compares the table with the model after a step: every message the
// model has is there as the model says, nothing else is (no rolled-back
// message, none settled away), and Stats counts what the model counts.
func (r *modelRun) check() error {
	rows, err := r.readRows()
	if err != nil {
		return err
	}
	for id, row := range rows {
		m := r.byID[id]
		switch {
		case m == nil && slices.Contains(r.rolledBack, id):
			return fmt.Errorf("message %s, written in a transaction that was rolled back, is in the table: %+v", id, row)
		case m == nil:
			return fmt.Errorf("the table holds message %s, which the model never wrote: %+v", id, row)
		case m.status == statusGone:
			return fmt.Errorf("message %s is in the table (status %s); want it gone: %s", m.name, row.Status, r.describe(m))
		}
	}
	for _, m := range r.live() {
		row, ok := rows[m.id]
		if !ok {
			return fmt.Errorf("LOST: message %s, status %s in the model, is not in the table: %s", m.name, m.status, r.describe(m))
		}
		if err := r.matchRow(m, row); err != nil {
			return err
		}
	}
	r.justGone = r.justGone[:0]
	if len(r.all) > 64 && r.step%16 == 0 {
		for _, m := range r.all {
			if m.status == statusGone {
				delete(r.byID, m.id)
			}
		}
		r.all = slices.DeleteFunc(r.all, func(m *modelMsg) bool { return m.status == statusGone })
	}
	return r.checkStats(rows)
}

// readRows reads the table through Harness.Rows, or message by message.
func (r *modelRun) readRows() (map[uuid.UUID]outboxdriver.Message, error) {
	rows := map[uuid.UUID]outboxdriver.Message{}
	if r.h.Rows != nil {
		all, err := r.h.Rows(r.ctx)
		if err != nil {
			return nil, fmt.Errorf("read the table's rows: %w", err)
		}
		for _, m := range all {
			if _, dup := rows[m.ID]; dup {
				return nil, fmt.Errorf("the table holds message %s twice", m.ID)
			}
			rows[m.ID] = m
		}
		return rows, nil
	}
	ids := slices.Concat(r.justGone, r.rolledBack[max(0, len(r.rolledBack)-8):])
	for _, m := range r.live() {
		ids = append(ids, m.id)
	}
	for _, id := range ids {
		m, err := r.h.Admin.Get(r.ctx, id)
		switch {
		case errors.Is(err, outboxdriver.ErrNotFound):
		case err != nil:
			return nil, fmt.Errorf("get message %s: %w", r.name(id), err)
		default:
			rows[id] = m
		}
	}
	return rows, nil
}

// matchRow compares a stored message with the model's, and takes the due
// time the model only bounds from the row.
func (r *modelRun) matchRow(m *modelMsg, row outboxdriver.Message) error {
	var diff string
	switch {
	case row.Status != m.status:
		diff = fmt.Sprintf("status %s; want %s", row.Status, m.status)
	case row.Attempts != m.attempts:
		diff = fmt.Sprintf("attempts %d; want %d", row.Attempts, m.attempts)
	case row.LastError != m.lastError:
		diff = fmt.Sprintf("last error %q; want %q", row.LastError, m.lastError)
	case row.Key != m.key || row.Topic != m.topic:
		diff = fmt.Sprintf("key %q, topic %q; want %q, %q", row.Key, row.Topic, m.key, m.topic)
	case !bytes.Equal(row.Payload, m.payload):
		diff = fmt.Sprintf("payload %q; want %q", row.Payload, m.payload)
	case len(row.Headers) != len(m.headers) || (len(m.headers) > 0 && !maps.Equal(row.Headers, m.headers)):
		diff = fmt.Sprintf("headers %v; want %v", row.Headers, m.headers)
	case !within(row.AvailableAt, m.avLo, m.avHi):
		diff = fmt.Sprintf("due at %v; want between %v and %v", row.AvailableAt, m.avLo, m.avHi)
	case !m.createdAt.IsZero() && !row.CreatedAt.Equal(m.createdAt):
		diff = fmt.Sprintf("created at %v; want %v, as first read", row.CreatedAt, m.createdAt)
	case m.status == outboxdriver.StatusPublished && row.PublishedAt.IsZero():
		diff = "no publication time; want one"
	}
	if diff != "" {
		return fmt.Errorf("message %s: %s: %s", m.name, diff, r.describe(m))
	}
	m.avLo, m.avHi = row.AvailableAt, row.AvailableAt
	m.createdAt, m.publishedAt = row.CreatedAt, row.PublishedAt
	return nil
}

// checkStats compares Stats with the model's counts. In flight counts
// leases written into rows, so none with transaction leases.
func (r *modelRun) checkStats(rows map[uuid.UUID]outboxdriver.Message) error {
	t0, err := r.now()
	if err != nil {
		return err
	}
	st, err := r.h.Admin.Stats(r.ctx)
	if err != nil {
		return fmt.Errorf("stats: %w", err)
	}
	t1, err := r.now()
	if err != nil {
		return err
	}
	var want outboxdriver.Stats
	var oldest time.Time
	var inFlightMaybe int64 // under a short lease that may have run out

	ambiguous := false
	for _, m := range r.live() {
		switch m.status {
		case outboxdriver.StatusPending:
			want.Pending++
			if c := m.holder; c != nil && !c.held {
				switch {
				case c.endLo().After(t1):
					want.InFlight++
				case !c.endHi().Before(t0):
					inFlightMaybe++
				}
			}
			if oldest.IsZero() || m.createdAt.Before(oldest) {
				oldest = m.createdAt
			}
			for _, x := range r.all {
				if x.seq >= m.seq {
					break
				}
				if m.key != "" && x.key == m.key && x.status == outboxdriver.StatusDead {
					want.BehindDead++ // whatever the store's mode, as the stores count
					break
				}
			}
		case outboxdriver.StatusDead:
			want.Dead++
		case outboxdriver.StatusPublished:
			want.Published++
			// Published in the last minute: surely, maybe.
			if m.publishedAt.After(t1.Add(-time.Minute)) {
				want.PublishedLastMinute++
			}
			if m.publishedAt.After(t0.Add(-time.Minute-time.Millisecond)) && !m.publishedAt.After(t1.Add(-time.Minute+time.Millisecond)) {
				ambiguous = true
			}
		}
	}
	if st.Pending != want.Pending || st.InFlight < want.InFlight || st.InFlight > want.InFlight+inFlightMaybe || st.Dead != want.Dead || st.Published != want.Published ||
		st.BehindDead != want.BehindDead {
		return fmt.Errorf("stats: %+v; want pending %d, in flight %d (%d more under leases that may have run out), dead %d, published %d, behind dead %d",
			st, want.Pending, want.InFlight, inFlightMaybe, want.Dead, want.Published, want.BehindDead)
	}
	if !ambiguous && st.PublishedLastMinute != want.PublishedLastMinute {
		return fmt.Errorf("stats: %d published in the last minute; want %d", st.PublishedLastMinute, want.PublishedLastMinute)
	}
	if !oldest.IsZero() {
		lo, hi := t0.Sub(oldest)-time.Millisecond, t1.Sub(oldest)+time.Millisecond
		if st.OldestPending < lo || st.OldestPending > hi {
			return fmt.Errorf("stats: oldest pending %v; want the age of the oldest pending message, between %v and %v", st.OldestPending, lo, hi)
		}
	} else if st.OldestPending != 0 {
		return fmt.Errorf("stats: oldest pending %v with nothing pending; want 0", st.OldestPending)
	}
	return nil
}

// checkClaim checks what a claim between t0 and t1 returned against the
// model, before the model records it: every message free and due, none
// twice, at most limit; unordered, the first due messages in due order;
// in key order, for each key a run from its head in insert order, and
// every key with a due free head in a claim that had room for it.
func (r *modelRun) checkClaim(got []outboxdriver.Message, limit int, t0, t1 time.Time) error {
	if len(got) > limit {
		return fmt.Errorf("claim of %d returned %d messages", limit, len(got))
	}
	seen := map[uuid.UUID]bool{}
	for _, g := range got {
		m := r.byID[g.ID]
		switch {
		case m == nil:
			return fmt.Errorf("claim returned message %s, which the model never wrote (rolled back: %v)", g.ID, slices.Contains(r.rolledBack, g.ID))
		case seen[g.ID]:
			return fmt.Errorf("claim returned message %s twice", m.name)
		case m.holder != nil:
			return fmt.Errorf("DOUBLE CLAIM: claim returned message %s, held by the live claim %s: %s", m.name, m.holder.name, r.describe(m))
		case !claimableMaybe(m, t1):
			return fmt.Errorf("claim returned message %s, which is not free and due (status %s, due %v..%v, claim %v..%v): %s",
				m.name, m.status, m.avLo, m.avHi, t0, t1, r.describe(m))
		}
		seen[g.ID] = true
		if err := r.matchRow(m, g); err != nil {
			return fmt.Errorf("claimed %w", err)
		}
	}
	if r.ordered {
		return r.checkKeyOrderClaim(got, limit, t0)
	}
	for i := 1; i < len(got); i++ {
		if dueLess(got[i], got[i-1]) {
			return fmt.Errorf("claim returned %s before %s; want due order (due time, then id)", r.name(got[i-1].ID), r.name(got[i].ID))
		}
	}
	for _, m := range r.all {
		if seen[m.id] || !r.claimableSure(m, t0) || r.hiddenByHeldClaim(m) {
			continue
		}
		if len(got) < limit {
			return fmt.Errorf("claim of %d returned %d messages %s without %s, which was due and free: %s", limit, len(got), r.names(ids(got)), m.name, r.describe(m))
		}
		if last := got[len(got)-1]; dueLess(outboxdriver.Message{ID: m.id, AvailableAt: m.avHi}, last) {
			return fmt.Errorf("claim returned %s but not %s, due before it: %s", r.names(ids(got)), m.name, r.describe(m))
		}
	}
	return nil
}

func dueLess(a, b outboxdriver.Message) bool {
	if !a.AvailableAt.Equal(b.AvailableAt) {
		return a.AvailableAt.Before(b.AvailableAt)
	}
	return bytes.Compare(a.ID[:], b.ID[:]) < 0
}

func (r *modelRun) checkKeyOrderClaim(got []outboxdriver.Message, limit int, t0 time.Time) error {
	runs := map[string][]uuid.UUID{}
	for _, g := range got {
		if g.Key != "" {
			runs[g.Key] = append(runs[g.Key], g.ID)
		}
	}
	for key, run := range runs {
		chain := r.chain(key)
		for i, id := range run {
			if i >= len(chain) || chain[i].id != id {
				want := make([]uuid.UUID, 0, len(run))
				for _, m := range chain[:min(len(chain), len(run))] {
					want = append(want, m.id)
				}
				return fmt.Errorf("KEY ORDER: claim returned %s of key %s; want a run from the key's head in insert order, %s (messages holding the key: %s)",
					r.names(run), key, r.names(want), r.names(modelIDs(chain)))
			}
			if chain[i].status != outboxdriver.StatusPending {
				return fmt.Errorf("claim returned %s, status %s", chain[i].name, chain[i].status)
			}
		}
	}
	if len(got) >= limit {
		return nil
	}
	for _, m := range r.all {
		if m.key != "" && r.claimableSure(m, t0) && len(runs[m.key]) == 0 {
			return fmt.Errorf("claim of %d in key order returned %d messages %s without key %s, whose head %s was due and free: %s",
				limit, len(got), r.names(ids(got)), m.key, m.name, r.describe(m))
		}
	}
	return nil
}

func modelIDs(msgs []*modelMsg) []uuid.UUID {
	out := make([]uuid.UUID, len(msgs))
	for i, m := range msgs {
		out[i] = m.id
	}
	return out
}

// checkNextDue checks the idle probe: nothing pending is none; a due free
// message is due now; otherwise the wait is no longer than until the first
// message due later or the first lease's end.
func (r *modelRun) checkNextDue() error {
	t0, err := r.now()
	if err != nil {
		return err
	}
	wait, ok, err := r.store.NextDue(r.ctx)
	if err != nil {
		return fmt.Errorf("next due: %w", err)
	}
	r.logf("next due: %v, %v", wait, ok)
	var pending, dueNow bool
	var bound time.Time
	later := func(t time.Time) {
		if bound.IsZero() || t.Before(bound) {
			bound = t
		}
	}
	for _, m := range r.all {
		if m.status != outboxdriver.StatusPending {
			continue
		}
		pending = true
		switch {
		case r.claimableSure(m, t0) && r.hiddenByHeldClaim(m):
			// Passed over until the claim holding its entry ends.
		case r.claimableSure(m, t0):
			dueNow = true
		case !r.isHead(m):
			// Due when the messages before it are settled, not by a time.
		case m.holder != nil && !m.holder.held:
			later(m.holder.endHi())
		case m.holder == nil && m.avLo.After(t0):
			later(m.avHi)
		}
	}
	switch {
	case !pending && ok:
		return fmt.Errorf("next due: %v, true with nothing pending; want none", wait)
	case !bound.IsZero() && !ok:
		return fmt.Errorf("next due: none with messages pending; want the wait until the next is due or a lease ends, at most %v", bound.Sub(t0))
	case dueNow && (!ok || wait > 0):
		return fmt.Errorf("next due: %v, %v with a message due and free; want due now", wait, ok)
	case ok && wait > 0 && !bound.IsZero() && wait > bound.Sub(t0)+time.Millisecond:
		return fmt.Errorf("next due: %v; want at most %v, until the next message is due or a lease ends", wait, bound.Sub(t0))
	}
	return nil
}
