package bench

import (
	"encoding/xml"
	"io"
	"strings"
	"testing"
	"time"
)

// These tests need no database: they cover the report, the doc and the
// charts, so `go test ./bench/` stays fast.

func TestThousandsGroupsDigits(t *testing.T) {
	for in, want := range map[float64]string{0: "0", 999: "999", 1000: "1,000", 1234567.4: "1,234,567", -4200: "-4,200"} {
		if got := thousands(in); got != want {
			t.Errorf("thousands(%v) = %q; want %q", in, got, want)
		}
	}
}

func TestMedianAndPercentileUseNearestRank(t *testing.T) {
	if got := median([]float64{30, 10, 20}); got != 20 {
		t.Errorf("median of 30, 10, 20 = %v; want 20", got)
	}
	if got := medianIndex([]float64{30, 10, 20}); got != 2 {
		t.Errorf("medianIndex of 30, 10, 20 = %d; want 2", got)
	}
	var d []time.Duration
	for i := 1; i <= 100; i++ {
		d = append(d, time.Duration(i)*time.Millisecond)
	}
	if p := percentile(d, 0.99); p != 99*time.Millisecond {
		t.Errorf("p99 of 1..100 ms = %v; want 99ms", p)
	}
	if p := percentile(d, 0.5); p != 50*time.Millisecond {
		t.Errorf("p50 of 1..100 ms = %v; want 50ms", p)
	}
}

func sampleReport() *Report {
	tp := func(name, pub string, batch, relays int, rate float64) Throughput {
		return Throughput{Name: name, Publisher: pub, Batch: batch, Relays: relays, Backlog: 100000, Runs: []float64{rate, rate * 0.9, rate * 1.1},
			WAL: WALUsage{Bytes: 100000 * 800, Xids: 100, Syncs: 120}}
	}
	return &Report{
		Command: "scripts/bench",
		Options: Options{Backlog: 100000, Repeats: 3, PayloadBytes: 256, LatencyDuration: 10 * time.Second, IdleDuration: 20 * time.Second, WriterDuration: 4 * time.Second, GrowthRate: 10000},
		Machine: Machine{CPUs: 2, LoadStart: "0.50 0.40 0.30", LoadEnd: "0.60 0.50 0.40", Settings: map[string]string{"fsync": "on"}},
		Drain: []Throughput{
			tp("relay", "noop", 10, 1, 5000), tp("relay", "noop", 100, 1, 30000), tp("relay", "noop", 1000, 4, 60000),
		},
		Ceiling:   []Throughput{tp("ceiling", "", 10, 1, 4000), tp("ceiling", "", 100, 1, 40000), tp("ceiling", "", 1000, 1, 100000)},
		Watermill: []Throughput{tp("watermill", "", 0, 1, 3000), tp("watermill", "", 1000, 1, 5000)},
		Latency: []Latency{
			{Mode: "in-process", Rate: 1000, Achieved: 1000, Samples: 10000, P50: time.Millisecond, P95: 2 * time.Millisecond, P99: 3 * time.Millisecond, Max: 9 * time.Millisecond},
			{Mode: "polling", Rate: 1000, Achieved: 1000, Samples: 10000, P50: 5 * time.Millisecond, P95: 9 * time.Millisecond, P99: 12 * time.Millisecond, Max: 30 * time.Millisecond},
		},
		Idle: []Idle{{Name: "no relay", Window: 20 * time.Second}, {Name: "relay", Window: 20 * time.Second, Statements: 20, RoundTrips: 20}},
		Writer: &WriterResult{Transactions: 10, Variants: []WriterVariant{
			{Name: "order only", P50: time.Millisecond}, {Name: "second", P50: 1200 * time.Microsecond}, {Name: "outbox", P50: 1150 * time.Microsecond},
		}},
		Growth: &Growth{Messages: 1000, Retention: time.Second, Samples: []GrowthSample{
			{At: time.Second, Pending: 10, Kept: 100, Expired: 5, TotalBytes: 1 << 20}, {At: 2 * time.Second, Pending: 0, Kept: 50, TotalBytes: 2 << 20},
		}},
	}
}

