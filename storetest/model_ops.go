package storetest

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/outboxdriver"
)

// errSkip means an operation does not apply to the model's state (no dead
// message to retry, say) or to the harness (a hook is nil).
var errSkip = errors.New("skip")

// modelKeys are few, so that keys collide; "" is a message without a key.
var modelKeys = []string{"", "", "a", "b", "c", "d", "a", "b"}

type modelOp struct {
	name   string
	weight int
	run    func(r *modelRun) error
}

var modelOps = []modelOp{
	{"write", 22, func(r *modelRun) error { return r.opWrite(true) }},
	{"write rolled back", 4, func(r *modelRun) error { return r.opWrite(false) }},
	{"claim", 18, func(r *modelRun) error { return r.opExchange(false, true) }},
	{"settle", 16, func(r *modelRun) error { return r.opExchange(true, false) }},
	{"settle and claim", 6, func(r *modelRun) error { return r.opExchange(true, true) }},
	{"late settlement", 4, (*modelRun).opLateSettle},
	{"release", 5, (*modelRun).opRelease},
	{"retry dead", 4, func(r *modelRun) error { return r.opRetryDead(false) }},
	{"retry all dead", 1, func(r *modelRun) error { return r.opRetryDead(true) }},
	{"discard dead", 3, (*modelRun).opDiscardDead},
	{"list dead", 2, (*modelRun).opListDead},
	{"get unknown", 1, (*modelRun).opGetUnknown},
	{"purge", 2, (*modelRun).opPurge},
	{"next due", 4, (*modelRun).checkNextDue},
	{"touch", 3, (*modelRun).opTouch},
	{"set payload", 2, (*modelRun).opSetPayload},
	{"reschedule", 3, (*modelRun).opReschedule},
	{"vacuum", 2, func(r *modelRun) error { return r.opVacuum(false) }},
	{"vacuum full", 1, func(r *modelRun) error { return r.opVacuum(true) }},
	{"kill connections", 1, (*modelRun).opKill},
}

var modelOpsWeight = func() int {
	n := 0
	for _, op := range modelOps {
		n += op.weight
	}
	return n
}()

// randomStep runs one operation drawn by weight among those that apply.
func (r *modelRun) randomStep() error {
	for range 32 {
		x := r.rng.IntN(modelOpsWeight)
		for _, op := range modelOps {
			if x -= op.weight; x < 0 {
				err := op.run(r)
				if errors.Is(err, errSkip) {
					break
				}
				if err != nil {
					return fmt.Errorf("%s: %w", op.name, err)
				}
				return nil
			}
		}
	}
	return nil
}

func (r *modelRun) opWrite(commit bool) error {
	n := 1 + r.rng.IntN(3)
	if r.rng.IntN(8) == 0 {
		n = 4 + r.rng.IntN(4)
	}
	t0, err := r.now()
	if err != nil {
		return err
	}
	msgs := make([]*outbox.Message, n)
	for i := range msgs {
		m := &outbox.Message{
			ID:      uuid.Must(uuid.NewV7()),
			Topic:   "model",
			Key:     modelKeys[r.rng.IntN(len(modelKeys))],
			Payload: fmt.Appendf(nil, "step %d \x00\xff #%d", r.step, i),
		}
		switch x := r.rng.IntN(20); {
		case x < 3: // due in the past: before messages written earlier
			m.AvailableAt = t0.Add(-time.Duration(1+r.rng.IntN(600)) * time.Second)
		case x < 5: // due in a moment
			m.AvailableAt = t0.Add(time.Duration(20+r.rng.IntN(300)) * time.Millisecond)
		case x < 6:
			m.AvailableAt = t0.Add(time.Hour)
		}
		if r.rng.IntN(3) == 0 {
			m.Headers = map[string]string{"step": fmt.Sprint(r.step)}
		}
		msgs[i] = m
	}
	write, verb := r.h.Write, "write"
	if !commit {
		write, verb = r.h.WriteRollback, "write and roll back"
	}
	if err := write(r.ctx, msgs...); err != nil {
		return fmt.Errorf("%s %d message(s): %w", verb, n, err)
	}
	t1, err := r.now()
	if err != nil {
		return err
	}
	var names []string
	for _, msg := range msgs {
		if !commit {
			r.rolledBack = append(r.rolledBack, msg.ID)
			names = append(names, msg.ID.String()[:8])
			continue
		}
		r.seq++
		m := &modelMsg{id: msg.ID, seq: r.seq, key: msg.Key, topic: msg.Topic, payload: msg.Payload, headers: msg.Headers,
			status: outboxdriver.StatusPending, avLo: t0, avHi: t1}
		m.name = fmt.Sprintf("m%d", m.seq)
		if m.key != "" {
			m.name += "/" + m.key
		}
		if !msg.AvailableAt.IsZero() {
			m.avLo, m.avHi = msg.AvailableAt, msg.AvailableAt
			m.name += fmt.Sprintf("@%+dms", msg.AvailableAt.Sub(t0).Milliseconds())
		}
		m.note(r.step, "written")
		r.all = append(r.all, m)
		r.byID[m.id] = m
		names = append(names, m.name)
	}
	r.logf("%s %v", verb, names)
	return nil
}

