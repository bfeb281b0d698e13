package storetest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/go-outbox/outbox/outboxdriver"
)

// statusGone marks a model message that no longer exists: published
// without retention, discarded or purged.
const statusGone outboxdriver.Status = "gone"

// Leases of the model's claims. A short lease runs out before the next
// step (the model waits for it); a long one outlives the steps around it,
// and the model waits for it only when fewer than leaseMargin of it are
// left, so that no step runs while a lease may be ending.
const (
	modelLongLease = 30 * time.Second
	leaseMargin    = 5 * time.Second
	maxLiveClaims  = 3 // below the places a pool of 8 connections has for claims held in transactions
	maxEndedClaims = 4 // ended claims kept for late settlements
)

// modelMsg is what the model knows of one message.
type modelMsg struct {
	id        uuid.UUID
	name      string // for the step log: m<seq>, with its key
	seq       int    // insert order
	key       string
	topic     string
	payload   []byte
	headers   map[string]string
	status    outboxdriver.Status
	attempts  int
	lastError string
	// avLo and avHi bound the due time; they are equal once read back.
	avLo, avHi  time.Time
	createdAt   time.Time // as read back
	publishedAt time.Time // as read back, kept messages
	holder      *modelClaim
	// staleToken is the token of a leased claim that ended without
	// settling the message: it may still be on the row, so a late
	// settlement with it may or may not apply.
	staleToken uuid.UUID
	history    []string
}

func (m *modelMsg) note(step int, format string, args ...any) {
	m.history = append(m.history, fmt.Sprintf("step %d: ", step)+fmt.Sprintf(format, args...))
	if len(m.history) > 12 {
		m.history = m.history[len(m.history)-12:]
	}
}

// modelClaim is one claim the model made.
type modelClaim struct {
	name  string
	token uuid.UUID
	held  bool // in an open transaction (Harness.CountHeld)
	short bool
	lease time.Duration
	// startLo and startHi bound the claim's start: by the store's clock
	// for a lease written into the rows, by this host's for a held one
	// (whose lease is a timer of the store's process).
	startLo, startHi time.Time
	ids              []uuid.UUID // as claimed
	// remaining are the ids a held claim still holds (a release of part
	// of it takes them out, and shows when the claim is settled).
	remaining []uuid.UUID
	// partial: it returned fewer messages than its limit, so it read past
	// the due rows (see ModelHarness.HeldClaimsKeepTheNextEntry).
	partial bool
	ended   string // why it ended; "" while live
	killed  bool
}

func (c *modelClaim) endLo() time.Time { return c.startLo.Add(c.lease) }
func (c *modelClaim) endHi() time.Time { return c.startHi.Add(c.lease) }

// modelRun is one seed's run: the store, the model, and the step log.
type modelRun struct {
	ctx          context.Context
	h            ModelHarness
	store        outboxdriver.Store
	ordered      bool
	deadHoldsKey bool
	held         bool
	rng          *rand.Rand

	all        []*modelMsg // in insert order; gone ones are dropped now and then
	byID       map[uuid.UUID]*modelMsg
	rolledBack []uuid.UUID
	justGone   []uuid.UUID // since the last check
	claims     []*modelClaim
	ended      []*modelClaim
	nClaims    int
	seq        int
	step       int
	log        []string
}

func newModelRun(ctx context.Context, h ModelHarness, mode modelMode, seed uint64) *modelRun {
	return &modelRun{
		ctx:          ctx,
		h:            h,
		store:        mode.store(h.Harness),
		ordered:      mode != modeUnordered,
		deadHoldsKey: mode == modeKeyOrder,
		held:         h.CountHeld != nil,
		rng:          rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		byID:         map[uuid.UUID]*modelMsg{},
	}
}

func (r *modelRun) modeName() string {
	lease := "leases in columns"
	if r.held {
		lease = "leases held in transactions"
	}
	if r.ordered {
		return "key order (a dead message holds its key: " + fmt.Sprint(r.deadHoldsKey) + "), " + lease
	}
	return "unordered, " + lease
}

func (r *modelRun) logf(format string, args ...any) {
	r.log = append(r.log, fmt.Sprintf("%4d ", r.step)+fmt.Sprintf(format, args...))
	if len(r.log) > 4*modelLongSteps {
		r.log = slices.Delete(r.log, 0, modelLongSteps)
	}
}

// now reads the store's clock.
func (r *modelRun) now() (time.Time, error) {
	if r.h.Now == nil {
		return time.Now(), nil
	}
	now, err := r.h.Now(r.ctx)
	if err != nil {
		return time.Time{}, fmt.Errorf("read the store's clock: %w", err)
	}
	return now, nil
}

// claimClock reads the clock a claim's lease runs on: this host's for a
// claim held in a transaction, else the store's.
func (r *modelRun) claimClock() (time.Time, error) {
	if r.held {
		return time.Now(), nil
	}
	return r.now()
}

func (r *modelRun) name(id uuid.UUID) string {
	if m := r.byID[id]; m != nil {
		return m.name
	}
	return id.String()
}

func (r *modelRun) names(ids []uuid.UUID) string {
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = r.name(id)
	}
	return "[" + strings.Join(s, " ") + "]"
}

func (r *modelRun) describe(m *modelMsg) string {
	return fmt.Sprintf("%s (%s; history: %s)", m.name, m.id, strings.Join(m.history, "; "))
}

// live returns the messages that exist, in insert order.
func (r *modelRun) live() []*modelMsg {
	out := make([]*modelMsg, 0, len(r.all))
	for _, m := range r.all {
		if m.status != statusGone {
			out = append(out, m)
		}
	}
	return out
}

