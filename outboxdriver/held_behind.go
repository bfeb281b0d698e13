package outboxdriver

import "github.com/google/uuid"

// HoldBehindFailures is for stores that claim in key order and dead-letter,
// within the claim, messages no publisher could send (a stored row that does
// not decode). msgs is the claim in run order (each key's messages together,
// in the key's order) with those failed messages still in it. It returns the
// messages to hand to the relay: msgs less the failed ones and less every
// later message of a failed one's key, which it returns as held. When dead
// messages hold their keys, the store hands the held ones back untried
// (Settlement.Release) so they wait behind the dead one; published with the
// batch, they would go out before it.
func HoldBehindFailures(msgs []Message, failed []Failure) (send []Message, held []uuid.UUID) {
	if len(failed) == 0 {
		return msgs, nil
	}
	isFailed := make(map[uuid.UUID]bool, len(failed))
	for _, f := range failed {
		isFailed[f.ID] = true
	}
	stopped := map[string]bool{}
	send = msgs[:0:0]
	for _, m := range msgs {
		switch {
		case isFailed[m.ID]:
			if m.Key != "" {
				stopped[m.Key] = true
			}
		case m.Key != "" && stopped[m.Key]:
			held = append(held, m.ID)
		default:
			send = append(send, m)
		}
	}
	return send, held
}
