package outbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-outbox/outbox/outboxdriver"
)

// A paused topic (outboxdriver.TopicPauser, `outbox pause`) has its pending
// messages moved out of the due range by the pause itself, so claims do not
// meet them. A relay meets only what was written after the pause, or put
// back by another relay: it reads the paused topics at most every
// Config.PauseCheckInterval, while it has messages to publish, and postpones
// a message of a paused topic by outboxdriver.PauseShift (a retry that counts
// no attempt), into the same range, with the rest of its key behind it in
// key order. A relay that had not yet seen a pause may publish such a
// message within that interval.
//
// A relay that had not yet seen a resume may postpone a message after the
// resume moved the topic's messages back: after each settlement that
// carried postponements for a pause, it asks which of their topics are
// still paused (PausedAmong) and, if one is not, moves back what no pause
// holds. A resume that has not begun by then moves the message back
// itself; one under way makes the check wait for a later heartbeat. Every
// sweepBeats heartbeats, and at its first, a relay moves back what no pause
// holds unasked, for checks lost with a relay that stopped.

// topicGates are the relay's checks of a message's topic before it is
// published: paused, or over its rate limit.
type topicGates struct {
	pauser   outboxdriver.TopicPauser // nil: the store cannot pause topics
	interval time.Duration

	mu        sync.Mutex
	paused    map[string]bool
	checkedAt time.Time
	warned    bool // the paused topics could not be read, and it was logged
	// owed are the topics whose check after a postponement is owed
	// (afterPauseSettled, sweepPaused).
	owed map[string]bool
	// checkWarned says a failed check was logged; beats counts heartbeats
	// for sweepPaused.
	checkWarned atomic.Bool
	beats       atomic.Int64

	limits map[string]*tokenBucket // by topic; fixed after NewRelay
}

func newTopicGates(store outboxdriver.Store, cfg Config) *topicGates {
	g := &topicGates{interval: cfg.PauseCheckInterval, limits: map[string]*tokenBucket{}}
	g.pauser, _ = store.(outboxdriver.TopicPauser)
	for topic, rate := range cfg.TopicRateLimits {
		g.limits[topic] = newTokenBucket(rate)
	}
	return g
}

// pausedError is the held-back outcome of a message of a paused topic.
type pausedError struct{ topic string }

func (e *pausedError) Error() string {
	return fmt.Sprintf("topic %q is paused: not published, postponed until it is resumed (`outbox resume --topic %s`)", e.topic, e.topic)
}

// rateLimitedError is the held-back outcome of a message over its topic's
// rate limit.
type rateLimitedError struct {
	topic string
	rate  float64
}

func (e *rateLimitedError) Error() string {
	return fmt.Sprintf("topic %q is over its rate limit of %g messages per second in this relay: postponed", e.topic, e.rate)
}

// isAdmissionRefusal reports whether err is the relay's own refusal of a
// message: its topic is paused or over its rate limit.
func isAdmissionRefusal(err error) bool {
	var (
		pe *pausedError
		re *rateLimitedError
	)
	return errors.As(err, &pe) || errors.As(err, &re)
}

