package outbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"

	"github.com/go-outbox/outbox/outboxdriver"
)

// publish hands batch, claimed at claimed, to the publisher and turns its
// results into a settlement. Messages left unpublished because the relay is
// stopping, or because the claim's answer came too late in its lease, are
// released at once; messages whose destination was unavailable (reported
// true) are postponed by pause; messages the publisher held back, and those
// that follow in the batch a failed message of their key (the rest of a
// key's run, in key order), go back untried. None of these counts an
// attempt. A batch holds a key's messages in insert order (the store's
// claim sees to it in key order), and publishers keep that order.
func (r *Relay) publish(ctx context.Context, token uuid.UUID, batch []Message, claimed time.Time, pause time.Duration) (settle outboxdriver.Settlement, notes attemptNotes, unavailable bool) {
	// Stop publishing before the lease ends, so no other relay can claim a
	// message this one is still publishing. The lease counts from the
	// claim, not from its answer, which a slow database can delay.
	deadline := claimed.Add(publishTimeout(r.cfg.LeaseDuration))
	if late := time.Since(claimed); !time.Now().Before(deadline) {
		r.log.Warn("outbox relay: the store answered a claim too late in its lease to publish; batch released unpublished (raise LeaseDuration, or look at the database's latency)",
			slog.Duration("answered_after", late), slog.Duration("lease", r.cfg.LeaseDuration), slog.Int("messages", len(batch)))
		r.release(ctx, token, batch)
		for i := range batch {
			r.cfg.Observer.Settled(ctx, r.store.Name(), &batch[i], OutcomeReleased, nil)
		}
		return outboxdriver.Settlement{}, attemptNotes{}, false
	}
	pubCtx, cancel := context.WithDeadline(ctx, deadline)
	pubCtx, observed := r.cfg.Observer.Publishing(pubCtx, r.store.Name(), batch)
	results := r.publishAdmitted(pubCtx, batch, r.gates.admitter(r.gates.refresh(pubCtx, r.log, false)))
	cancel()
	observed(results)
	settle = outboxdriver.Settlement{Token: token, KeepPublished: r.cfg.Retention > 0}
	var release []uuid.UUID
	aborted := ctx.Err() != nil
	// failed holds the keys of which a message failed in this batch and
	// will be tried again, with the delay before that: what follows it of
	// its key was not (or must be taken as not) tried, and goes back
	// without an attempt, due no sooner than the failed one.
	failed := map[string]time.Duration{}
	keyOrder := r.claimsInKeyOrder()
	for i, err := range results {
		m := &batch[i]
		var outcome Outcome
		behind, keyFailed := failed[m.Key]
		keyFailed = keyFailed && m.Key != ""
		heldBack := err != nil && !IsPermanent(err) && (IsHeldBack(err) || keyFailed)
		switch {
		case err == nil:
			outcome = OutcomePublished
			settle.Published = append(settle.Published, m.ID)
			if m.Attempts > 0 || m.LastError != "" {
				// It failed before (a dead message retried starts again
				// at 0 attempts but keeps its last error): its history goes.
				notes.published = append(notes.published, m.ID)
			}
		case aborted && !IsPermanent(err):
			outcome = OutcomeReleased
			release = append(release, m.ID)
		case IsUnavailable(err) && !IsPermanent(err):
			outcome = OutcomePostponed
			// Postponed rather than released: a released message keeps its
			// place at the head of the queue, so the next claims would take
			// it again and again, and messages to destinations that are up
			// would never get a turn. By half the worker's pause: due again
			// while this worker still pauses, so that another relay that
			// reaches the destination takes it; postponed by the whole
			// pause, it came due just as this worker woke, which claimed it
			// first, every time (TestFaultStalledRabbitMQLink).
			settle.Retry = append(settle.Retry, outboxdriver.Retry{ID: m.ID, Delay: pause / 2, Error: err.Error(), Unsent: true})
			unavailable = true
		case heldBack:
			outcome = holdBack(&settle, m, err, behind)
			if pe := (*pausedError)(nil); errors.As(err, &pe) {
				if notes.paused == nil {
					notes.paused = map[string]bool{}
				}
				notes.paused[pe.topic] = true
			}
		case IsPermanent(err):
			outcome = OutcomeDead
			settle.Dead = append(settle.Dead, outboxdriver.Failure{ID: m.ID, Error: err.Error()})
			notes.failed = append(notes.failed, failedAttempt(m, err, outboxdriver.AttemptDead, permanentClass(err)))
			r.log.Warn("outbox relay: message dead-lettered (permanent error)", slog.String("message_id", m.ID.String()), slog.String("topic", m.Topic), slog.Any("error", err))
		case m.Attempts+1 >= r.cfg.MaxAttempts:
			outcome = OutcomeDead
			msg := fmt.Sprintf("attempt %d of %d: %v", m.Attempts+1, r.cfg.MaxAttempts, err)
			settle.Dead = append(settle.Dead, outboxdriver.Failure{ID: m.ID, Error: msg})
			notes.failed = append(notes.failed, failedAttempt(m, err, outboxdriver.AttemptDead, outboxdriver.ClassExhausted))
			r.log.Warn("outbox relay: message dead-lettered (attempts exhausted)", slog.String("message_id", m.ID.String()), slog.String("topic", m.Topic), slog.Any("error", err))
		default:
			outcome = OutcomeRetried
			delay := r.retryDelay(m.Attempts + 1)
			if after, ok := RetryAfterOf(err); ok {
				delay = max(delay, after) // the destination said when to come back
			}
			settle.Retry = append(settle.Retry, outboxdriver.Retry{ID: m.ID, Delay: delay, Error: err.Error()})
			notes.failed = append(notes.failed, failedAttempt(m, err, outboxdriver.AttemptRetried, outboxdriver.ClassRetryable))
		}
		// A message held back by the relay's own check (paused topic, rate
		// limit) holds its key only in key order: without it, the key's
		// other messages go on, and one that fails takes its own backoff.
		if err != nil && outcome != OutcomeDead && !keyFailed && (keyOrder || !isAdmissionRefusal(err)) {
			failed[m.Key] = lastDelay(&settle, m.ID)
		}
		r.cfg.Observer.Settled(ctx, r.store.Name(), m, outcome, err)
	}
	if len(release) > 0 {
		r.releaseIDs(ctx, token, release)
	}
	return settle, notes, unavailable
}

