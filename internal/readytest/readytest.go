// Package readytest waits, in tests, for a consumer adapter's readiness
// (outboxamqp, outboxnats and outboxkafka Readiness) to reach a state.
package readytest

import (
	"strings"
	"testing"
	"time"
)

// Timeout bounds every wait.
const Timeout = 20 * time.Second

// Readier is what the adapters' Readiness has.
type Readier interface{ Ready() error }

// WaitReady polls r until it is ready, failing the test after Timeout.
func WaitReady(t testing.TB, r Readier, what string) {
	t.Helper()
	deadline := time.Now().Add(Timeout)
	for {
		err := r.Ready()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s: Ready() = %v", Timeout, what, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// WaitNotReady polls r until its error holds every one of words, and
// returns it; it fails the test after Timeout.
func WaitNotReady(t testing.TB, r Readier, what string, words ...string) error {
	t.Helper()
	deadline := time.Now().Add(Timeout)
	for {
		err := r.Ready()
		if err != nil && holdsAll(err.Error(), words) {
			return err
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s: Ready() = %v, want an error holding %q", Timeout, what, err, words)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func holdsAll(s string, words []string) bool {
	for _, w := range words {
		if !strings.Contains(s, w) {
			return false
		}
	}
	return true
}
