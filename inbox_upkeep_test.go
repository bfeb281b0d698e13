package outbox

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"
)

// purgeRecorder is an InboxPurger that holds n deletable records.
type purgeRecorder struct {
	mu     sync.Mutex
	left   int
	calls  []time.Duration
	fail   error
	called chan struct{}
}

func (p *purgeRecorder) Name() string { return "test.inbox" }

func (p *purgeRecorder) PurgeProcessed(_ context.Context, olderThan time.Duration, limit int) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls = append(p.calls, olderThan)
	defer func() {
		select {
		case p.called <- struct{}{}:
		default:
		}
	}()
	if p.fail != nil {
		return 0, p.fail
	}
	n := min(p.left, limit)
	p.left -= n
	return n, nil
}

// The purge loop deletes in batches until a batch comes back short, with
// the configured retention, and goes on after a failure.
func TestPurgeInboxDeletesInBatchesAndSurvivesFailures(t *testing.T) {
	p := &purgeRecorder{left: 25, called: make(chan struct{}, 1)}
	n, err := PurgeInboxOnce(t.Context(), p, time.Hour, 10)
	if err != nil || n != 25 || len(p.calls) != 3 || p.calls[0] != time.Hour {
		t.Fatalf("PurgeInboxOnce: %d deleted, %v, calls %v; want 25 in 3 calls of retention 1h", n, err, p.calls)
	}

	p = &purgeRecorder{fail: errors.New("database down (injected)"), called: make(chan struct{}, 1)}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		done <- PurgeInbox(ctx, p, InboxPurgeConfig{Interval: time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	}()
	for range 3 { // it keeps trying after failures
		<-p.called
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("PurgeInbox after its context ended: %v; want nil", err)
	}
	if p.calls[0] != InboxRetentionDefault {
		t.Errorf("default retention %v; want %v", p.calls[0], InboxRetentionDefault)
	}
}

func TestPurgeInboxRejectsABadConfig(t *testing.T) {
	p := &purgeRecorder{called: make(chan struct{}, 1)}
	for _, cfg := range []InboxPurgeConfig{{Retention: -time.Second}, {Interval: -1}, {BatchSize: -5}} {
		var cerr *ConfigError
		if err := PurgeInbox(t.Context(), p, cfg); !errors.As(err, &cerr) {
			t.Errorf("PurgeInbox(%+v): %v; want a *ConfigError", cfg, err)
		}
	}
	if len(p.calls) != 0 {
		t.Errorf("a bad config purged anyway: %v", p.calls)
	}
}
