package outboxtest_test

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/go-outbox/outbox"
)

// fakeT stands in for a test so that a test can see an assertion fail. It
// passes everything else (Context, Logf) to the real test.
type fakeT struct {
	testing.TB
	mu       sync.Mutex
	failures []string
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

// failed returns everything the fake test was failed with, one failure a
// line.
func (f *fakeT) failed() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return strings.Join(f.failures, "\n")
}

// runFake runs fn with a fake test, in a goroutine of its own since Fatalf
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

// table is a Table of messages at hand.
type table []outbox.Message

func (tb table) Pending(context.Context) ([]outbox.Message, error) { return tb, nil }

// brokenTable fails every read.
type brokenTable struct{}

func (brokenTable) Pending(context.Context) ([]outbox.Message, error) {
	return nil, fmt.Errorf("connection refused")
}
