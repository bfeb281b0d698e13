package outboxaws

import "github.com/go-outbox/outbox/internal/consume"

// Readiness tells whether a ConsumeSQS call consumes: set a new one as
// ConsumerSQSConfig.Readiness and serve its Ready as a readiness check (for
// example in outboxotel.ServeConfig.Ready). One Readiness follows one
// ConsumeSQS call.
//
// Ready is nil while ConsumeSQS's receives succeed, and otherwise an error
// that says why not and since when: not started, looking the queue up, SQS
// unreachable, the queue missing, access denied, or stopped (ConsumeSQS
// returned). It changes where ConsumeSQS logs those failures (see
// docs/consumers.md), so readiness and the logs tell the same story.
type Readiness struct{ r consume.Readiness }

// Ready returns nil while the ConsumeSQS call it was given to consumes,
// else why not.
func (r *Readiness) Ready() error { return r.state().Ready() }

// state is what ConsumeSQS updates; nil (updates do nothing) without a
// Readiness.
func (r *Readiness) state() *consume.Readiness {
	if r == nil {
		return nil
	}
	return &r.r
}
