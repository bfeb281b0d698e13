// Package bench measures the outbox against a real PostgreSQL: relay
// throughput draining a backlog (next to the raw SQL ceiling and watermill's
// forwarder, measured in the same run), commit-to-publish latency, the
// writer's cost on a business transaction, what an idle relay costs, and
// table growth with retention on. Run runs the measurements, WriteDoc writes
// docs/benchmarks.md with SVG charts; `bench/cmd/outbox-bench` and
// scripts/bench drive them. The Go benchmarks in bench_test.go measure the
// same drains for benchstat comparisons.
package bench

import (
	"context"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Options configures a benchmark run. Zero fields take the defaults below.
type Options struct {
	// DatabaseURL is the PostgreSQL server. Use a private one: the idle
	// and WAL figures read cluster-wide counters. Never saved.
	DatabaseURL string `json:"-"`
	// Backlog is how many messages each drain publishes. Default 100,000.
	Backlog int
	// Growth is how many messages the growth run writes. Default 1,000,000.
	Growth int
	// GrowthRate is the growth run's write rate in messages per second;
	// default 10,000; -1 writes as fast as the writers can.
	GrowthRate int
	// IdleDuration is the idle measurement's window. Default 20s.
	IdleDuration time.Duration
	// LatencyDuration is how long each latency measurement writes (after a
	// 1 s warm-up). Default 10s.
	LatencyDuration time.Duration
	// Only limits the run to these steps (see Steps); empty runs all.
	Only []string
	// PayloadBytes is every message's payload size. Default 256.
	PayloadBytes int
	// Progress receives progress lines (stderr in the CLI); nil is silent.
	Progress io.Writer `json:"-"`
	// Publishers are the drain's destinations besides noop (see
	// RegisterPublisher); their drains run in the brokers step.
	Publishers []string
	// Repeats is how many times each throughput is measured; the median
	// is reported. Default 3.
	Repeats int
	// WriterDuration is how long each concurrent-writers run lasts.
	// Default 4s.
	WriterDuration time.Duration
	// WriterTransactions is how many transactions of each kind the writer
	// overhead times. Default 2,000.
	WriterTransactions int
}

// Steps are the measurements, in the order they run. The quiet one (idle)
// goes first, the long one (growth) last.
var Steps = []string{"idle", "writer", "latency", "wakeup", "drain", "brokers", "explain", "growth"}

func (o Options) withDefaults() (Options, error) {
	set := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	setD := func(v *time.Duration, d time.Duration) {
		if *v == 0 {
			*v = d
		}
	}
	set(&o.Backlog, 100_000)
	set(&o.Growth, 1_000_000)
	set(&o.GrowthRate, 10_000)
	set(&o.PayloadBytes, 256)
	set(&o.Repeats, 3)
	set(&o.WriterTransactions, 2000)
	setD(&o.IdleDuration, 20*time.Second)
	setD(&o.LatencyDuration, 10*time.Second)
	setD(&o.WriterDuration, 4*time.Second)
	if o.GrowthRate < 0 {
		o.GrowthRate = 0
	}
	if o.DatabaseURL == "" {
		return o, fmt.Errorf("no database URL")
	}
	for _, s := range o.Only {
		if !slices.Contains(Steps, s) {
			return o, fmt.Errorf("unknown step %q; steps are %s", s, strings.Join(Steps, ", "))
		}
	}
	for _, p := range o.Publishers {
		if _, err := publisherFactory(p); err != nil {
			return o, err
		}
	}
	if o.Backlog < 1000 || o.Growth < 1000 || o.Repeats < 1 || o.PayloadBytes < 0 {
		return o, fmt.Errorf("backlog and growth need at least 1,000 messages, repeats at least 1")
	}
	return o, nil
}

func (o Options) runs(step string) bool { return len(o.Only) == 0 || slices.Contains(o.Only, step) }

// Run runs the measurements opts selects and returns what they measured.
// Each measurement works in a schema of its own, dropped afterwards.
func Run(ctx context.Context, opts Options) (*Report, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	e, err := newEnv(ctx, opts)
	if err != nil {
		return nil, err
	}
	defer e.close()
	r := &Report{Options: opts, Started: time.Now()}
	if r.Machine, err = e.machine(ctx); err != nil {
		return nil, err
	}
	e.logf("%d CPUs, %s memory, PostgreSQL %s, %s; load average %s", r.Machine.CPUs, gib(r.Machine.MemoryBytes), r.Machine.PostgresVersion, r.Machine.GoVersion, r.Machine.LoadStart)
	step := func(name string, f func() error) error {
		if !opts.runs(name) {
			return nil
		}
		start := time.Now()
		e.logf("== %s", name)
		if err := f(); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		r.Machine.LoadMaxDuringRun1 = max(r.Machine.LoadMaxDuringRun1, load1())
		e.logf("== %s done in %s (load average %s)", name, time.Since(start).Round(time.Second), loadavg())
		return nil
	}
	steps := []struct {
		name string
		f    func() error
	}{
		{"idle", func() error {
			r.Idle, err = e.measureIdle(ctx)
			return err
		}},
		{"writer", func() error {
			r.Writer, err = e.measureWriter(ctx)
			return err
		}},
		{"latency", func() error {
			for _, m := range latencyModes {
				for _, rate := range []int{100, 1000} {
					res, err := e.measureLatency(ctx, m, rate)
					if err != nil {
						return err
					}
					e.logf("%s: p50 %s, p99 %s, max %s (%d samples, %.0f msg/s achieved)", res.title(), ms(res.P50), ms(res.P99), ms(res.Max), res.Samples, res.Achieved)
					r.Latency = append(r.Latency, res)
				}
			}
			return nil
		}},
		{"wakeup", func() error {
			r.Wakeup, err = e.measureWakeup(ctx)
			return err
		}},
		{"drain", func() error { return e.drains(ctx, r, false) }},
		{"brokers", func() error { return e.drains(ctx, r, true) }},
		{"explain", func() error {
			r.Explain, r.Commit, err = e.measureExplain(ctx)
			return err
		}},
		{"growth", func() error {
			r.Growth, err = e.measureGrowth(ctx)
			return err
		}},
	}
	for _, s := range steps {
		if err := step(s.name, s.f); err != nil {
			return r, err
		}
	}
	r.Finished = time.Now()
	r.Machine.LoadEnd = loadavg()
	return r, nil
}

// drains measures the drain throughputs. The repeats are interleaved (every
// configuration once, then again), so a burst of load from elsewhere on the
// machine hits all of them alike and the ratios in one run stay fair.
func (e *env) drains(ctx context.Context, r *Report, brokers bool) error {
	type plan struct {
		list *[]Throughput
		i    int
		run  func(context.Context) (float64, WALUsage, error)
	}
	var plans []plan
	add := func(list *[]Throughput, t Throughput, run func(context.Context) (float64, WALUsage, error)) {
		t.Backlog = e.opts.Backlog
		*list = append(*list, t)
		plans = append(plans, plan{list, len(*list) - 1, run})
	}
	if !brokers {
		for _, batch := range []int{10, 100, 1000} {
			add(&r.Ceiling, Throughput{Name: "ceiling", Batch: batch, Relays: 1}, func(ctx context.Context) (float64, WALUsage, error) {
				return e.drainCeiling(ctx, batch, 1)
			})
		}
		for _, batch := range []int{0, 1000} {
			add(&r.Watermill, Throughput{Name: "watermill", Batch: batch, Relays: 1}, func(ctx context.Context) (float64, WALUsage, error) {
				return e.drainWatermill(ctx, batch)
			})
		}
		for _, batch := range []int{10, 100, 1000} {
			for _, relays := range []int{1, 2, 4} {
				add(&r.Drain, Throughput{Name: "relay", Publisher: "noop", Batch: batch, Relays: relays}, func(ctx context.Context) (float64, WALUsage, error) {
					return e.drainRelays(ctx, "noop", batch, relays)
				})
			}
		}
		for name, params := range relayVariants {
			for _, batch := range []int{10, 100, 1000} {
				add(&r.Drain, Throughput{Name: "relay", Publisher: "noop", Variant: name, Batch: batch, Relays: 1}, func(ctx context.Context) (float64, WALUsage, error) {
					return e.drainRelaysWith(ctx, "noop", batch, 1, params)
				})
			}
		}
	} else {
		for _, pub := range e.opts.Publishers {
			for _, batch := range []int{100, 1000} {
				for _, relays := range []int{1, 4} {
					add(&r.Drain, Throughput{Name: "relay", Publisher: pub, Batch: batch, Relays: relays}, func(ctx context.Context) (float64, WALUsage, error) {
						return e.drainRelays(ctx, pub, batch, relays)
					})
				}
			}
		}
		if len(plans) == 0 {
			e.logf("no broker publisher registered or selected: skipped")
		}
	}
	wals := make([][]WALUsage, len(plans))
	for rep := range e.opts.Repeats {
		for i, p := range plans {
			t := &(*p.list)[p.i]
			rate, wal, err := p.run(ctx)
			if err != nil {
				return fmt.Errorf("%s: %w", t.title(), err)
			}
			t.Runs = append(t.Runs, rate)
			wals[i] = append(wals[i], wal)
			e.logf("%s: run %d/%d: %s msgs/s", t.title(), rep+1, e.opts.Repeats, thousands(rate))
		}
	}
	for i, p := range plans {
		t := &(*p.list)[p.i]
		t.WAL = wals[i][medianIndex(t.Runs)]
	}
	return nil
}

// machine describes the machine and the server.
func (e *env) machine(ctx context.Context) (Machine, error) {
	m := Machine{CPUs: runtime.NumCPU(), GoVersion: runtime.Version(), LoadStart: loadavg(), Settings: map[string]string{}}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if f := strings.Fields(line); len(f) >= 2 && f[0] == "MemTotal:" {
				kb, _ := strconv.ParseInt(f[1], 10, 64)
				m.MemoryBytes = kb * 1024
			}
		}
	}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPUModel = strings.TrimSpace(v)
				break
			}
		}
	}
	if err := e.admin.QueryRow(ctx, `SHOW server_version`).Scan(&m.PostgresVersion); err != nil {
		return m, err
	}
	rows, err := e.admin.Query(ctx, `SELECT name, setting || COALESCE(' ' || unit, '') FROM pg_settings WHERE name = ANY($1)`, settingNames)
	if err != nil {
		return m, err
	}
	defer rows.Close()
	for rows.Next() {
		var k, v string
		if err := rows.Scan(&k, &v); err != nil {
			return m, err
		}
		m.Settings[k] = v
	}
	return m, rows.Err()
}

// settingNames are the server settings the doc records: durability first.
var settingNames = []string{"fsync", "synchronous_commit", "full_page_writes", "wal_level", "wal_sync_method",
	"shared_buffers", "max_wal_size", "checkpoint_timeout", "autovacuum", "autovacuum_naptime"}

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

func load1() float64 {
	f := strings.Fields(loadavg())
	if len(f) == 0 {
		return 0
	}
	v, _ := strconv.ParseFloat(f[0], 64)
	return v
}
