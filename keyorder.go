package outbox

import (
	"context"
	"fmt"
	"log/slog"
	"slices"

	"github.com/go-outbox/outbox/outboxdriver"
)

// KeyOrderKeeper is implemented by publishers that keep a key's order within
// one batch themselves: after a message of a non-empty key fails, for good
// or not, they do not send the later messages of that key in the batch and
// report them HeldBack. Handlers, outboxevents.Dispatcher and the webhook
// publisher (outboxhttp) do. A permanent failure holds the key too: the
// message goes to the dead letters, and by default a dead message holds the
// rest of its key (a store that skips dead messages in key order claims
// them again at once, one claim later).
//
// A claim in key order carries a run of each key's messages, in order. A
// publisher that keeps key order gets the batch whole. Any other (the
// brokers' publishers send a batch at once and then collect the
// confirmations, so a key's second message can be confirmed when its first
// was refused) gets it in waves, each with the next message of every key
// whose earlier ones were all confirmed: a key's messages then go one round
// trip apart, as they did before runs, and never out of order.
type KeyOrderKeeper interface {
	Publisher
	KeepsKeyOrder()
}

// publishBatch hands batch to the publisher: whole, when the store's claims
// do not keep key order (there is no order to keep, and waves would cost a
// round trip per message of a repeated key), when the publisher keeps key
// order, or when no key has two messages in it; in waves otherwise (see
// KeyOrderKeeper). The result has one error per message of batch.
func (r *Relay) publishBatch(ctx context.Context, batch []Message) []error {
	if _, keeps := r.pub.(KeyOrderKeeper); keeps || !r.claimsInKeyOrder() || !hasRuns(batch) {
		return r.publishChecked(ctx, batch)
	}
	results := make([]error, len(batch))
	sent := make([]bool, len(batch))
	// Each key's messages in batch order; messages without a key go in the
	// first wave.
	var keys []string
	byKey := map[string][]int{}
	var first []int
	for i := range batch {
		k := batch[i].Key
		if k == "" {
			first = append(first, i)
			continue
		}
		if _, ok := byKey[k]; !ok {
			keys = append(keys, k)
		}
		byKey[k] = append(byKey[k], i)
	}
	failed := map[string]error{} // key -> the error that stopped it
	for wave := 0; ; wave++ {
		at := first // the batch index of each message of the wave
		first = nil
		for _, k := range keys {
			if idx := byKey[k]; failed[k] == nil && wave < len(idx) {
				at = append(at, idx[wave])
			}
		}
		if len(at) == 0 {
			break
		}
		// A wave goes out a round trip after the one before: a message
		// that expired meanwhile is dead, and holds the rest of its key.
		at = r.dropExpired(batch, at, sent, results, failed)
		if len(at) == 0 {
			continue
		}
		slices.Sort(at)
		msgs := make([]Message, len(at))
		for j, i := range at {
			msgs[j] = batch[i]
		}
		errs := r.publishChecked(ctx, msgs)
		for j, i := range at {
			sent[i], results[i] = true, errs[j]
			if k := batch[i].Key; errs[j] != nil && k != "" {
				failed[k] = errs[j]
			}
		}
	}
	for i := range batch {
		if !sent[i] {
			results[i] = HeldBack(fmt.Errorf("not sent: an earlier message of key %q failed: %v", batch[i].Key, failed[batch[i].Key]))
		}
	}
	return results
}

// claimsInKeyOrder reports whether the store's claims keep key order (see
// outboxdriver.KeyOrderClaimer); a store that cannot tell is taken to.
func (r *Relay) claimsInKeyOrder() bool {
	if k, ok := r.store.(outboxdriver.KeyOrderClaimer); ok {
		return k.ClaimsInKeyOrder()
	}
	return true
}

// hasRuns reports whether two messages of batch share a non-empty key.
func hasRuns(batch []Message) bool {
	seen := make(map[string]bool, len(batch))
	for i := range batch {
		if k := batch[i].Key; k != "" {
			if seen[k] {
				return true
			}
			seen[k] = true
		}
	}
	return false
}

// publishChecked hands msgs to the publisher and returns one result per
// message. A publisher that returns another number of results is broken:
// its results cannot be matched to the messages, so none is taken as
// published; each gets a retryable error, and the relay logs it.
func (r *Relay) publishChecked(ctx context.Context, msgs []Message) []error {
	errs := r.pub.Publish(ctx, msgs)
	if len(errs) == len(msgs) {
		return errs
	}
	err := fmt.Errorf("publisher returned %d results for %d messages", len(errs), len(msgs))
	r.log.Error("outbox relay: broken publisher", slog.Any("error", err))
	errs = make([]error, len(msgs))
	for i := range errs {
		errs[i] = err
	}
	return errs
}
