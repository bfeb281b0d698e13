package storetest

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"

	"github.com/go-outbox/outbox/outboxdriver"
)

// pick returns up to n of msgs, drawn at random, in their order.
func (r *modelRun) pick(msgs []*modelMsg, n int) []*modelMsg {
	var out []*modelMsg
	for _, i := range r.rng.Perm(len(msgs))[:min(n, len(msgs))] {
		out = append(out, msgs[i])
	}
	slices.SortFunc(out, func(a, b *modelMsg) int { return a.seq - b.seq })
	return out
}

// deadAndOthers draws dead messages, and now and then a pending one and an
// unknown id, which the dead-letter operations must leave alone.
func (r *modelRun) deadAndOthers() (dead []*modelMsg, list []uuid.UUID) {
	dead = r.pick(r.withStatus(outboxdriver.StatusDead), 1+r.rng.IntN(3))
	list = modelIDs(dead)
	if pending := r.withStatus(outboxdriver.StatusPending); len(pending) > 0 && r.rng.IntN(3) == 0 {
		list = append(list, pending[r.rng.IntN(len(pending))].id)
	}
	if r.rng.IntN(4) == 0 {
		list = append(list, uuid.New())
	}
	return dead, list
}

func (r *modelRun) opRetryDead(all bool) error {
	var dead []*modelMsg
	var n int
	var err error
	t0, err := r.now()
	if err != nil {
		return err
	}
	if all {
		dead = r.withStatus(outboxdriver.StatusDead)
		n, err = r.h.Admin.RetryAllDead(r.ctx)
		r.logf("retry all dead -> %d", n)
	} else {
		var list []uuid.UUID
		dead, list = r.deadAndOthers()
		if len(list) == 0 {
			return errSkip
		}
		n, err = r.h.Admin.RetryDead(r.ctx, list...)
		r.logf("retry dead %s -> %d", r.names(list), n)
	}
	if err != nil {
		return err
	}
	t1, err := r.now()
	if err != nil {
		return err
	}
	if n != len(dead) {
		return fmt.Errorf("retried %d messages; want %d, the dead ones of the list", n, len(dead))
	}
	for _, m := range dead {
		m.status, m.attempts, m.staleToken = outboxdriver.StatusPending, 0, uuid.Nil
		m.avLo, m.avHi = t0, t1
		m.note(r.step, "dead letter retried")
	}
	return nil
}

func (r *modelRun) opDiscardDead() error {
	dead, list := r.deadAndOthers()
	if len(list) == 0 {
		return errSkip
	}
	n, err := r.h.Admin.DiscardDead(r.ctx, list...)
	r.logf("discard dead %s -> %d", r.names(list), n)
	if err != nil {
		return err
	}
	if n != len(dead) {
		return fmt.Errorf("discarded %d messages; want %d, the dead ones of the list", n, len(dead))
	}
	for _, m := range dead {
		r.gone(m, "dead letter discarded")
	}
	return nil
}

func (r *modelRun) opListDead() error {
	size := 1 + r.rng.IntN(4)
	var listed []uuid.UUID
	after := uuid.Nil
	for page := 0; ; page++ {
		got, err := r.h.Admin.ListDead(r.ctx, after, size)
		if err != nil {
			return err
		}
		if len(got) > size {
			return fmt.Errorf("a page of %d held %d messages", size, len(got))
		}
		if len(got) == 0 {
			break
		}
		for _, g := range got {
			m := r.byID[g.ID]
			if m == nil {
				return fmt.Errorf("listed message %s, unknown to the model", g.ID)
			}
			if err := r.matchRow(m, g); err != nil {
				return fmt.Errorf("listed %w", err)
			}
		}
		listed = append(listed, ids(got)...)
		after = got[len(got)-1].ID
		if page > 1000 {
			return fmt.Errorf("no end after %d pages", page)
		}
	}
	want := sortedIDs(modelIDs(r.withStatus(outboxdriver.StatusDead)))
	r.logf("list dead by %d -> %s", size, r.names(listed))
	if !slices.Equal(listed, want) {
		return fmt.Errorf("listed %s; want every dead message in id order, %s", r.names(listed), r.names(want))
	}
	return nil
}

func (r *modelRun) opGetUnknown() error {
	id := uuid.Must(uuid.NewV7())
	if len(r.rolledBack) > 0 && r.rng.IntN(2) == 0 {
		id = r.rolledBack[r.rng.IntN(len(r.rolledBack))]
	}
	_, err := r.h.Admin.Get(r.ctx, id)
	r.logf("get %s -> %v", id, err)
	if !errors.Is(err, outboxdriver.ErrNotFound) {
		return fmt.Errorf("get of unknown or rolled-back message %s: %v; want ErrNotFound", id, err)
	}
	return nil
}

