package outboxsqlitetest_test

import (
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
)

// fakeT stands in for a test so that a test can see a helper fail or skip.
// It passes everything else (Context, Cleanup, Logf) to the real test.
type fakeT struct {
	testing.TB
	mu       sync.Mutex
	failures []string
	skipped  string
}

func (f *fakeT) Helper() {}

func (f *fakeT) Errorf(format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failures = append(f.failures, fmt.Sprintf(format, args...))
}

func (f *fakeT) Fatalf(format string, args ...any) {
	f.Errorf(format, args...)
	runtime.Goexit()
}

func (f *fakeT) Skipf(format string, args ...any) {
	f.mu.Lock()
	f.skipped = fmt.Sprintf(format, args...)
	f.mu.Unlock()
	runtime.Goexit()
}

func (f *fakeT) failed() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return strings.Join(f.failures, "\n")
}

// runFake runs fn with a fake test in a goroutine of its own, since Fatalf
// ends it, and returns the fake once fn is done.
func runFake(t *testing.T, fn func(tb testing.TB)) *fakeT {
	f := &fakeT{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn(f)
	}()
	<-done
	return f
}
