package outboxredis

import "github.com/go-outbox/outbox/internal/consume"

// Readiness tells whether a Consume call consumes: set a new one as
// ConsumerConfig.Readiness and serve its Ready as a readiness check (for
// example in outboxotel.ServeConfig.Ready). One Readiness follows one
// Consume call.
//
// Ready is nil while Consume reads its group, and otherwise an error that
// says why not and since when: not started, creating the group, Redis
// unreachable or refusing the credentials, the stream key of another type,
// or stopped (Consume returned). It changes where Consume logs those
// failures (see docs/consumers.md), so readiness and the logs tell the same
// story.
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
