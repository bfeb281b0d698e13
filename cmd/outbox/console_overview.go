package main

import (
	"fmt"
	"net/http"
	"time"

	"github.com/go-outbox/outbox/outboxdriver"
)

// banner is one warning at the top of the overview: Kind names it for
// tests and styles, Text says what is wrong and what to do.
type banner struct{ Kind, Text string }

// relayLine is one registered relay as the overview lists it, its times
// already said as ages by the database's clock.
type relayLine struct {
	outboxdriver.RelayRow
	Live                                  bool
	Started, Seen, LastClaim, LastPublish string
}

// stuckLine is one stuck key as the overview lists it.
type stuckLine struct {
	outboxdriver.StuckKey
	Why string
}

// overview is the page on-call opens first: what is wrong (banners), the
// table's counts, the charts of the last hour, which relays serve it and
// which keys wait.
func (c *console) overview(w http.ResponseWriter, r *http.Request) {
	st, err := c.admin.Stats(r.Context())
	if err != nil {
		c.fail(w, err)
		return
	}
	oldest := "none"
	if st.Pending > 0 {
		oldest = st.OldestPending.Round(time.Millisecond).String()
	}
	rate := "n/a"
	if st.Published > 0 {
		rate = fmt.Sprintf("%.1f", float64(st.PublishedLastMinute)/60)
	}
	relays := readRelays(r.Context(), c.admin)
	stuck := readStuckKeys(r.Context(), c.admin, c.stuckAfter, consoleStuckKeys)
	data := struct {
		page
		Charts                       chartsView
		Paused                       pausedView
		Stats                        outboxdriver.Stats
		Oldest, Rate, At, StuckAfter string
		Banners                      []banner
		Relays                       []relayLine
		RelaysError, StuckError      string
		Stuck                        []stuckLine
		StuckTotal, StuckMore, Gone  int
	}{page: c.page(r, "Overview"), Stats: st, Oldest: oldest, Rate: rate, At: time.Now().UTC().Format("15:04:05 MST"),
		StuckAfter: c.stuckAfter.String(), Banners: overviewBanners(st, relays, stuck, c.stuckAfter), Charts: readCharts(r.Context(), c.admin)}
	// The paused topics are a notice here: a table migrated before pausing
	// existed, or one that fails to list them, shows none, and the Paused
	// page says why.
	data.Paused, _ = readPausedTopics(r.Context(), c.admin, c.base, time.Now())
	if relays.err != nil {
		data.RelaysError = relays.err.Error()
	}
	for _, row := range relays.rows {
		line := relayLine{RelayRow: row, Live: row.Live(relays.now), Started: ago(relays.now, row.StartedAt), Seen: ago(relays.now, row.SeenAt),
			LastClaim: ago(relays.now, row.LastClaimAt), LastPublish: ago(relays.now, row.LastPublishAt)}
		if !line.Live {
			data.Gone++
		}
		data.Relays = append(data.Relays, line)
	}
	if stuck.err != nil {
		data.StuckError = stuck.err.Error()
	}
	for _, k := range stuck.keys {
		data.Stuck = append(data.Stuck, stuckLine{StuckKey: k, Why: why(k)})
	}
	data.StuckTotal, data.StuckMore = stuck.total, stuck.total-len(stuck.keys)
	c.render(w, "overview", data)
}

// overviewBanners are the warnings of the overview, the most urgent first:
// nothing publishes (no live relay, no progress), then keys held, then
// dead messages.
func overviewBanners(st outboxdriver.Stats, relays relayReport, stuck stuckReport, stuckAfter time.Duration) []banner {
	var out []banner
	if text := relays.alarm(st.Pending); text != "" {
		out = append(out, banner{"no-relay", text})
	}
	if text := noProgress(st, relays, stuckAfter); text != "" {
		out = append(out, banner{"no-progress", text})
	}
	if stuck.err == nil && stuck.total > 0 {
		out = append(out, banner{"stuck", fmt.Sprintf("%d key(s) stuck: their oldest pending message waited over %s (--stuck-after); see Stuck keys below for what holds each",
			stuck.total, stuckAfter)})
	}
	if st.Dead > 0 {
		out = append(out, banner{"dead", fmt.Sprintf("%d dead message(s): the relay gave up on them; see Dead letters, grouped by how they failed, to retry or discard them", st.Dead)})
	}
	return out
}
