package bench

import (
	"slices"
	"time"
)

// Report is everything one `outbox-bench` run measured.
type Report struct {
	Command  string
	Machine  Machine
	Options  Options
	Started  time.Time
	Finished time.Time

	Drain     []Throughput // relay to each publisher, by batch size and relay count
	Ceiling   []Throughput // raw DELETE ... RETURNING loop, by batch size
	Watermill []Throughput // watermill-sql forwarder, defaults and batch 1000
	Latency   []Latency
	Writer    *WriterResult
	Idle      []Idle
	Growth    *Growth
	Wakeup    *Wakeup `json:",omitempty"`
	Explain   []Explain
	Commit    CommitCost

	// Later lists steps measured in later runs and merged in.
	Later []LaterRun

	// Notes is the hand-written analysis kept from the previous doc.
	Notes string `json:"-"`
}

// Machine describes where the numbers come from.
type Machine struct {
	CPUs              int
	CPUModel          string
	MemoryBytes       int64
	GoVersion         string
	PostgresVersion   string
	Settings          map[string]string // fsync, synchronous_commit, ...
	LoadStart         string            // /proc/loadavg at the start
	LoadEnd           string
	LoadMaxDuringRun1 float64 // highest 1-minute load average seen between steps
}

// Throughput is a repeated drain of the same backlog.
type Throughput struct {
	Name      string // relay, ceiling, watermill, writers
	Publisher string // noop, nats, ...; relay only
	Label     string // the writers' transaction
	// Variant names an experiment on the relay's sessions (e.g.
	// synchronous_commit=off); empty for the relay as shipped. Variants are
	// left out of the targets and the chart.
	Variant string
	Batch   int
	Relays  int // relays (or loops) working at once
	Backlog int
	Runs    []float64 // msgs/s of each repeat
	WAL     WALUsage  // of the median run
}

// Median returns the median of the runs (the lower middle one for an even
// count), 0 if there are none.
func (t Throughput) Median() float64 {
	return median(t.Runs)
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[(len(s)-1)/2]
}

// medianIndex returns the index in xs of its median.
func medianIndex(xs []float64) int {
	m := median(xs)
	for i, x := range xs {
		if x == m {
			return i
		}
	}
	return 0
}

// Latency is commit-to-publish latency at one rate in one set-up.
type Latency struct {
	Mode      string  // in-process, polling, notify
	Label     string  // long description of the set-up
	Rate      int     // target messages (= transactions) per second
	Achieved  float64 // messages per second actually committed
	Samples   int
	Early     int // published before Commit returned to the writer (counted as 0)
	Missing   int // committed but never published within the grace period
	P50, P95  time.Duration
	P99, Max  time.Duration
	Published float64 // fraction of samples published
	// ExchangesPerMessage is the relay's claim round trips (Store.Exchange)
	// per message published, warm-up included.
	ExchangesPerMessage float64
	// IdleBefore is the idle spell between the warm-up and the measured
	// messages (0: none); First is then the latency of the first of them.
	IdleBefore time.Duration `json:",omitempty"`
	First      time.Duration `json:",omitempty"`
}

// Wakeup compares the cross-process wake-ups (neither, notify, wal) with a
// relay running: writers' commits/s with the database's CPU, and latency
// after an idle spell.
type Wakeup struct {
	Idle    time.Duration // idle spell before each latency run
	Rate    int           // latency runs' msg/s
	Writers []WakeupWriters
	Latency []WakeupLatency
}

// WakeupWriters is one mode at one writer count, over the repeats.
type WakeupWriters struct {
	Mode    string
	Label   string
	Writers int
	Runs    []float64 // commits/s
	CPU     []DBCPU   // the database's CPU in each run
	Claims  []float64 // the relay's claims (Exchange round trips) per 1,000 commits
}

// Median returns the median commits/s.
func (w WakeupWriters) Median() float64 { return median(w.Runs) }

// CPUMedian returns the medians over the runs of the database's CPU in
// cores, in ms per 1,000 commits, and the walsender's ms per 1,000 commits.
func (w WakeupWriters) CPUMedian() (cores, perK, walsenderPerK float64) {
	var c, p, ws []float64
	for i, cpu := range w.CPU {
		c = append(c, cpu.Cores())
		p = append(p, cpu.PerK(w.Runs[i]))
		ws = append(ws, cpu.WalsenderPerK(w.Runs[i]))
	}
	return median(c), median(p), median(ws)
}

// WakeupLatency is one mode's latency runs after an idle spell.
type WakeupLatency struct {
	Mode  string
	Label string
	Runs  []Latency
}

// WriterResult is the writer's cost on a business transaction.
type WriterResult struct {
	Transactions int // per variant, sequential
	Variants     []WriterVariant
	Concurrent   []Throughput // 8 writers, commits/s in Runs
}

// WriterVariant is one kind of business transaction.
type WriterVariant struct {
	Name     string
	P50, P95 time.Duration
}

// Idle is what a relay with nothing to publish costs the database.
type Idle struct {
	Name       string
	Window     time.Duration
	Statements int64 // statements sent by the relay's pool
	RoundTrips int64 // batches count once
	Xids       int64 // transaction ids assigned cluster-wide: write transactions
	WALBytes   int64
	Autovacuum bool // autovacuum worked during the window (twice in a row)
}

// Growth is a long run with retention on.
type Growth struct {
	Messages      int
	Retention     time.Duration
	Duration      time.Duration // writing until every message is published and expired rows are gone
	WriteRate     float64       // achieved msgs/s
	Before, Peak  TableState
	After         TableState
	Samples       []GrowthSample
	CaughtUp      bool          // expired rows back to (almost) zero at the end
	MaxExpired    int64         // most published-but-expired rows seen
	CleanupLagMax time.Duration // age of the oldest expired row, at its worst
}

// TableState is a table's size and dead tuples.
type TableState struct {
	TotalBytes int64 // pg_total_relation_size
	DeadTuples int64 // pg_stat_user_tables.n_dead_tup
	LiveTuples int64
	Autovacuum int64 // autovacuum_count
}

// GrowthSample is the table over time.
type GrowthSample struct {
	At         time.Duration
	Written    int64
	Pending    int64
	Kept       int64 // published, inside retention
	Expired    int64 // published, past retention: cleanup's backlog
	TotalBytes int64
	DeadTuples int64
}

// Explain is one statement's plan with its cost.
type Explain struct {
	Name      string
	Rows      int
	Execution time.Duration
	WALBytes  int64
	Plan      string
}
