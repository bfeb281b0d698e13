package outbox

import (
	"testing"
	"time"
)

// A failing source is asked again after 1 s, 2 s, 4 s and so on up to 30 s,
// or the rescan interval if shorter; never at once.
func TestTheWaitAfterAFailedRescanDoublesUpToItsBound(t *testing.T) {
	for _, tc := range []struct {
		interval time.Duration
		want     []time.Duration
	}{
		{time.Minute, []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second, 30 * time.Second, 30 * time.Second}},
		{time.Hour, []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second, 30 * time.Second}},
		{5 * time.Second, []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 5 * time.Second, 5 * time.Second}},
		{100 * time.Millisecond, []time.Duration{100 * time.Millisecond, 100 * time.Millisecond}},
	} {
		var last time.Duration
		for i, want := range tc.want {
			last = nextRescanRetry(last, tc.interval)
			if last != want {
				t.Errorf("rescan interval %v: wait after failure %d = %v, want %v", tc.interval, i+1, last, want)
			}
		}
	}
}
