package main

import (
	"context"
	"errors"
	"fmt"
	"html"
	"html/template"
	"io"
	"math"
	"strings"
	"time"

	"github.com/go-outbox/outbox/outboxdriver"
)

// chartsSpan is how far back the overview's charts go, one slot a minute.
const chartsSpan = time.Hour

// chartSlots is how many minutes a chart shows.
const chartSlots = int(chartsSpan / time.Minute)

// chartsView is the overview's charts of the last hour, or why there are
// none (Empty).
type chartsView struct {
	Charts []chartView
	Empty  string
}

// chartView is one chart: its SVG, drawn here, and a line that sums it up.
type chartView struct {
	ID, Title, Summary string
	SVG                template.HTML
}

// chartSpec says what a chart draws of each minute: value is false for a
// minute that has none (no row, or no sample), which the chart leaves as
// a gap.
type chartSpec struct {
	id, title string
	bars      bool   // bars per minute; otherwise points joined by lines
	color     string // fill or stroke
	value     func(outboxdriver.Minute) (float64, bool)
	label     func(float64) string // a value as the axis and tooltips say it
	summary   func(values []float64, known []bool) string
}

// chartSpecs are the overview's four charts: what the relays published and
// what failed each minute, and the backlog they sampled.
var chartSpecs = []chartSpec{
	{id: "published", title: "Published per minute", bars: true, color: "#2f6fb3",
		value: func(m outboxdriver.Minute) (float64, bool) { return float64(m.Published), true },
		label: count, summary: total("published")},
	{id: "failed", title: "Failed attempts per minute", bars: true, color: "#b42318",
		value: func(m outboxdriver.Minute) (float64, bool) { return float64(m.Failed), true },
		label: count, summary: total("failed (retried or dead)")},
	{id: "pending", title: "Pending", color: "#6941c6",
		value: func(m outboxdriver.Minute) (float64, bool) { return float64(m.Pending), m.Sampled },
		label: count, summary: latest(count)},
	{id: "oldest", title: "Oldest pending age", color: "#b54708",
		value: func(m outboxdriver.Minute) (float64, bool) { return m.OldestPending.Seconds(), m.Sampled },
		label: seconds, summary: latest(seconds)},
}

// readCharts reads the last hour of the per-minute rollup of the store
// behind admin and draws the charts, or says why it cannot.
func readCharts(ctx context.Context, admin outboxdriver.Admin) chartsView {
	rollup, ok := admin.(outboxdriver.MinuteRollup)
	if !ok {
		return chartsView{Empty: "This store keeps no per-minute rollup, so there is nothing to chart."}
	}
	minutes, now, err := rollup.Minutes(ctx, chartsSpan)
	switch {
	case errors.Is(err, outboxdriver.ErrNotMigrated):
		return chartsView{Empty: "The per-minute rollup the relays fill is missing: run `outbox migrate up` to chart the last hour (" + err.Error() + ")."}
	case err != nil:
		return chartsView{Empty: "Unknown: " + err.Error()}
	case len(minutes) == 0:
		return chartsView{Empty: "No relay has reported in the last hour: each running relay adds what it published and what failed at every heartbeat, and a sample of the backlog once a minute."}
	}
	return chartsView{Charts: drawCharts(minutes, now)}
}

// drawCharts draws the four charts of minutes, the hour up to now.
func drawCharts(minutes []outboxdriver.Minute, now time.Time) []chartView {
	out := make([]chartView, 0, len(chartSpecs))
	for _, spec := range chartSpecs {
		values, known := slotValues(spec, minutes, now)
		out = append(out, chartView{ID: spec.id, Title: spec.title, Summary: spec.summary(values, known), SVG: drawChart(spec, values, known, now)})
	}
	return out
}

// slotValues lays minutes on the chart's slots, the oldest first and the
// minute of now last; known says which slots have a value.
func slotValues(spec chartSpec, minutes []outboxdriver.Minute, now time.Time) ([]float64, []bool) {
	values, known := make([]float64, chartSlots), make([]bool, chartSlots)
	last := now.Truncate(time.Minute)
	for _, m := range minutes {
		i := chartSlots - 1 - int(last.Sub(m.Start.Truncate(time.Minute))/time.Minute)
		if i < 0 || i >= chartSlots {
			continue // outside the hour (a clock that stepped back, say)
		}
		if v, ok := spec.value(m); ok {
			values[i], known[i] = v, true
		}
	}
	return values, known
}

// The chart's geometry, in SVG units: a plot with room for the y axis's
// labels on the left and the x axis's below.
const (
	chartWidth, chartHeight = 440, 124
	plotLeft, plotRight     = 50, 432
	plotTop, plotBottom     = 8, 108
)

