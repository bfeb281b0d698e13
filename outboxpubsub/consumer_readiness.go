package outboxpubsub

import "github.com/go-outbox/outbox/internal/consume"

// Readiness tells whether a Consume call consumes: set a new one as
// ConsumerConfig.Readiness and serve its Ready as a readiness check (for
// example in outboxotel.ServeConfig.Ready). One Readiness follows one
// Consume call.
//
// Ready is nil while Consume receives from its subscription, and otherwise
// an error that says why not and since when: not started, checking the
// subscription, the subscription missing, credentials or permission
// refused, Pub/Sub unreachable (with the last connection error), receiving
// stopped and starting again, or stopped (Consume returned). It changes
// where Consume logs those failures (see docs/consumers.md), so readiness
// and the logs tell the same story. The client retries an unreachable
// Pub/Sub within Receive without a word, so Consume reads the subscription
// every few seconds while it receives to find out: Ready fails once a read
// gets no answer within a few seconds, and is nil again once one does (or
// a message comes). Credentials that may not read the subscription
// (roles/pubsub.subscriber alone) skip those reads, and then Ready stays nil
// through such an outage.
type Readiness struct{ r consume.Readiness }

// Ready returns nil while the Consume call it was given to consumes, else
// why not.
func (r *Readiness) Ready() error { return r.state().Ready() }

// state is what Consume updates; nil (updates do nothing) without a
// Readiness.
func (r *Readiness) state() *consume.Readiness {
	if r == nil {
		return nil
	}
	return &r.r
}
