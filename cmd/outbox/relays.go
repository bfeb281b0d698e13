package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/go-outbox/outbox/outboxdriver"
)

// relayReport is what the relay registry says of a table's relays, for
// `outbox status` and the console.
type relayReport struct {
	rows []outboxdriver.RelayRow
	now  time.Time // the database's clock when they were read
	live int
	err  error // the registry could not be read (nil when read)
	// nextDue is how soon a pending message is due, by the store's idle
	// probe (NextDue; zero when it could not tell), for the no-progress
	// warning: messages scheduled for later are no lack of progress,
	// while messages retried with a backoff come due again soon.
	nextDue time.Duration
}

// readRelays reads the registry of the store behind admin, if it keeps one.
func readRelays(ctx context.Context, admin outboxdriver.Admin) relayReport {
	reg, ok := admin.(outboxdriver.RelayRegistry)
	if !ok {
		return relayReport{err: fmt.Errorf("this store keeps no relay registry")}
	}
	rows, now, err := reg.Relays(ctx)
	if err != nil {
		return relayReport{err: err}
	}
	r := relayReport{rows: rows, now: now}
	if store, ok := admin.(outboxdriver.Store); ok {
		if wait, pending, err := store.NextDue(ctx); err == nil && pending {
			r.nextDue = max(wait, 0)
		}
	}
	for _, row := range rows {
		if row.Live(now) {
			r.live++
		}
	}
	return r
}

// alarm is the warning for a table with pending messages and no live relay,
// or "" when there is none to give.
func (r relayReport) alarm(pending int64) string {
	if r.err != nil || r.live > 0 || pending == 0 {
		return ""
	}
	last := "no relay has registered in the last day"
	if len(r.rows) > 0 {
		last = "the last one was seen " + ago(r.now, r.rows[0].SeenAt)
	}
	return fmt.Sprintf("%d message(s) pending and no live relay (%s): start `outbox relay` on this table, or look at why the relays stopped (their logs, their hosts). Relays of releases before the registry do not register.", pending, last)
}

// print writes the relay lines of `outbox status`.
func (r relayReport) print(w io.Writer) {
	if r.err != nil {
		fmt.Fprintf(w, "relays          unknown: %v\n", r.err)
		return
	}
	fmt.Fprintf(w, "relays          %d live", r.live)
	if gone := len(r.rows) - r.live; gone > 0 {
		fmt.Fprintf(w, ", %d gone in the last day (stopped without saying so: killed, or their host died)", gone)
	}
	fmt.Fprintln(w)
	for _, row := range r.rows {
		state := "live"
		if !row.Live(r.now) {
			state = "GONE"
		}
		fmt.Fprintf(w, "  %-4s %s pid %d on %s, %s, started %s, seen %s, last claim %s, last publish %s\n",
			state, row.ID.String()[:8], row.PID, row.Host, row.Version,
			ago(r.now, row.StartedAt), ago(r.now, row.SeenAt), ago(r.now, row.LastClaimAt), ago(r.now, row.LastPublishAt))
	}
}

// json is the relays for `outbox status --json`.
func (r relayReport) json() any {
	if r.err != nil {
		return map[string]any{"error": r.err.Error()}
	}
	list := make([]map[string]any, 0, len(r.rows))
	for _, row := range r.rows {
		list = append(list, map[string]any{
			"id": row.ID, "host": row.Host, "pid": row.PID, "version": row.Version, "config": row.Config,
			"live": row.Live(r.now), "started_at": row.StartedAt, "seen_at": row.SeenAt,
			"last_claim_at": optionalTime(row.LastClaimAt), "last_publish_at": optionalTime(row.LastPublishAt),
			"heartbeat_interval_seconds": row.Interval.Seconds(),
		})
	}
	return map[string]any{"live": r.live, "relays": list}
}

func optionalTime(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t
}

// ago says how long before now t was, "never" for a zero t.
func ago(now, t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	d := max(now.Sub(t), 0)
	switch {
	case d < time.Second:
		return d.Round(time.Millisecond).String() + " ago"
	case d < time.Hour:
		return d.Round(time.Second).String() + " ago"
	}
	return d.Round(time.Minute).String() + " ago"
}

// nonEmpty is the non-empty strings of ss, never nil (JSON [] not null).
func nonEmpty(ss ...string) []string {
	out := []string{}
	for _, s := range ss {
		if s != "" {
			out = append(out, s)
		}
	}
	return out
}
