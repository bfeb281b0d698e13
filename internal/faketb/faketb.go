// Package faketb is a stand-in testing.TB for tests of test helpers: they
// run the helper with it to see it fail or skip, where a real test would
// end.
package faketb

import (
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
)

// T records Errorf, Fatalf and Skipf, and passes everything else (Context,
// Cleanup, Logf) to the real test it wraps. Fatalf and Skipf end the
// goroutine, as they do in a real test, so run the helper through Run.
type T struct {
	testing.TB
	mu       sync.Mutex
	failures []string
	skipped  string
}

// Run runs fn with a fake test wrapping t, in a goroutine of its own since
// Fatalf and Skipf end it, and returns the fake once fn is done.
func Run(t testing.TB, fn func(tb testing.TB)) *T {
	f := &T{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn(f)
	}()
	<-done
	return f
}

func (f *T) Helper() {}

func (f *T) Errorf(format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failures = append(f.failures, fmt.Sprintf(format, args...))
}

func (f *T) Fatalf(format string, args ...any) {
	f.Errorf(format, args...)
	runtime.Goexit()
}

func (f *T) Skipf(format string, args ...any) {
	f.mu.Lock()
	f.skipped = fmt.Sprintf(format, args...)
	f.mu.Unlock()
	runtime.Goexit()
}

// Failures returns everything the fake test was failed with, one failure a
// line; "" if it did not fail.
func (f *T) Failures() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return strings.Join(f.failures, "\n")
}

// SkipReason returns what the fake test was skipped with; "" if it was not.
func (f *T) SkipReason() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.skipped
}
