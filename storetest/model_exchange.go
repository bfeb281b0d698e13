package storetest

import (
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/go-outbox/outbox/outboxdriver"
)

// opExchange settles a live claim (settle), claims (claim), or both in one
// SettleAndClaim, as a relay's worker does.
func (r *modelRun) opExchange(settle, claim bool) error {
	var c *modelClaim
	var outcomes []modelOutcome
	var s outboxdriver.Settlement
	if settle {
		if len(r.claims) == 0 {
			return errSkip
		}
		c = r.claims[r.rng.IntN(len(r.claims))]
		outcomes = r.genOutcomes(r.holds(c))
		s = settlementOf(c.token, r.rng.IntN(3) == 0, outcomes)
		if c.killed {
			return errSkip
		}
	}
	var cl outboxdriver.Claim
	if claim {
		if len(r.claims) >= maxLiveClaims && !settle {
			return errSkip
		}
		r.nClaims++
		cl = outboxdriver.Claim{Limit: 1 + r.rng.IntN(6), Lease: modelLongLease, Token: uuid.New()}
		if r.rng.IntN(4) == 0 {
			cl.Lease = time.Duration(30+r.rng.IntN(50)) * time.Millisecond
		}
	}
	t0, err := r.now()
	if err != nil {
		return err
	}
	h0, err := r.claimClock()
	if err != nil {
		return err
	}
	got, err := r.store.SettleAndClaim(r.ctx, s, cl)
	if err != nil {
		return fmt.Errorf("exchange (settle %s %s; claim %d): %w", tokenName(c), r.describeOutcomes(outcomes), cl.Limit, err)
	}
	h1, err := r.claimClock()
	if err != nil {
		return err
	}
	t1, err := r.now()
	if err != nil {
		return err
	}
	if settle {
		r.logf("settle %s keep=%v %s", c.name, s.KeepPublished, r.describeOutcomes(outcomes))
		r.applySettlement(c, s, outcomes, t0, t1)
	}
	if !claim {
		return nil
	}
	r.logf("claim #%d limit %d lease %v -> %s", r.nClaims, cl.Limit, cl.Lease, r.names(ids(got)))
	if err := r.checkClaim(got, cl.Limit, t0, t1); err != nil {
		return err
	}
	if len(got) == 0 {
		return nil
	}
	nc := &modelClaim{name: fmt.Sprintf("c%d", r.nClaims), token: cl.Token, held: r.held, short: cl.Lease < time.Second,
		lease: cl.Lease, startLo: h0, startHi: h1, ids: ids(got), partial: len(got) < cl.Limit}
	nc.remaining = nc.ids
	for _, id := range nc.ids {
		m := r.byID[id]
		m.holder, m.staleToken = nc, uuid.Nil
		m.note(r.step, "claimed by %s (lease %v)", nc.name, cl.Lease)
	}
	r.claims = append(r.claims, nc)
	return nil
}

func tokenName(c *modelClaim) string {
	if c == nil {
		return "-"
	}
	return c.name
}

// applySettlement records in the model a settlement by c's token that the
// store accepted. A live claim's outcomes apply to what it holds; with
// transaction leases the claim ends, and what the settlement does not list
// goes back unchanged.
func (r *modelRun) applySettlement(c *modelClaim, s outboxdriver.Settlement, outcomes []modelOutcome, t0, t1 time.Time) {
	if c.held {
		listed := map[uuid.UUID]modelOutcome{}
		for _, o := range outcomes {
			listed[o.id] = o
		}
		for _, id := range c.remaining {
			if o, ok := listed[id]; ok {
				r.applyOutcome(c, r.byID[id], o, s.KeepPublished, t0, t1)
			}
		}
		r.endClaim(c, "settled")
		return
	}
	for _, o := range outcomes {
		if m := r.byID[o.id]; m != nil && m.holder == c {
			r.applyOutcome(c, m, o, s.KeepPublished, t0, t1)
		}
	}
	if len(r.holds(c)) == 0 {
		r.retire(c, "settled")
	}
}

// applyOutcome records o, applied to m between t0 and t1.
func (r *modelRun) applyOutcome(c *modelClaim, m *modelMsg, o modelOutcome, keep bool, t0, t1 time.Time) {
	m.holder, m.staleToken = nil, uuid.Nil
	switch o.kind {
	case "published":
		if !keep {
			r.gone(m, "published by "+c.name)
			return
		}
		m.status = outboxdriver.StatusPublished
	case "retry":
		m.attempts += int(o.retry.Counted())
		m.lastError = o.err
		m.avLo, m.avHi = t0.Add(o.retry.Delay), t1.Add(o.retry.Delay)
		if r.ordered && m.key != "" {
			r.postponeFollowers(m)
		}
	case "dead":
		m.status = outboxdriver.StatusDead
		m.attempts++
		m.lastError = o.err
	}
	m.note(r.step, "%s by %s", o, c.name)
}