// opPurge purges published messages: with no age, the oldest kept ones up
// to the limit; with an hour, none of this run's.
func (r *modelRun) opPurge() error {
	kept := r.withStatus(outboxdriver.StatusPublished)
	age := time.Duration(0)
	if r.rng.IntN(3) == 0 {
		age = time.Hour
	}
	limit := 1 + r.rng.IntN(4)
	n, err := r.h.Store.PurgePublished(r.ctx, age, limit)
	r.logf("purge published older than %v, up to %d -> %d", age, limit, n)
	if err != nil {
		return err
	}
	want := min(limit, len(kept))
	if age > 0 {
		want = 0
	}
	if n != want {
		return fmt.Errorf("purged %d messages; want %d (%d kept, limit %d, age %v)", n, want, len(kept), limit, age)
	}
	var purged, left []*modelMsg
	for _, m := range kept {
		_, err := r.h.Admin.Get(r.ctx, m.id)
		switch {
		case errors.Is(err, outboxdriver.ErrNotFound):
			purged = append(purged, m)
		case err != nil:
			return fmt.Errorf("get message %s: %w", m.name, err)
		default:
			left = append(left, m)
		}
	}
	if len(purged) != n {
		return fmt.Errorf("purge reported %d messages; %d of the kept ones are gone", n, len(purged))
	}
	for _, p := range purged {
		for _, l := range left {
			if l.publishedAt.Before(p.publishedAt) {
				return fmt.Errorf("purged %s, published at %v, and kept %s, published before it at %v; want the oldest purged first",
					p.name, p.publishedAt, l.name, l.publishedAt)
			}
		}
		r.gone(p, "purged")
	}
	return nil
}

// outsidePending draws up to n pending messages that an operator's UPDATE
// can reach at once: none held in an open transaction, which it would
// wait for.
func (r *modelRun) outsidePending(n int) []*modelMsg {
	var ok []*modelMsg
	for _, m := range r.withStatus(outboxdriver.StatusPending) {
		if m.holder == nil || !m.holder.held {
			ok = append(ok, m)
		}
	}
	return r.pick(ok, n)
}

func (r *modelRun) opTouch() error {
	msgs := r.outsidePending(1 + r.rng.IntN(4))
	if r.h.Touch == nil || len(msgs) == 0 {
		return errSkip
	}
	r.logf("outside: touch %s", r.names(modelIDs(msgs)))
	return r.h.Touch(r.ctx, modelIDs(msgs))
}

func (r *modelRun) opSetPayload() error {
	msgs := r.outsidePending(1)
	if r.h.SetPayload == nil || len(msgs) == 0 {
		return errSkip
	}
	m := msgs[0]
	payload := fmt.Appendf(nil, "fixed at step %d", r.step)
	r.logf("outside: set payload of %s", m.name)
	if err := r.h.SetPayload(r.ctx, m.id, payload); err != nil {
		return err
	}
	m.payload = payload
	m.note(r.step, "payload set from outside")
	return nil
}

func (r *modelRun) opReschedule() error {
	msgs := r.outsidePending(1 + r.rng.IntN(3))
	if r.h.Reschedule == nil || len(msgs) == 0 {
		return errSkip
	}
	now, err := r.now()
	if err != nil {
		return err
	}
	at := now.Add(-time.Duration(1+r.rng.IntN(120)) * time.Second)
	switch r.rng.IntN(6) {
	case 0, 1:
		at = now.Add(time.Duration(20+r.rng.IntN(300)) * time.Millisecond)
	case 2:
		at = now.Add(time.Hour)
	}
	at = at.Truncate(time.Microsecond)
	r.logf("outside: reschedule %s to %+dms", r.names(modelIDs(msgs)), at.Sub(now).Milliseconds())
	if err := r.h.Reschedule(r.ctx, modelIDs(msgs), at); err != nil {
		return err
	}
	for _, m := range msgs {
		m.avLo, m.avHi = at, at
		m.note(r.step, "rescheduled from outside")
	}
	return nil
}

func (r *modelRun) opVacuum(full bool) error {
	if r.h.Vacuum == nil {
		return errSkip
	}
	if full && r.held && len(r.claims) > 0 {
		return errSkip // it would wait for the open claims' transactions
	}
	r.logf("outside: vacuum (full: %v)", full)
	return r.h.Vacuum(r.ctx, full)
}

// opKill ends the store's connections: claims held in transactions are
// rolled back, and their holders find out at their next exchange.
func (r *modelRun) opKill() error {
	if r.h.KillConnections == nil {
		return errSkip
	}
	r.logf("outside: kill the store's connections")
	if err := r.h.KillConnections(r.ctx); err != nil {
		return err
	}
	var killed []*modelClaim
	for _, c := range slices.Clone(r.claims) {
		if c.held {
			c.killed = true
			r.endClaim(c, "connection killed")
			killed = append(killed, c)
		}
	}
	if err := r.waitHeldRolledBack("connections killed"); err != nil {
		return err
	}
	for _, c := range killed {
		_, err := r.store.SettleAndClaim(r.ctx, outboxdriver.Settlement{Token: c.token}, outboxdriver.Claim{})
		r.logf("   %s settles nothing after the kill (error: %v)", c.name, err)
	}
	return nil
}