// refresh reads the paused topics if the last read is older than the
// interval (force: whatever its age) and returns them. If they cannot be
// read, the last ones read stay (none at first), and it is logged once.
func (g *topicGates) refresh(ctx context.Context, log *slog.Logger, force bool) map[string]bool {
	if g.pauser == nil {
		return nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if !force && time.Since(g.checkedAt) < g.interval {
		return g.paused
	}
	names, err := g.pauser.PausedTopicNames(ctx)
	g.checkedAt = time.Now()
	if err != nil {
		if !g.warned {
			g.warned = true
			msg := "outbox relay: cannot read the paused topics; it goes on with the ones it read last (none, at first) until it can"
			if errors.Is(err, outboxdriver.ErrNotMigrated) {
				msg = "outbox relay: the table has no paused topics table yet; publishing every topic (run `outbox migrate up` to pause topics)"
			}
			log.Warn(msg, slog.Any("error", err))
		}
		return g.paused
	}
	g.warned = false
	paused := map[string]bool{}
	for _, topic := range names {
		paused[topic] = true
	}
	g.paused = paused
	return paused
}

// admitter returns the check of one batch's messages: nil for a message to
// publish, else why it is held back (with the delay to postpone it by).
// Each call takes a rate limit's token for a message it lets through.
func (g *topicGates) admitter(paused map[string]bool) func(m *Message) error {
	if len(paused) == 0 && len(g.limits) == 0 {
		return nil
	}
	over := map[string]int{} // messages of the batch already over their topic's limit
	now := time.Now()
	return func(m *Message) error {
		if paused[m.Topic] {
			return RetryAfter(HeldBack(&pausedError{topic: m.Topic}), outboxdriver.PauseShift)
		}
		b := g.limits[m.Topic]
		if b == nil {
			return nil
		}
		wait := b.take(now, over[m.Topic])
		if wait <= 0 {
			return nil
		}
		over[m.Topic]++
		return RetryAfter(HeldBack(&rateLimitedError{topic: m.Topic, rate: b.rate}), wait)
	}
}

// afterPauseSettled runs after a settlement that postponed messages of
// topics for a pause has been recorded: it asks the store which of those
// topics are still paused (TopicPauser.PausedAmong), and if one is not, the
// resume may have moved its messages back before this settlement moved some
// of them out again: the relay moves back what no pause holds. While a
// pause or resume of them is under way, or if the store cannot answer, the
// check is owed and made again at each heartbeat (sweepPaused), so no
// worker waits for a resume.
func (r *Relay) afterPauseSettled(ctx context.Context, topics map[string]bool) {
	if len(topics) == 0 || r.gates.pauser == nil {
		return
	}
	storeCtx, cancel := r.storeCtx(ctx)
	defer cancel()
	r.checkResumed(storeCtx, topics)
}

// checkResumed makes the check of afterPauseSettled for topics, and owes it
// again if it cannot be made now.
func (r *Relay) checkResumed(ctx context.Context, topics map[string]bool) {
	names := slices.Sorted(maps.Keys(topics))
	still, err := r.gates.pauser.PausedAmong(ctx, names)
	if err != nil {
		r.gates.owe(topics)
		if !errors.Is(err, outboxdriver.ErrPauseChanging) && !r.gates.checkWarned.Swap(true) {
			r.log.Warn("outbox relay: cannot read whether the topics it postponed for a pause are still paused; it asks again at each heartbeat, then moves back what no pause holds (relays need UPDATE on the paused topics table)", slog.Any("error", err))
		}
		return
	}
	r.gates.checkWarned.Store(false)
	if len(still) == len(names) {
		return
	}
	r.gates.refresh(ctx, r.log, true) // stop postponing the resumed topics
	if !r.moveBack(ctx, "a pause that ended meanwhile") {
		r.gates.owe(topics)
	}
}

// sweepBeats is how many heartbeats apart a relay moves back, unasked, what
// no pause holds: a postponement whose check was lost (the relay stopped or
// died between its settlement and its check) is moved back by the next
// relay to start, or by a running one within this many beats.
const sweepBeats = 30

// sweepPaused runs at each heartbeat: it makes the checks owed, and moves
// back what no pause holds at the relay's first beat and every sweepBeats.
func (r *Relay) sweepPaused(ctx context.Context) {
	if r.gates.pauser == nil {
		return
	}
	storeCtx, cancel := r.storeCtx(ctx)
	defer cancel()
	if owed := r.gates.takeOwed(); len(owed) > 0 {
		r.checkResumed(storeCtx, owed)
	}
	if r.gates.beats.Add(1)%sweepBeats == 1 {
		r.moveBack(storeCtx, "a pause that ended before a relay could check")
	}
}

// moveBack runs MoveBackUnpaused and reports whether it succeeded.
func (r *Relay) moveBack(ctx context.Context, why string) bool {
	n, err := r.gates.pauser.MoveBackUnpaused(ctx)
	switch {
	case errors.Is(err, outboxdriver.ErrNotMigrated):
	case err != nil:
		r.log.Warn("outbox relay: moving back messages postponed for "+why+" failed; it tries again at a later heartbeat (`outbox resume --topic T` moves them back too)", slog.Any("error", err))
		return false
	case n > 0:
		r.log.Info("outbox relay: moved back messages postponed for "+why, slog.Int("messages", n))
	}
	return true
}

// owe records that the check of afterPauseSettled is owed for topics.
func (g *topicGates) owe(topics map[string]bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.owed == nil {
		g.owed = map[string]bool{}
	}
	maps.Copy(g.owed, topics)
}

// takeOwed returns the topics whose check is owed, and owes none.
func (g *topicGates) takeOwed() map[string]bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	owed := g.owed
	g.owed = nil
	return owed
}

// tokenBucket is a topic's rate limit in one relay: rate tokens a second,
// at most one second's worth (and at least one) saved up.
type tokenBucket struct {
	rate float64

	mu     sync.Mutex
	tokens float64
	at     time.Time
}

func newTokenBucket(rate float64) *tokenBucket {
	return &tokenBucket{rate: rate, tokens: max(rate, 1), at: time.Now()}
}

// take takes a token at now and returns 0, or, when it cannot, how long
// until there is one for a message that has queued others of its batch
// ahead of it that were refused (they take none: they are postponed, and
// take their token when they come back). Once one message of a batch is
// refused, the later ones of its topic are too, so they do not overtake
// it, whatever another worker's refill left in the bucket since.
func (b *tokenBucket) take(now time.Time, queued int) time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	if now.After(b.at) {
		b.tokens = min(b.tokens+now.Sub(b.at).Seconds()*b.rate, max(b.rate, 1))
		b.at = now
	}
	if queued == 0 && b.tokens >= 1 {
		b.tokens--
		return 0
	}
	need := float64(queued) + 1 - b.tokens
	if need <= 0 { // queued > 0: a refill since the refusal; stay behind it
		need = float64(queued)
	}
	return time.Duration(need / b.rate * float64(time.Second))
}
