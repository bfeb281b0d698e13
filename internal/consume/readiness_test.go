package consume_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/go-outbox/outbox/internal/consume"
)

// Readiness says why the consumer is not consuming, the latest reason
// first; consuming again clears it, and a stop says so.
func TestReadinessSaysWhyUntilTheConsumerConsumesAgain(t *testing.T) {
	r := &consume.Readiness{}
	if err := r.Ready(); !errors.Is(err, consume.ErrNotStarted) {
		t.Fatalf("Ready() before Start = %v, want ErrNotStarted", err)
	}
	r.Start("outboxtest", "billing", errors.New("connecting"))
	first := r.Ready()
	if first == nil || !strings.Contains(first.Error(), "billing") || !strings.Contains(first.Error(), "connecting") {
		t.Fatalf("Ready() after Start = %v, want not ready, naming the consumer and why", first)
	}
	r.Failed(errors.New("queue missing"))
	if err := r.Ready(); err == nil || !strings.Contains(err.Error(), "queue missing") || !strings.Contains(err.Error(), "not consuming since") {
		t.Fatalf("Ready() after a second failure = %v, want the new reason", err)
	}
	r.Consuming()
	if err := r.Ready(); err != nil {
		t.Fatalf("Ready() while consuming = %v, want nil", err)
	}
	r.Stop(nil)
	if err := r.Ready(); err == nil || !strings.Contains(err.Error(), "stopped") {
		t.Fatalf("Ready() after Stop = %v, want stopped", err)
	}
}

// An adapter given no Readiness updates a nil one: nothing happens.
func TestANilReadinessIgnoresUpdates(t *testing.T) {
	var r *consume.Readiness
	r.Start("outboxtest", "billing", errors.New("connecting"))
	r.Consuming()
	r.Failed(errors.New("down"))
	r.Stop(nil)
	if err := r.Ready(); !errors.Is(err, consume.ErrNotStarted) {
		t.Fatalf("Ready() of a nil Readiness = %v, want ErrNotStarted", err)
	}
}
