package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/go-outbox/outbox/outboxdriver"
)

// stuckReport is the keys whose head waited past a threshold, for `outbox
// status` and the console.
type stuckReport struct {
	threshold time.Duration
	keys      []outboxdriver.StuckKey
	total     int
	err       error // the store cannot tell, or failed to
}

// readStuckKeys lists up to limit stuck keys of the store behind admin.
func readStuckKeys(ctx context.Context, admin outboxdriver.Admin, threshold time.Duration, limit int) stuckReport {
	finder, ok := admin.(outboxdriver.StuckKeyFinder)
	if !ok {
		return stuckReport{threshold: threshold, err: fmt.Errorf("this store cannot list stuck keys")}
	}
	keys, total, err := finder.StuckKeys(ctx, threshold, max(limit, 1))
	return stuckReport{threshold: threshold, keys: keys[:min(len(keys), limit)], total: total, err: err}
}

// why says what holds a stuck key's head.
func why(k outboxdriver.StuckKey) string {
	switch {
	case k.BehindDead:
		return "behind a dead message of its key (retry or discard it: `outbox dead list`)"
	case k.Attempts > 0:
		return fmt.Sprintf("retrying, %d failed attempt(s), last: %s", k.Attempts, k.LastError)
	case k.LastError != "":
		return "no attempt counted: postponed while its destination was unavailable, or retried from the dead letters; last error: " + k.LastError
	}
	return "not tried yet (no relay reached it: are relays running, and keeping up?)"
}

func (r stuckReport) print(w io.Writer) {
	switch {
	case r.err != nil:
		fmt.Fprintf(w, "stuck keys      unknown: %v\n", r.err)
		return
	case r.total == 0:
		fmt.Fprintf(w, "stuck keys      0 (no key's head waited over %s)\n", r.threshold)
		return
	}
	fmt.Fprintf(w, "stuck keys      %d (heads waiting over %s; the longest first):\n", r.total, r.threshold)
	for _, k := range r.keys {
		fmt.Fprintf(w, "  %q head %s (%s), waiting %s, %s\n", k.Key, k.Head, k.Topic, k.Waiting.Round(time.Second), why(k))
	}
	if more := r.total - len(r.keys); more > 0 {
		fmt.Fprintf(w, "  ... and %d more (--stuck-keys N lists more)\n", more)
	}
}

func (r stuckReport) json() any {
	if r.err != nil {
		return map[string]any{"error": r.err.Error()}
	}
	keys := make([]map[string]any, 0, len(r.keys))
	for _, k := range r.keys {
		keys = append(keys, map[string]any{
			"key": k.Key, "head": k.Head, "topic": k.Topic, "waiting_seconds": k.Waiting.Seconds(),
			"attempts": k.Attempts, "last_error": k.LastError, "behind_dead": k.BehindDead,
		})
	}
	return map[string]any{"total": r.total, "threshold_seconds": r.threshold.Seconds(), "keys": keys}
}

// noProgress is the warning for a table whose oldest pending message
// waited past threshold while no relay published anything for as long,
// unless no message comes due within threshold either (only messages
// scheduled for later wait), or "".
func noProgress(st outboxdriver.Stats, relays relayReport, threshold time.Duration) string {
	if st.Pending == 0 || st.OldestPending <= threshold || relays.err != nil {
		return ""
	}
	if relays.nextDue > threshold {
		return ""
	}
	var last time.Time
	for _, row := range relays.rows {
		if row.LastPublishAt.After(last) {
			last = row.LastPublishAt
		}
	}
	if !last.IsZero() && relays.now.Sub(last) <= threshold {
		return ""
	}
	published := "no relay has published since it started"
	if !last.IsZero() {
		published = "the last publish was " + ago(relays.now, last)
	}
	return fmt.Sprintf("no progress: %d message(s) pending, the oldest for %s, and %s: look at the relays' logs and at the destination (is it down, or refusing every message?)",
		st.Pending, st.OldestPending.Round(time.Second), published)
}
