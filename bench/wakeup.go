package bench

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/outboxpg"
)

// The wakeup step compares the ways a relay in another process learns of
// commits: none (it polls), NOTIFY (the writers' commits take a lock for
// it) and the WAL watch (a temporary logical replication slot: nothing on
// the writers' side, decoding work in the server's walsender). Each mode is
// measured with a relay running: concurrent writers' commits/s and the
// database's CPU meanwhile, then commit-to-publish latency at 1,000 msg/s
// after an idle spell. It needs wal_level = logical; scripts/bench runs it
// in a pass of its own with that setting.

// wakeMode is one cross-process wake-up.
type wakeMode struct {
	name     string
	notify   bool // writers NOTIFY, the relay LISTENs
	watchWAL bool // the relay watches the WAL
	label    string
}

var wakeModes = []wakeMode{
	{name: "neither", label: "writers without NOTIFY; relay with DisableListen: adaptive polling only (10 ms after work, doubling to 1 s)"},
	{name: "notify", notify: true, label: "writers with outboxpg.Options{Notify: true}; relay LISTENs"},
	{name: "wal", watchWAL: true, label: "writers without NOTIFY; relay with outboxpg.Options{WatchWAL: true}: a temporary logical replication slot (pgoutput) on a publication of the table's inserts"},
}

// wakeWriterCounts are the concurrent writers of the throughput runs.
var wakeWriterCounts = []int{8, 32}

// wakeIdle is the idle spell before the latency measurement: long enough
// for the relay to back off to its longest poll (1 s).
const wakeIdle = 10 * time.Second

// wakeLatencyRate is the latency measurement's rate, in msg/s.
const wakeLatencyRate = 1000

func (m wakeMode) latencyMode() latencyMode {
	return latencyMode{name: m.name, label: m.label, notify: m.notify, watchWAL: m.watchWAL}
}

// measureWakeup runs the wakeup step; it returns nil when wal_level is not
// logical (the WAL watch would only fall back to polling).
func (e *env) measureWakeup(ctx context.Context) (*Wakeup, error) {
	var level string
	if err := e.admin.QueryRow(ctx, `SHOW wal_level`).Scan(&level); err != nil {
		return nil, err
	}
	if level != "logical" {
		e.logf("wakeup: skipped, wal_level is %s; it needs logical (scripts/bench measures it in a pass of its own)", level)
		return nil, nil
	}
	w := &Wakeup{Idle: wakeIdle, Rate: wakeLatencyRate}
	for _, n := range wakeWriterCounts {
		for _, m := range wakeModes {
			w.Writers = append(w.Writers, WakeupWriters{Mode: m.name, Label: m.label, Writers: n})
		}
	}
	for _, m := range wakeModes {
		w.Latency = append(w.Latency, WakeupLatency{Mode: m.name, Label: m.label})
	}
	// Repeats interleaved, so load from elsewhere hits every mode alike.
	for rep := range e.opts.Repeats {
		for i := range w.Writers {
			t := &w.Writers[i]
			mode := wakeModes[i%len(wakeModes)]
			rate, cpu, claims, err := e.wakeWriters(ctx, mode, t.Writers)
			if err != nil {
				return nil, fmt.Errorf("%s, %d writers: %w", t.Mode, t.Writers, err)
			}
			t.Runs = append(t.Runs, rate)
			t.CPU = append(t.CPU, cpu)
			t.Claims = append(t.Claims, claims)
			e.logf("wakeup %s, %d writers: run %d/%d: %s commits/s; database CPU %.2f cores, %.0f ms per 1,000 commits (walsender %.0f ms); relay claims %.0f per 1,000 commits",
				t.Mode, t.Writers, rep+1, e.opts.Repeats, thousands(rate), cpu.Cores(), cpu.PerK(rate), cpu.WalsenderPerK(rate), claims)
		}
		for i, m := range wakeModes {
			l, err := e.measureLatencyAfterIdle(ctx, m.latencyMode(), wakeLatencyRate, wakeIdle)
			if err != nil {
				return nil, fmt.Errorf("%s latency: %w", m.name, err)
			}
			w.Latency[i].Runs = append(w.Latency[i].Runs, l)
			e.logf("wakeup %s, latency at %d msg/s after %s idle: run %d/%d: p50 %s, p99 %s, max %s, first %s (%.0f msg/s achieved, %d missing)",
				m.name, wakeLatencyRate, wakeIdle, rep+1, e.opts.Repeats, ms(l.P50), ms(l.P99), ms(l.Max), ms(l.First), l.Achieved, l.Missing)
		}
	}
	return w, nil
}