// modelOutcome is one message's outcome in a settlement.
type modelOutcome struct {
	id    uuid.UUID
	kind  string // published, retry, dead, release
	retry outboxdriver.Retry
	err   string
}

func (o modelOutcome) String() string {
	switch o.kind {
	case "retry":
		unsent := ""
		if o.retry.Unsent {
			unsent = " unsent"
		}
		return fmt.Sprintf("retry%s in %v", unsent, o.retry.Delay)
	}
	return o.kind
}

// randomOutcome draws an outcome for id; failures only, when fail.
func (r *modelRun) randomOutcome(id uuid.UUID, fail bool) modelOutcome {
	o := modelOutcome{id: id, err: fmt.Sprintf("error of step %d for %s", r.step, r.name(id))}
	x := r.rng.IntN(10)
	if fail {
		x = 4 + r.rng.IntN(4)
	}
	switch {
	case x < 4:
		o.kind = "published"
	case x < 7:
		o.kind = "retry"
		o.retry = outboxdriver.Retry{ID: id, Error: o.err, Unsent: x == 6}
		switch y := r.rng.IntN(20); {
		case y < 5:
		case y < 19:
			o.retry.Delay = time.Duration(20+r.rng.IntN(200)) * time.Millisecond
		default:
			o.retry.Delay = time.Hour
		}
	case x < 8:
		o.kind = "dead"
	default:
		o.kind = "release"
	}
	return o
}

// holds returns the ids c still holds, in insert order: for an ended
// claim, all it claimed.
func (r *modelRun) holds(c *modelClaim) []uuid.UUID {
	var out []uuid.UUID
	switch {
	case c.ended != "":
		for _, id := range c.ids {
			if r.byID[id] != nil {
				out = append(out, id)
			}
		}
	case c.held:
		out = slices.Clone(c.remaining)
	default:
		for _, id := range c.ids {
			if m := r.byID[id]; m != nil && m.holder == c {
				out = append(out, id)
			}
		}
	}
	slices.SortFunc(out, func(a, b uuid.UUID) int { return r.seqOf(a) - r.seqOf(b) })
	return out
}

func (r *modelRun) seqOf(id uuid.UUID) int {
	if m := r.byID[id]; m != nil {
		return m.seq
	}
	return 0
}

// genOutcomes draws a settlement of ids. In key order it settles each
// key's run as a relay does: a prefix published (or dead, where a dead
// message lets its key go on), then maybe one failure and the rest
// released, or the rest released, or left held.
func (r *modelRun) genOutcomes(ids []uuid.UUID) []modelOutcome {
	var out []modelOutcome
	if !r.ordered {
		for _, id := range ids {
			if r.rng.IntN(5) > 0 {
				out = append(out, r.randomOutcome(id, false))
			}
		}
		if r.rng.IntN(8) == 0 {
			if live := r.live(); len(live) > 0 {
				if id := live[r.rng.IntN(len(live))].id; !slices.Contains(ids, id) {
					out = append(out, r.randomOutcome(id, false)) // not the claim's: must change nothing
				}
			}
		}
		return out
	}
	runs := map[string][]uuid.UUID{}
	var keys []string
	for _, id := range ids {
		key := r.byID[id].key
		if key == "" {
			if r.rng.IntN(5) > 0 {
				out = append(out, r.randomOutcome(id, false))
			}
			continue
		}
		if runs[key] == nil {
			keys = append(keys, key)
		}
		runs[key] = append(runs[key], id)
	}
	for _, key := range keys {
		run := runs[key]
		p := r.rng.IntN(len(run) + 1)
		for _, id := range run[:p] {
			o := modelOutcome{id: id, kind: "published"}
			if !r.deadHoldsKey && r.rng.IntN(6) == 0 {
				o = modelOutcome{id: id, kind: "dead", err: fmt.Sprintf("error of step %d for %s", r.step, r.name(id))}
			}
			out = append(out, o)
		}
		rest := run[p:]
		if len(rest) == 0 {
			continue
		}
		switch r.rng.IntN(3) {
		case 0:
			out = append(out, r.randomOutcome(rest[0], true))
			rest = rest[1:]
			fallthrough
		case 1:
			for _, id := range rest {
				out = append(out, modelOutcome{id: id, kind: "release"})
			}
		}
	}
	return out
}

func settlementOf(token uuid.UUID, keep bool, outcomes []modelOutcome) outboxdriver.Settlement {
	s := outboxdriver.Settlement{Token: token, KeepPublished: keep}
	for _, o := range outcomes {
		switch o.kind {
		case "published":
			s.Published = append(s.Published, o.id)
		case "retry":
			s.Retry = append(s.Retry, o.retry)
		case "dead":
			s.Dead = append(s.Dead, outboxdriver.Failure{ID: o.id, Error: o.err})
		case "release":
			s.Release = append(s.Release, o.id)
		}
	}
	return s
}

func (r *modelRun) describeOutcomes(outcomes []modelOutcome) string {
	s := "["
	for i, o := range outcomes {
		if i > 0 {
			s += " "
		}
		s += r.name(o.id) + ":" + o.String()
	}
	return s + "]"
}