// postponeFollowers records that, in key order, a retried head may take
// the messages behind it back in the queue, up to its own due time (those
// of its run that its settlement releases too, and maybe those still
// leased): the model widens their due times and reads them back. They
// wait behind the head whatever their due time.
func (r *modelRun) postponeFollowers(head *modelMsg) {
	for _, f := range r.all {
		if f.key == head.key && f.seq > head.seq && f.status == outboxdriver.StatusPending && f.avHi.Before(head.avHi) {
			f.avHi = head.avHi
		}
	}
}

// opLateSettle settles a claim that ended (its lease ran out, or its
// transaction was rolled back). With leases in columns the outcomes may
// apply to messages no other claim took since (the token is still on
// them), and must not apply to any other; the model reads back which.
// With transaction leases nothing applies.
func (r *modelRun) opLateSettle() error {
	if len(r.ended) == 0 {
		return errSkip
	}
	c := r.ended[r.rng.IntN(len(r.ended))]
	if c.ended == "settled" {
		return errSkip
	}
	outcomes := r.genOutcomes(r.holds(c))
	if len(outcomes) == 0 {
		return errSkip
	}
	s := settlementOf(c.token, r.rng.IntN(3) == 0, outcomes)
	t0, err := r.now()
	if err != nil {
		return err
	}
	_, err = r.store.SettleAndClaim(r.ctx, s, outboxdriver.Claim{})
	if err != nil && !c.killed {
		return fmt.Errorf("late settlement of %s %s: %w", c.name, r.describeOutcomes(outcomes), err)
	}
	t1, err2 := r.now()
	if err2 != nil {
		return err2
	}
	r.logf("late settle %s (%s) keep=%v %s (error: %v)", c.name, c.ended, s.KeepPublished, r.describeOutcomes(outcomes), err)
	if c.held || err != nil {
		return nil // a settlement under a token that holds nothing changes nothing
	}
	for _, o := range outcomes {
		m := r.byID[o.id]
		if m == nil || m.status != outboxdriver.StatusPending || m.holder != nil || m.staleToken != c.token || o.kind == "release" {
			continue
		}
		applied, err := r.appliedLate(m, o, s.KeepPublished)
		if err != nil {
			return err
		}
		switch {
		case applied:
			r.applyOutcome(c, m, o, s.KeepPublished, t0, t1)
		default:
			m.note(r.step, "late %s by %s: not applied", o, c.name)
		}
	}
	return nil
}

// appliedLate reads back whether a late outcome applied to m.
func (r *modelRun) appliedLate(m *modelMsg, o modelOutcome, keep bool) (bool, error) {
	row, err := r.h.Admin.Get(r.ctx, m.id)
	if errors.Is(err, outboxdriver.ErrNotFound) {
		return o.kind == "published" && !keep, nil
	}
	if err != nil {
		return false, fmt.Errorf("get message %s: %w", m.name, err)
	}
	switch o.kind {
	case "published":
		return keep && row.Status == outboxdriver.StatusPublished, nil
	case "retry":
		return row.LastError == o.err, nil
	case "dead":
		return row.Status == outboxdriver.StatusDead, nil
	}
	return false, nil
}

// opRelease hands back part of a live claim with Store.Release (in key
// order, the end of a key's run).
func (r *modelRun) opRelease() error {
	if len(r.claims) == 0 {
		return errSkip
	}
	c := r.claims[r.rng.IntN(len(r.claims))]
	held := r.holds(c)
	var release []uuid.UUID
	if r.ordered {
		// The end of one key's run, or messages without a key.
		key := r.byID[held[r.rng.IntN(len(held))]].key
		var run []uuid.UUID
		for _, id := range held {
			if r.byID[id].key == key {
				run = append(run, id)
			}
		}
		release = run[r.rng.IntN(len(run)):]
	} else {
		for _, id := range held {
			if r.rng.IntN(2) == 0 {
				release = append(release, id)
			}
		}
	}
	if len(release) == 0 {
		return errSkip
	}
	err := r.store.Release(r.ctx, c.token, release)
	r.logf("release %s %s (error: %v)", c.name, r.names(release), err)
	if err != nil {
		if c.killed {
			return nil
		}
		return fmt.Errorf("release %s of %s: %w", r.names(release), c.name, err)
	}
	if !c.held {
		for _, id := range release {
			if m := r.byID[id]; m.holder == c {
				m.holder, m.staleToken = nil, uuid.Nil
				m.note(r.step, "released by %s", c.name)
			}
		}
		if len(r.holds(c)) == 0 {
			r.retire(c, "released")
		}
		return nil
	}
	var rest []uuid.UUID
	for _, id := range c.remaining {
		if !contains(release, id) {
			rest = append(rest, id)
		}
	}
	if len(rest) == 0 {
		// Nothing left: the claim's transaction is rolled back.
		r.endClaim(c, "released whole")
		return nil
	}
	c.remaining = rest
	return nil
}

func contains(ids []uuid.UUID, id uuid.UUID) bool {
	for _, x := range ids {
		if x == id {
			return true
		}
	}
	return false
}
