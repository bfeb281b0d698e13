package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/go-outbox/outbox/outboxdriver"
	"github.com/go-outbox/outbox/relaytest"
)

// slotsRE finds the slots a chart drew a bar or a point for.
var slotsRE = regexp.MustCompile(`<(rect class="bar"|circle class="point") data-slot="(\d+)"`)

func drawnSlots(svg string) string {
	var slots []string
	for _, m := range slotsRE.FindAllStringSubmatch(svg, -1) {
		slots = append(slots, m[2])
	}
	return strings.Join(slots, ",")
}

func TestChartsDrawABarOrPointPerMinuteWithAValueAndLeaveGapsForTheOthers(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 3, 1, 12, 30, 40, 0, time.UTC)
	minute := func(ago int) time.Time { return now.Truncate(time.Minute).Add(-time.Duration(ago) * time.Minute) }
	minutes := []outboxdriver.Minute{
		{Start: minute(59), Published: 3, Sampled: true, Pending: 10, OldestPending: 5 * time.Second}, // slot 0
		{Start: minute(58), Published: 7, Failed: 1, Sampled: true, Pending: 12, OldestPending: 65 * time.Second},
		// minute 57: no relay reported
		{Start: minute(56), Published: 2, Sampled: true, Pending: 4, OldestPending: time.Second},
		{Start: minute(1), Published: 40, Failed: 2}, // reported, no sample: no point
		{Start: minute(0), Published: 1, Sampled: true, Pending: 0},
		{Start: minute(61), Published: 99, Sampled: true, Pending: 99}, // older than the hour: left out
	}
	charts := drawCharts(minutes, now)
	if len(charts) != 4 {
		t.Fatalf("drew %d charts; want 4", len(charts))
	}
	byID := map[string]chartView{}
	for _, c := range charts {
		byID[c.ID] = c
	}
	for id, want := range map[string]string{
		"published": "0,1,3,58,59", // a bar for every minute with a row, zero or not
		"failed":    "0,1,3,58,59",
		"pending":   "0,1,3,59", // a point for every sampled minute
		"oldest":    "0,1,3,59",
	} {
		svg := string(byID[id].SVG)
		if got := drawnSlots(svg); got != want {
			t.Errorf("chart %s drew slots %s; want %s (gaps where no relay reported, or none sampled):\n%s", id, got, want, svg)
		}
		for _, label := range []string{"-60 min", "-30 min", "now"} {
			if !strings.Contains(svg, ">"+label+"<") {
				t.Errorf("chart %s has no x axis label %q", id, label)
			}
		}
	}
	// Points join into a line only across consecutive sampled minutes:
	// slots 0-1, then 3 alone, then 59 alone.
	if n := strings.Count(string(byID["pending"].SVG), "<polyline"); n != 1 {
		t.Errorf("the pending chart has %d lines; want 1 (slots 0-1; 3 and 59 stand alone past gaps)", n)
	}
	// The y axis rounds up the largest value: 40 published → 50.
	for id, top := range map[string]string{"published": "50", "failed": "2", "pending": "20", "oldest": "1m40s"} {
		if !strings.Contains(string(byID[id].SVG), `fill="#5b6475">`+top+`</text>`) {
			t.Errorf("chart %s has no y axis label %q:\n%s", id, top, byID[id].SVG)
		}
	}
	if got := byID["published"].Summary; got != "53 published in the last hour" {
		t.Errorf("published summary %q; want the hour's sum, 53 (the minute older than the hour left out)", got)
	}
	if got := byID["oldest"].Summary; got != "0s this minute" {
		t.Errorf("oldest summary %q; want the last sample's", got)
	}
	if got := byID["published"].SVG; !strings.Contains(string(got), "<title>11:31 UTC: 3</title>") {
		t.Errorf("the first bar has no tooltip naming its minute and value:\n%s", got)
	}
}

func TestChartsWithoutAnySampleSaySo(t *testing.T) {
	t.Parallel()
	now := time.Now()
	charts := drawCharts([]outboxdriver.Minute{{Start: now.Truncate(time.Minute), Published: 5}}, now)
	for _, c := range charts[2:] {
		if !strings.Contains(string(c.SVG), "no sample in the last hour") || c.Summary != "no sample in the last hour" {
			t.Errorf("chart %s of minutes without a sample: summary %q, SVG %s; want both to say there is no sample", c.ID, c.Summary, c.SVG)
		}
	}
}

// noRollup is a table whose rollup was never migrated.
type noRollup struct{ *fakeAdmin }

func (noRollup) AddMinute(context.Context, int64, int64) error { return nil }