// drawChart draws one chart as inline SVG: bars, or points joined where
// consecutive minutes have a value, so that a minute without one is a gap.
func drawChart(spec chartSpec, values []float64, known []bool, now time.Time) template.HTML {
	top := 0.0
	for i, v := range values {
		if known[i] {
			top = max(top, v)
		}
	}
	top = niceCeil(top)
	slot := float64(plotRight-plotLeft) / float64(chartSlots)
	y := func(v float64) float64 { return plotBottom - v/top*(plotBottom-plotTop) }
	first := now.Truncate(time.Minute).Add(-time.Duration(chartSlots-1) * time.Minute)
	tip := func(i int) string {
		return first.Add(time.Duration(i)*time.Minute).UTC().Format("15:04") + " UTC: " + spec.label(values[i])
	}

	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="chart-svg" viewBox="0 0 %d %d" role="img" aria-label="%s, last hour" xmlns="http://www.w3.org/2000/svg">`,
		chartWidth, chartHeight, html.EscapeString(spec.title))
	// The y axis: 0, half and the top, with grid lines.
	for _, v := range []float64{0, top / 2, top} {
		fmt.Fprintf(&b, `<line class="grid" x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#e4e7ec"/>`, plotLeft, plotRight, y(v), y(v))
		fmt.Fprintf(&b, `<text class="y-label" x="%d" y="%.1f" text-anchor="end" font-size="10" fill="#5b6475">%s</text>`, plotLeft-4, y(v)+3, html.EscapeString(spec.label(v)))
	}
	// The x axis: an hour ago, half an hour ago, now.
	fmt.Fprintf(&b, `<line class="axis" x1="%d" x2="%d" y1="%d" y2="%d" stroke="#9aa5b8"/>`, plotLeft, plotRight, plotBottom, plotBottom)
	for _, l := range []struct {
		x            float64
		anchor, text string
	}{{plotLeft, "start", "-60 min"}, {(plotLeft + plotRight) / 2, "middle", "-30 min"}, {plotRight, "end", "now"}} {
		fmt.Fprintf(&b, `<text class="x-label" x="%.1f" y="%d" text-anchor="%s" font-size="10" fill="#5b6475">%s</text>`, l.x, plotBottom+14, l.anchor, l.text)
	}

	if spec.bars {
		for i, v := range values {
			if !known[i] {
				continue
			}
			h := plotBottom - y(v)
			fmt.Fprintf(&b, `<rect class="bar" data-slot="%d" x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"><title>%s</title></rect>`,
				i, plotLeft+float64(i)*slot+0.5, y(v), max(slot-1, 1), h, spec.color, html.EscapeString(tip(i)))
		}
	} else {
		var run []string // the points of the line being drawn
		flush := func() {
			if len(run) > 1 {
				fmt.Fprintf(&b, `<polyline class="line" points="%s" fill="none" stroke="%s" stroke-width="1.5"/>`, strings.Join(run, " "), spec.color)
			}
			run = run[:0]
		}
		for i, v := range values {
			if !known[i] {
				flush()
				continue
			}
			x := plotLeft + (float64(i)+0.5)*slot
			run = append(run, fmt.Sprintf("%.1f,%.1f", x, y(v)))
			fmt.Fprintf(&b, `<circle class="point" data-slot="%d" cx="%.1f" cy="%.1f" r="1.8" fill="%s"><title>%s</title></circle>`, i, x, y(v), spec.color, html.EscapeString(tip(i)))
		}
		flush()
		if !anyKnown(known) {
			fmt.Fprintf(&b, `<text class="no-sample" x="%d" y="%d" text-anchor="middle" font-size="11" fill="#5b6475">no sample in the last hour</text>`, (plotLeft+plotRight)/2, (plotTop+plotBottom)/2)
		}
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String()) // built of numbers and escaped text only
}

// anyKnown reports whether any slot has a value.
func anyKnown(known []bool) bool {
	for _, k := range known {
		if k {
			return true
		}
	}
	return false
}

// niceCeil is the smallest of 1, 2 or 5 times a power of ten that is at
// least v (at least 1), so that the axis's labels are round.
func niceCeil(v float64) float64 {
	if v <= 1 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}

// count says a count, halves (of an axis) included.
func count(v float64) string {
	if v == math.Trunc(v) {
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.1f", v)
}

// seconds says an age given in seconds, to the tenth below 10 s (an
// axis's half of 5 s is 2.5s).
func seconds(v float64) string {
	d := time.Duration(v * float64(time.Second))
	if d < 10*time.Second {
		return d.Round(100 * time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}

// total sums a chart of counts up.
func total(what string) func([]float64, []bool) string {
	return func(values []float64, _ []bool) string {
		sum := 0.0
		for _, v := range values {
			sum += v
		}
		return fmt.Sprintf("%s %s in the last hour", count(sum), what)
	}
}

// latest sums a chart of samples up by its last one.
func latest(label func(float64) string) func([]float64, []bool) string {
	return func(values []float64, known []bool) string {
		for i := len(values) - 1; i >= 0; i-- {
			switch {
			case !known[i]:
			case i == len(values)-1:
				return label(values[i]) + " this minute"
			default:
				return fmt.Sprintf("%s at the last sample, %d min ago", label(values[i]), len(values)-1-i)
			}
		}
		return "no sample in the last hour"
	}
}

// lastHour is what the per-minute rollup says of the last hour, for
// `outbox status`.
type lastHour struct {
	published, failed int64
	minutes           int   // minutes with a row
	err               error // the rollup could not be read (nil when read)
}

// readLastHour sums the last hour of the rollup of the store behind admin.
func readLastHour(ctx context.Context, admin outboxdriver.Admin) lastHour {
	rollup, ok := admin.(outboxdriver.MinuteRollup)
	if !ok {
		return lastHour{err: errors.New("this store keeps no per-minute rollup")}
	}
	minutes, _, err := rollup.Minutes(ctx, chartsSpan)
	h := lastHour{err: err, minutes: len(minutes)}
	for _, m := range minutes {
		h.published, h.failed = h.published+m.Published, h.failed+m.Failed
	}
	return h
}

// print writes the line of `outbox status`.
func (h lastHour) print(w io.Writer) {
	switch {
	case h.err != nil:
		fmt.Fprintf(w, "last hour       unknown: %v\n", h.err)
	case h.minutes == 0:
		fmt.Fprintln(w, "last hour       no relay reported")
	default:
		fmt.Fprintf(w, "last hour       %d published, %d failed (retried or dead), as the relays reported\n", h.published, h.failed)
	}
}

// json is the last hour for `outbox status --json`: nil when unknown.
func (h lastHour) json() map[string]int64 {
	if h.err != nil {
		return nil
	}
	return map[string]int64{"published": h.published, "failed": h.failed, "minutes_reported": int64(h.minutes)}
}