func TestTargetsJudgeEachGoalFromTheSameRun(t *testing.T) {
	got := map[string]string{}
	for _, tg := range sampleReport().Targets() {
		got[tg.Goal] = tg.Verdict
	}
	want := map[string]string{
		"relay to a no-op publisher ≥ 50 % of the raw DELETE ceiling": "met",        // 60,000 vs 100,000
		"relay ≥ 15x watermill's forwarder at its defaults":           "met",        // 20x
		"p99 commit-to-publish < 5 ms at 1,000 msg/s (in-process)":    "met",        // 3 ms
		"p99 commit-to-publish < 5 ms at 1,000 msg/s (polling)":       "**missed**", // 12 ms
		"the idle relay writes no transactions":                       "met",
		"writer overhead no worse than a plain second insert":         "met",
	}
	for goal, v := range want {
		if got[goal] != v {
			t.Errorf("target %q: verdict %q; want %q", goal, got[goal], v)
		}
	}
}

func TestDocKeepsTheNotesOfThePreviousVersion(t *testing.T) {
	r := sampleReport()
	r.Notes = "The claim rewrites every row.\n\nSecond paragraph."
	doc := r.Doc("benchmarks")
	if got := notesOf(doc); got != r.Notes {
		t.Fatalf("notes read back from the doc = %q; want %q", got, r.Notes)
	}
	for _, want := range []string{"scripts/bench", "## Relay throughput", "](benchmarks/throughput.svg)", "## Brokers not measured yet", "| `fsync` | on |"} {
		if !strings.Contains(doc, want) {
			t.Errorf("doc lacks %q", want)
		}
	}
}

func TestChartsAreWellFormedSVG(t *testing.T) {
	charts := sampleReport().charts()
	for _, name := range []string{"throughput.svg", "latency.svg", "growth-rows.svg", "growth-size.svg"} {
		svg, ok := charts[name]
		if !ok {
			t.Errorf("chart %s missing", name)
			continue
		}
		d := xml.NewDecoder(strings.NewReader(svg))
		for {
			_, err := d.Token()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Errorf("chart %s is not well-formed XML: %v", name, err)
				break
			}
		}
		if !strings.Contains(svg, "<rect") && !strings.Contains(svg, "<polyline") {
			t.Errorf("chart %s draws nothing", name)
		}
	}
}

func TestUnknownStepsAndPublishersAreRejected(t *testing.T) {
	if _, err := (Options{DatabaseURL: "postgres://x", Only: []string{"nope"}}).withDefaults(); err == nil {
		t.Error("step nope accepted")
	}
	if _, err := (Options{DatabaseURL: "postgres://x", Publishers: []string{"carrier-pigeon"}}).withDefaults(); err == nil {
		t.Error("publisher carrier-pigeon accepted")
	}
}

func TestMergeReplacesOnlyTheStepsMeasuredAgain(t *testing.T) {
	r := sampleReport()
	r.Drain = append(r.Drain, Throughput{Name: "relay", Publisher: "nats", Batch: 100, Relays: 1, Runs: []float64{1}})
	newer := &Report{Command: "later", Drain: []Throughput{
		{Name: "relay", Publisher: "amqp", Batch: 100, Relays: 1, Runs: []float64{7}},
		{Name: "relay", Publisher: "nats", Batch: 100, Relays: 1, Runs: []float64{9}},
	}}
	r.Merge(newer, []string{"brokers"})
	got := map[string]float64{}
	for _, d := range r.Drain {
		if d.Batch == 100 && d.Relays == 1 {
			got[d.Publisher] = d.Median()
		}
	}
	if got["noop"] != 30000 || got["nats"] != 9 || got["amqp"] != 7 || len(r.Drain) != 5 {
		t.Fatalf("after merging brokers: %v (%d rows); want noop kept at 30000, nats replaced by 9, amqp added at 7, 5 rows", got, len(r.Drain))
	}
	if len(r.Later) != 1 || r.Later[0].Command != "later" {
		t.Fatalf("merge not recorded: %+v", r.Later)
	}
}