// wakeWriters runs n writers committing an order and one outbox message
// for opts.WriterDuration while a relay in mode publishes them, and returns
// commits/s with the database's CPU over the same window.
func (e *env) wakeWriters(ctx context.Context, mode wakeMode, n int) (float64, DBCPU, float64, error) {
	s, err := e.writerSetup(ctx, int32(n))
	if err != nil {
		return 0, DBCPU{}, 0, err
	}
	defer s.close()
	count := &statementCounter{} // the relay's claims (its pipelined batches)
	pool, err := e.pool(ctx, poolOptions{maxConns: outbox.WorkersDefault + 2, tracer: count})
	if err != nil {
		return 0, DBCPU{}, 0, err
	}
	defer pool.Close()
	store, err := outboxpg.New(pool, outboxpg.Options{Schema: s.schema, WatchWAL: mode.watchWAL})
	if err != nil {
		return 0, DBCPU{}, 0, err
	}
	relay, err := outbox.NewRelay(store, outbox.PublisherFunc(func(_ context.Context, m []outbox.Message) []error { return make([]error, len(m)) }),
		outbox.Config{Logger: quietLogger(), DisableListen: !mode.notify && !mode.watchWAL})
	if err != nil {
		return 0, DBCPU{}, 0, err
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- relay.Run(runCtx) }()
	defer func() { cancel(); <-done }()
	if mode.watchWAL {
		if err := e.waitWALWatch(ctx); err != nil {
			return 0, DBCPU{}, 0, err
		}
	}

	v := writerVariant{name: "order + 1 outbox message", notify: mode.notify, extra: outboxMessages(1)}
	payload := payloadOf(e.opts.PayloadBytes)
	if err := s.tx(ctx, v, payload); err != nil {
		return 0, DBCPU{}, 0, err
	}
	before, err := e.serverCPU(ctx)
	if err != nil {
		return 0, DBCPU{}, 0, err
	}
	claims := count.batches.Load()
	start := time.Now()
	rate, err := e.runWriters(ctx, s, v, n, payload)
	if err != nil {
		return 0, DBCPU{}, 0, err
	}
	after, err := e.serverCPU(ctx)
	if err != nil {
		return 0, DBCPU{}, 0, err
	}
	window := time.Since(start)
	claimsPerK := 0.0
	if rate > 0 {
		claimsPerK = float64(count.batches.Load()-claims) / (rate * window.Seconds()) * 1000
	}
	return rate, after.since(before, window), claimsPerK, nil
}

// waitWALWatch waits until a relay's WAL watch streams: an active slot. The
// benchmark's server is private, so any active slot is the relay's.
func (e *env) waitWALWatch(ctx context.Context) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		var n int
		if err := e.admin.QueryRow(ctx, `SELECT count(*) FROM pg_replication_slots WHERE active AND temporary`).Scan(&n); err != nil {
			return err
		}
		if n > 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the relay's WAL watch did not start within 30s (wal_level, max_replication_slots, role's REPLICATION attribute?)")
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// DBCPU is the CPU time the server's processes used over a window, read
// from /proc/<pid>/stat (user + system) of every process pg_stat_activity
// lists: client backends, the walsender, and the background processes
// (checkpointer, WAL writer, ...). It needs the server on this machine and
// /proc readable; otherwise it stays zero.
type DBCPU struct {
	Window    time.Duration
	Total     time.Duration
	Walsender time.Duration // the WAL watch's decoding, on its own
}

// Cores is the CPU used per second of the window.
func (c DBCPU) Cores() float64 {
	if c.Window <= 0 {
		return 0
	}
	return c.Total.Seconds() / c.Window.Seconds()
}

// PerK is the CPU milliseconds per 1,000 commits at rate commits/s.
func (c DBCPU) PerK(rate float64) float64 { return perKCommits(c.Total, c.Window, rate) }

// WalsenderPerK is PerK for the walsender alone.
func (c DBCPU) WalsenderPerK(rate float64) float64 { return perKCommits(c.Walsender, c.Window, rate) }

func perKCommits(cpu, window time.Duration, rate float64) float64 {
	if rate <= 0 || window <= 0 {
		return 0
	}
	return float64(cpu.Milliseconds()) / (rate * window.Seconds()) * 1000
}

// cpuSample is each server process's CPU time at one moment.
type cpuSample map[int32]procCPU

type procCPU struct {
	cpu       time.Duration
	walsender bool
}

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat's times: 100 on
// every Linux architecture Go supports.
const clockTicks = 100

// serverCPU samples the CPU time of the server's processes.
func (e *env) serverCPU(ctx context.Context) (cpuSample, error) {
	rows, err := e.admin.Query(ctx, `SELECT pid, backend_type = 'walsender' FROM pg_stat_activity`)
	if err != nil {
		return nil, err
	}
	type proc struct {
		pid       int32
		walsender bool
	}
	procs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (proc, error) {
		var p proc
		return p, r.Scan(&p.pid, &p.walsender)
	})
	if err != nil {
		return nil, err
	}
	s := cpuSample{}
	for _, p := range procs {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.pid))
		if err != nil {
			continue // not on this machine, or gone
		}
		// The fields after the command's closing parenthesis: utime and
		// stime are the 12th and 13th (14th and 15th of the whole line).
		_, rest, ok := strings.Cut(string(b), ") ")
		f := strings.Fields(rest)
		if !ok || len(f) < 13 {
			continue
		}
		utime, _ := strconv.ParseInt(f[11], 10, 64)
		stime, _ := strconv.ParseInt(f[12], 10, 64)
		s[p.pid] = procCPU{cpu: time.Duration(utime+stime) * time.Second / clockTicks, walsender: p.walsender}
	}
	return s, nil
}

// since returns the CPU used between before and s over window. A process
// that started meanwhile counts whole.
func (s cpuSample) since(before cpuSample, window time.Duration) DBCPU {
	c := DBCPU{Window: window}
	for pid, p := range s {
		d := p.cpu - before[pid].cpu
		if d < 0 { // the pid was reused
			d = p.cpu
		}
		c.Total += d
		if p.walsender {
			c.Walsender += d
		}
	}
	return c
}
