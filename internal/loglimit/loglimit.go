// Package loglimit lets a log line that would repeat with every batch through
// at most once per interval and key, so that an operator learns of a
// configuration mistake without a flood: the publishers use it for the
// errors only an operator can fix.
package loglimit

import (
	"sync"
	"time"
)

// maxKeys bounds the keys a Limiter remembers. Keys are few (a topic or an
// exchange and a fix); past the bound the Limiter forgets them all rather
// than grow.
const maxKeys = 1000

// Limiter lets one line per key through per Interval. The zero value lets
// every line through; set Interval before first use. It is safe for
// concurrent use.
type Limiter struct {
	Interval time.Duration

	mu   sync.Mutex
	last map[string]time.Time
}

// Allow reports whether a line for key may be logged now, and if so counts
// it as logged.
func (l *Limiter) Allow(key string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	if at, ok := l.last[key]; ok && now.Sub(at) < l.Interval {
		return false
	}
	if l.last == nil || len(l.last) >= maxKeys {
		l.last = map[string]time.Time{}
	}
	l.last[key] = now
	return true
}