func (noRollup) Minutes(context.Context, time.Duration) ([]outboxdriver.Minute, time.Time, error) {
	return nil, time.Time{}, fmt.Errorf("%w: outboxpg: read minutes: the per-minute rollup x does not exist (migration 10)", outboxdriver.ErrNotMigrated)
}

func TestConsoleOverviewChartsTheLastHourOrSaysWhyItCannot(t *testing.T) {
	t.Parallel()
	db := sqliteProcessDB(t)
	rollup, ok := db.store.(outboxdriver.MinuteRollup)
	if !ok {
		t.Fatalf("store %T keeps no per-minute rollup", db.store)
	}
	serve := func(admin outboxdriver.Admin) string {
		c, err := newConsole(admin, nil, "the.table", relaytest.TestLogger(t), nil)
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(c.handler())
		t.Cleanup(srv.Close)
		return srv.URL + "/"
	}
	url := serve(db.store)
	if page := get(t, url); !strings.Contains(page, `id="charts-empty">No relay has reported in the last hour`) || strings.Contains(page, "<svg") {
		t.Fatalf("the overview of a table no relay reported in shows no empty state, or a chart:\n%s", page)
	}
	if err := rollup.AddMinute(t.Context(), 12, 3); err != nil {
		t.Fatal(err)
	}
	page := get(t, url)
	for _, id := range []string{"published", "failed", "pending", "oldest"} {
		if !regexp.MustCompile(`(?s)<figure class="chart" id="chart-` + id + `">.*?<svg .*?</svg></figure>`).MatchString(page) {
			t.Errorf("the overview has no chart %s:\n%s", id, page)
		}
	}
	if !strings.Contains(page, "12 published in the last hour") || !strings.Contains(page, "3 failed (retried or dead) in the last hour") {
		t.Errorf("the overview's charts do not sum the relays' adds (12 published, 3 failed):\n%s", page)
	}
	if page := get(t, serve(noRollup{&fakeAdmin{}})); !strings.Contains(page, "run `outbox migrate up` to chart the last hour") {
		t.Errorf("the overview of a table without the rollup does not name the fix:\n%s", page)
	}
}

// fillMinutes writes 50 minutes of the relays' per-minute rollup of the
// table outbox in schema, as busy relays would, with a failing spell and
// three minutes no relay reported in, for the browser test's screenshots.
func fillMinutes(t *testing.T, pool *pgxpool.Pool, schema string) {
	t.Helper()
	_, err := pool.Exec(t.Context(), `
INSERT INTO `+pgx.Identifier{schema, "outbox_minutes"}.Sanitize()+` (minute, published, failed, pending, oldest_ms)
SELECT to_timestamp(floor(EXTRACT(EPOCH FROM now()) / 60) * 60) - g * interval '1 minute',
	(120 + 60 * sin(g / 6.0))::bigint,
	CASE WHEN g BETWEEN 30 AND 34 THEN 4 + g % 3 ELSE 0 END,
	(40 + 30 * cos(g / 8.0))::bigint,
	(2000 + 1500 * cos(g / 8.0))::bigint
FROM generate_series(0, 50) AS g WHERE g NOT BETWEEN 12 AND 14`)
	if err != nil {
		t.Fatalf("fill the per-minute rollup: %v", err)
	}
}

func TestStatusSaysWhatTheRelaysReportedInTheLastHour(t *testing.T) {
	t.Parallel()
	db := sqliteProcessDB(t)
	if out := mustCLI(t, "status", "--database-url", db.url); !strings.Contains(out, "last hour       no relay reported\n") {
		t.Fatalf("status of a table no relay reported in:\n%s", out)
	}
	rollup := db.store.(outboxdriver.MinuteRollup)
	for _, add := range [][2]int64{{12, 3}, {8, 0}} {
		if err := rollup.AddMinute(t.Context(), add[0], add[1]); err != nil {
			t.Fatal(err)
		}
	}
	if out := mustCLI(t, "status", "--database-url", db.url); !strings.Contains(out, "last hour       20 published, 3 failed (retried or dead)") {
		t.Fatalf("status after relays added 12+8 published and 3 failed:\n%s", out)
	}
	var st struct {
		LastHour map[string]int64 `json:"last_hour"`
	}
	if err := json.Unmarshal([]byte(mustCLI(t, "status", "--json", "--database-url", db.url)), &st); err != nil || st.LastHour["published"] != 20 || st.LastHour["failed"] != 3 {
		t.Fatalf("status --json last_hour %v (%v); want 20 published, 3 failed", st.LastHour, err)
	}
}
