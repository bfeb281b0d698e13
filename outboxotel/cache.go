package outboxotel

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// cache reads a value (a table's Stats, an inbox table's parked counts) at
// most once per ttl and one read at a time: collections share the read in
// flight and wait for it until its deadline at most, so that a slow or
// hanging database (or a driver that ignores the deadline) holds one query,
// not one per scrape, and scrapes return in time with the last values.
type cache[T any] struct {
	read    func(ctx context.Context) (T, error)
	ttl     time.Duration
	timeout time.Duration
	what    string // what read reads, for its errors

	mu       sync.Mutex
	at       time.Time // of the last successful read; zero before the first
	deadline time.Time // of the read in flight
	err      error     // of the last read that ended; nil if it succeeded
	last     T
	reading  chan struct{} // closed when the read in flight ends; nil if none
}

// newCache returns a cache of read with the observer's StatsCacheFor and
// StatsTimeout.
func newCache[T any](o *Observer, what string, read func(ctx context.Context) (T, error)) *cache[T] {
	return &cache[T]{read: read, ttl: o.cfg.StatsCacheFor, timeout: o.cfg.StatsTimeout, what: what}
}

// get returns the last values read, whether there are any, and why they
// may be stale: the error of the last read, or that the one in flight is
// late.
func (c *cache[T]) get(ctx context.Context) (v T, ok bool, err error) {
	c.mu.Lock()
	if !c.at.IsZero() && time.Since(c.at) < c.ttl {
		defer c.mu.Unlock()
		return c.last, true, nil
	}
	if c.reading == nil {
		c.reading, c.deadline = make(chan struct{}), time.Now().Add(c.timeout)
		go c.fill(c.reading, c.deadline)
	}
	reading, deadline := c.reading, c.deadline
	c.mu.Unlock()

	late := time.NewTimer(time.Until(deadline))
	defer late.Stop()
	select {
	case <-reading:
	case <-late.C:
	case <-ctx.Done():
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	select {
	case <-reading:
		err = c.err
	default:
		if err = ctx.Err(); err == nil {
			err = fmt.Errorf("outboxotel: reading %s takes over %s (StatsTimeout)", c.what, c.timeout)
		}
	}
	return c.last, !c.at.IsZero(), err
}

// fill reads for get, under its own deadline rather than one scrape's
// context, since every scrape waiting meanwhile shares the result.
func (c *cache[T]) fill(done chan struct{}, deadline time.Time) {
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	v, err := c.read(ctx)
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil {
		c.err = fmt.Errorf("outboxotel: read %s: %w", c.what, err)
	} else {
		c.at, c.last, c.err = time.Now(), v, nil
	}
	c.reading = nil
	close(done)
}
