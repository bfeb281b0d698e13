// Package backoff paces retries with one exponential schedule: a pause that
// starts at a minimum and doubles after each failure up to a maximum. The
// relay (after store errors and while a destination is down), the stores'
// write listeners, SQLite's write-lock polling and the AMQP publisher's
// redials all wait this way; each keeps its own bounds and says when the
// schedule starts over.
package backoff

import (
	"context"
	"math/rand/v2"
	"time"
)

// Cap returns the pause before the retry that follows failure number n
// (1-based; below 1 counts as 1): min(max, base*2^(n-1)). It stops doubling
// once it would pass max, so no n overflows.
func Cap(base, max time.Duration, n int) time.Duration {
	if n < 1 {
		n = 1
	}
	c := base
	for i := 1; i < n; i++ {
		if c >= max/2 {
			return max
		}
		c *= 2
	}
	return min(c, max)
}

// Backoff is the state of one retry loop: the pause it will take next. It is
// not safe for concurrent use; each loop owns one.
type Backoff struct {
	min, max time.Duration
	jitter   bool
	next     time.Duration
}

// New returns a Backoff whose pauses are exactly min, then twice as long
// after each Sleep, up to max.
func New(min, max time.Duration) *Backoff {
	return &Backoff{min: min, max: max, next: min}
}

// NewJittered returns a Backoff like New, except that each Sleep waits a
// random time between half the pause and the whole of it ("equal jitter"),
// so that waiters that failed together do not retry together.
func NewJittered(min, max time.Duration) *Backoff {
	b := New(min, max)
	b.jitter = true
	return b
}

// Next returns the pause the next Sleep takes (before jitter).
func (b *Backoff) Next() time.Duration { return b.next }

// Reset starts the schedule over at the minimum: the caller's operation
// worked again.
func (b *Backoff) Reset() { b.next = b.min }

// Sleep waits for the next pause and doubles the one after, up to the
// maximum. It returns false if ctx ended or stop (nil for none) closed
// first. The next pause doubles either way, so a loop that goes on after an
// interrupted Sleep still backs off.
func (b *Backoff) Sleep(ctx context.Context, stop <-chan struct{}) bool {
	t := time.NewTimer(b.pause())
	b.next = b.double()
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-stop:
		return false
	case <-ctx.Done():
		return false
	}
}

// pause returns how long the next Sleep waits: the next pause, or with
// jitter a random time between its half and the whole of it.
func (b *Backoff) pause() time.Duration {
	if !b.jitter {
		return b.next
	}
	return b.next/2 + rand.N(b.next/2+1)
}

// double returns min(2*next, max), without overflowing.
func (b *Backoff) double() time.Duration {
	if b.next >= b.max-b.next {
		return b.max
	}
	return b.next * 2
}
