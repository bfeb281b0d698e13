package outbox

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"time"
)

// HeaderExpiresAt is the header that holds a message's expiry (RFC 3339, UTC,
// nanoseconds): the writer sets it from Message.ExpiresAt or the topic's
// default (WriterConfig.ExpireAfter), the relay reads it before publishing,
// and consumers receive it with the message's other headers, so they too can
// drop what came too late. Written under exactly this name.
const HeaderExpiresAt = "Outbox-Expires-At"

// ErrExpired is in the chain of the error a relay dead-letters a message
// with when its expiry passed before it could be published. Such a message
// is never sent late: it is a dead letter (`outbox dead list` shows
// "expired at ..."), which an operator discards (retried, it dies again at
// once), and in key order it holds the rest of its key until then, unless
// the store skips dead messages.
var ErrExpired = errors.New("outbox: message expired before it was published")

// ExpiresAt returns the expiry of m: its ExpiresAt field when set (a
// message being written), else its HeaderExpiresAt header (a message read
// from a store or received by a consumer). ok is false when it has none or
// the header is not a time.
func ExpiresAt(m *Message) (t time.Time, ok bool) {
	if !m.ExpiresAt.IsZero() {
		return m.ExpiresAt, true
	}
	v, found := m.Headers[HeaderExpiresAt]
	if !found {
		return time.Time{}, false
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	return t, err == nil
}

// expiredError is the outcome of a message whose expiry passed.
type expiredError struct{ at time.Time }

func (e *expiredError) Error() string {
	return fmt.Sprintf("expired at %s: not published (its expiry passed before the relay could publish it)", e.at.UTC().Format(time.RFC3339Nano))
}
func (e *expiredError) Unwrap() error { return ErrExpired }

// stampExpiry stores m's expiry in its HeaderExpiresAt header, on its own
// copy of the headers: from ExpiresAt, or else now plus the topic's default
// in expireAfter when the message has no expiry header yet. It refuses a
// header that is not a time and an expiry that comes no later than the
// message may be published.
func stampExpiry(m *Message, expireAfter map[string]time.Duration, now time.Time) error {
	at := m.ExpiresAt
	if at.IsZero() {
		if v, found := m.Headers[HeaderExpiresAt]; found {
			t, err := time.Parse(time.RFC3339Nano, v)
			if err != nil {
				return invalidMessage(m, "Headers["+HeaderExpiresAt+"]", shorten(v), "is not an RFC 3339 time; set Message.ExpiresAt instead and the writer fills the header")
			}
			at = t
		} else if d, ok := expireAfter[m.Topic]; ok {
			at = now.Add(d)
		}
	}
	if at.IsZero() {
		return nil
	}
	if !m.AvailableAt.IsZero() && !at.After(m.AvailableAt) {
		return invalidMessage(m, "ExpiresAt", at.UTC().Format(time.RFC3339Nano),
			fmt.Sprintf("is not after AvailableAt %s: the message could never be published; move one of them", m.AvailableAt.UTC().Format(time.RFC3339Nano)))
	}
	m.Headers = maps.Clone(m.Headers)
	if m.Headers == nil {
		m.Headers = map[string]string{}
	}
	m.Headers[HeaderExpiresAt] = at.UTC().Format(time.RFC3339Nano)
	return nil
}

// publishAdmitted hands to the publisher the messages of batch that may go
// now, and gives the others their outcome unsent: a permanent error
// wrapping ErrExpired for a message whose expiry passed (dead-lettered),
// and a held-back error with the delay to postpone it by for one that admit
// (nil: every one) refuses, of a paused topic or over its rate limit. In key
// order, what follows such a message of its key in the batch is held back
// untried: published, it would overtake it. The result has one error per
// message of batch.
func (r *Relay) publishAdmitted(ctx context.Context, batch []Message, admit func(*Message) error) []error {
	now := time.Now()
	var (
		results []error           // nil while every message goes
		stopped map[string]string // in key order: keys with a message kept back, and why
		send    []Message
		sentAt  []int // the batch index of each message of send
	)
	keyOrder := r.claimsInKeyOrder()
	for i := range batch {
		m := &batch[i]
		var verdict error
		why := "" // what stops the rest of its key, in key order
		switch at, ok := ExpiresAt(m); {
		case ok && !now.Before(at):
			verdict, why = Permanent(&expiredError{at: at}), "expired and is dead-lettered"
		case m.Key != "" && stopped[m.Key] != "":
			verdict = HeldBack(fmt.Errorf("not tried: an earlier message of key %q %s", m.Key, stopped[m.Key]))
		case admit != nil:
			if verdict = admit(m); verdict != nil {
				why = "is postponed: " + verdict.Error()
			}
		}
		if verdict == nil {
			if results != nil {
				send, sentAt = append(send, *m), append(sentAt, i)
			}
			continue
		}
		if results == nil {
			results = make([]error, len(batch))
			send, sentAt = append(send, batch[:i]...), make([]int, 0, len(batch))
			for j := range i {
				sentAt = append(sentAt, j)
			}
		}
		results[i] = verdict
		if why != "" && keyOrder && m.Key != "" && stopped[m.Key] == "" {
			if stopped == nil {
				stopped = map[string]string{}
			}
			stopped[m.Key] = why
		}
	}
	if results == nil {
		return r.publishBatch(ctx, batch)
	}
	if len(send) == 0 {
		return results
	}
	errs := r.publishBatch(ctx, send)
	for j, i := range sentAt {
		results[i] = errs[j]
	}
	return results
}

// dropExpired returns the batch indexes of a wave without its messages
// whose expiry passed, which it marks sent with a permanent error wrapping
// ErrExpired, failing their keys.
func (r *Relay) dropExpired(batch []Message, wave []int, sent []bool, results []error, failed map[string]error) []int {
	now := time.Now()
	kept := wave[:0]
	for _, i := range wave {
		if at, ok := ExpiresAt(&batch[i]); ok && !now.Before(at) {
			sent[i], results[i] = true, Permanent(&expiredError{at: at})
			if k := batch[i].Key; k != "" {
				failed[k] = results[i]
			}
			continue
		}
		kept = append(kept, i)
	}
	return kept
}