func (r *modelRun) withStatus(st outboxdriver.Status) []*modelMsg {
	var out []*modelMsg
	for _, m := range r.all {
		if m.status == st {
			out = append(out, m)
		}
	}
	return out
}

func (r *modelRun) gone(m *modelMsg, why string) {
	m.status, m.holder = statusGone, nil
	m.note(r.step, "%s", why)
	r.justGone = append(r.justGone, m.id)
}

// blocks reports whether m holds back the later messages of its key in key
// order.
func (r *modelRun) blocks(m *modelMsg) bool {
	return m.status == outboxdriver.StatusPending || (r.deadHoldsKey && m.status == outboxdriver.StatusDead)
}

// chain returns the messages of key that hold back the ones after them,
// in insert order: in key order a claim takes a prefix of it.
func (r *modelRun) chain(key string) []*modelMsg {
	var out []*modelMsg
	for _, m := range r.all {
		if m.key == key && r.blocks(m) {
			out = append(out, m)
		}
	}
	return out
}

// isHead reports whether no earlier message of m's key holds it back (in
// key order; always true otherwise).
func (r *modelRun) isHead(m *modelMsg) bool {
	if !r.ordered || m.key == "" {
		return true
	}
	for _, x := range r.all {
		if x.seq >= m.seq {
			break
		}
		if x.key == m.key && r.blocks(x) {
			return false
		}
	}
	return true
}

func free(m *modelMsg) bool { return m.status == outboxdriver.StatusPending && m.holder == nil }

// claimableSure reports whether a claim between t0 and t1 must see m as
// due and free; claimableMaybe whether it may.
func (r *modelRun) claimableSure(m *modelMsg, t0 time.Time) bool {
	return free(m) && !m.avHi.After(t0) && r.isHead(m)
}

// hiddenByHeldClaim reports whether a live held claim may keep m's entry
// locked (ModelHarness.HeldClaimsKeepTheNextEntry): it read past its due
// rows when m was perhaps not due yet.
func (r *modelRun) hiddenByHeldClaim(m *modelMsg) bool {
	if !r.h.HeldClaimsKeepTheNextEntry {
		return false
	}
	for _, c := range r.claims {
		if c.ended == "" && c.held && c.partial && m.avHi.After(c.startLo) {
			return true
		}
	}
	return false
}

func claimableMaybe(m *modelMsg, t1 time.Time) bool {
	return free(m) && !m.avLo.After(t1)
}

// endLeases waits, before a step, for every lease that could end during it
// to have ended (short leases, and long ones near their end), so that no
// step runs while a lease is ending; then the model ends those claims.
func (r *modelRun) endLeases() error {
	now, err := r.claimClock()
	if err != nil {
		return err
	}
	var ending []*modelClaim
	var until time.Time
	for _, c := range r.claims {
		if c.short || c.endLo().Before(now.Add(leaseMargin)) {
			ending = append(ending, c)
			if c.endHi().After(until) {
				until = c.endHi()
			}
		}
	}
	if len(ending) == 0 {
		return nil
	}
	deadline := time.Now().Add(waitTimeout + leaseMargin)
	for !now.After(until) {
		if time.Now().After(deadline) {
			return fmt.Errorf("the clock did not pass %v, the end of a lease, within %v", until, waitTimeout+leaseMargin)
		}
		time.Sleep(time.Millisecond)
		if now, err = r.claimClock(); err != nil {
			return err
		}
	}
	for _, c := range ending {
		r.endClaim(c, "lease ran out")
	}
	return r.waitHeldRolledBack("the lease ran out")
}

// endClaim ends c without a settlement: its leases ran out, or its
// transaction was rolled back. Its messages are as they were before it
// claimed them; leased ones may keep its token.
func (r *modelRun) endClaim(c *modelClaim, why string) {
	for _, id := range c.ids {
		if m := r.byID[id]; m != nil && m.holder == c {
			m.holder = nil
			if !c.held {
				m.staleToken = c.token
			}
			m.note(r.step, "%s: %s", c.name, why)
		}
	}
	r.retire(c, why)
}

// retire moves c to the ended claims.
func (r *modelRun) retire(c *modelClaim, why string) {
	c.ended = why
	r.claims = slices.DeleteFunc(r.claims, func(x *modelClaim) bool { return x == c })
	r.ended = append(r.ended, c)
	if len(r.ended) > maxEndedClaims {
		r.ended = r.ended[1:]
	}
	r.logf("   %s ended: %s", c.name, why)
}

// waitHeldRolledBack waits, with transaction leases, until the rows held
// are those of the live claims: the transactions of ended claims are
// rolled back by the server once their connection closes, a moment later.
func (r *modelRun) waitHeldRolledBack(why string) error {
	if !r.held {
		return nil
	}
	var want int64
	for _, c := range r.claims {
		want += int64(len(c.ids))
	}
	deadline := time.Now().Add(waitTimeout)
	for {
		n, err := r.h.CountHeld(r.ctx)
		if err != nil {
			return fmt.Errorf("count held messages: %w", err)
		}
		if n == want {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d messages held in transactions %v after claims ended (%s); want %d, those of the live claims", n, waitTimeout, why, want)
		}
		time.Sleep(pollInterval)
	}
}

// endAll settles what the run's claims hold, so that no transaction of
// theirs outlives the test.
func (r *modelRun) endAll() {
	ctx := context.WithoutCancel(r.ctx)
	for _, c := range slices.Concat(r.claims, r.ended) {
		_, _ = r.store.SettleAndClaim(ctx, outboxdriver.Settlement{Token: c.token, Release: c.ids}, outboxdriver.Claim{})
	}
}