// holdBack records m, which was not tried (err says why), to go back
// without an attempt: postponed by the longer of the delay err asks for
// (RetryAfter) and behind, the delay of the message of its key that failed
// before it in the batch; released, in its place, when both are zero. So
// the rest of a key's run waits as long as the message that failed (in key
// order it could not go sooner anyway), and, without key order, a failing
// key's messages are not claimed again and again while it waits.
func holdBack(settle *outboxdriver.Settlement, m *Message, err error, behind time.Duration) Outcome {
	delay := behind
	if after, ok := RetryAfterOf(err); ok {
		delay = max(delay, after)
	}
	if delay <= 0 {
		settle.Release = append(settle.Release, m.ID)
		return OutcomeReleased
	}
	settle.Retry = append(settle.Retry, outboxdriver.Retry{ID: m.ID, Delay: delay, Error: err.Error(), Unsent: true})
	return OutcomePostponed
}

// lastDelay returns the delay of id's retry if it is the last one in
// settle, and 0 otherwise (released).
func lastDelay(settle *outboxdriver.Settlement, id uuid.UUID) time.Duration {
	if n := len(settle.Retry); n > 0 && settle.Retry[n-1].ID == id {
		return settle.Retry[n-1].Delay
	}
	return 0
}

// release gives batch's leases back, so the messages are due again at once
// without counting an attempt.
func (r *Relay) release(ctx context.Context, token uuid.UUID, batch []Message) {
	ids := make([]uuid.UUID, len(batch))
	for i := range batch {
		ids[i] = batch[i].ID
	}
	r.releaseIDs(ctx, token, ids)
}

func (r *Relay) releaseIDs(ctx context.Context, token uuid.UUID, ids []uuid.UUID) {
	storeCtx, cancel := r.storeCtx(ctx)
	defer cancel()
	if err := r.store.Release(storeCtx, token, ids); err != nil {
		r.log.Warn("outbox relay: releasing leases failed; the messages are due again when their lease expires", slog.Any("error", err), slog.Int("messages", len(ids)))
	}
}

// publishTimeout bounds the publishing of a batch leased for lease: nine
// tenths of it (lease*9 would overflow for a lease of decades).
func publishTimeout(lease time.Duration) time.Duration { return lease - lease/10 }
