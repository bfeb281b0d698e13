package bench

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/outboxpg"
)

// latencyMode is one way of waking the relay.
type latencyMode struct {
	name  string
	label string
	// inProcess: the writer commits through Writer.Transact on the relay's
	// pool, which wakes the relay in-process after the commit.
	inProcess bool
	// notify: the writer (on a pool of its own) sends NOTIFY; the relay
	// LISTENs. Without notify, watchWAL and inProcess, the relay only
	// polls.
	notify bool
	// watchWAL: the writer (on a pool of its own) does nothing; the relay
	// watches the table's inserts in the WAL (outboxpg.Options.WatchWAL).
	watchWAL bool
}

var latencyModes = []latencyMode{
	{name: "in-process", inProcess: true,
		label: "writer and relay in one process, one pool: Writer.Transact wakes the relay after each commit"},
	{name: "polling",
		label: "writer on a pool of its own, no NOTIFY; relay with DisableListen: adaptive polling only (10 ms after work, doubling to 1 s)"},
	{name: "notify", notify: true,
		label: "writer on a pool of its own with outboxpg.Options{Notify: true}; relay LISTENs (the cross-process wake-up)"},
}

// latencyWriters is how many goroutines commit the scheduled messages, so a
// slow commit does not delay the next one (open loop).
const latencyWriters = 8

// latencyWarmup is excluded from the samples: it prepares statements and
// opens connections.
const latencyWarmup = time.Second

// measureLatency writes rate messages per second, one per transaction, for
// opts.LatencyDuration, and times each from the return of its commit to its
// arrival at the (no-op) publisher.
func (e *env) measureLatency(ctx context.Context, mode latencyMode, rate int) (Latency, error) {
	return e.measureLatencyAfterIdle(ctx, mode, rate, 0)
}

// measureLatencyAfterIdle is measureLatency with an idle spell: after the
// warm-up, nothing is written for idle (the relay backs off to its longest
// poll, its wake-up connection sits silent), and the measured messages start
// at once after it; Latency.First is the first one's latency.
func (e *env) measureLatencyAfterIdle(ctx context.Context, mode latencyMode, rate int, idle time.Duration) (Latency, error) {
	res := Latency{Mode: mode.name, Label: mode.label, Rate: rate, IdleBefore: idle}
	opts, drop, err := e.outboxTable(ctx, "latency")
	if err != nil {
		return res, err
	}
	defer drop()

	// The relay's Exchanges are the pool's only pipelined batches (the
	// writers send plain statements), so the tracer counts them even when
	// the writers share the pool.
	count := &statementCounter{}
	relayPool, err := e.pool(ctx, poolOptions{maxConns: outbox.WorkersDefault + 2 + latencyWriters, tracer: count})
	if err != nil {
		return res, err
	}
	defer relayPool.Close()
	writerPool := relayPool
	if !mode.inProcess {
		if writerPool, err = e.pool(ctx, poolOptions{maxConns: latencyWriters}); err != nil {
			return res, err
		}
		defer writerPool.Close()
	}
	pollOnly := !mode.inProcess && !mode.notify && !mode.watchWAL
	relayOpts := opts
	relayOpts.WatchWAL = mode.watchWAL
	relayStore, err := outboxpg.New(relayPool, relayOpts)
	if err != nil {
		return res, err
	}
	writerOpts := opts
	writerOpts.Notify = mode.notify
	writerStore, err := outboxpg.New(writerPool, writerOpts)
	if err != nil {
		return res, err
	}
	writer, err := outbox.NewWriter(writerStore, outbox.WriterConfig{})
	if err != nil {
		return res, err
	}

	rec := newLatencyRecorder()
	relay, err := outbox.NewRelay(relayStore, rec, outbox.Config{Logger: quietLogger(), DisableListen: pollOnly})
	if err != nil {
		return res, err
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	relayDone := make(chan error, 1)
	go func() { relayDone <- relay.Run(runCtx) }()
	defer func() {
		sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer scancel()
		_ = relay.Shutdown(sctx)
		cancel()
		<-relayDone
	}()

	commit := func(ctx context.Context, m *outbox.Message) error {
		write := func(ctx context.Context, tx pgx.Tx) error { return writer.Write(ctx, tx, m) }
		if mode.inProcess {
			return writer.Transact(ctx, write)
		}
		return writerStore.RunInTx(ctx, func(tx pgx.Tx) error { return write(ctx, tx) }) // no in-process wake-up
	}
	if mode.watchWAL {
		if err := e.waitWALWatch(ctx); err != nil {
			return res, err
		}
	}
	exchanges := count.batches.Load()
	var (
		committed map[uuid.UUID]time.Time
		achieved  float64
	)
	if idle > 0 {
		if _, _, err := e.schedule(ctx, rate, 0, latencyWarmup, commit); err != nil {
			return res, err
		}
		select {
		case <-ctx.Done():
			return res, ctx.Err()
		case <-time.After(idle):
		}
		committed, achieved, err = e.schedule(ctx, rate, e.opts.LatencyDuration, 0, commit)
	} else {
		committed, achieved, err = e.schedule(ctx, rate, e.opts.LatencyDuration, latencyWarmup, commit)
	}
	if err != nil {
		return res, err
	}
	res.Achieved = achieved
	if n := rec.count(); n > 0 {
		res.ExchangesPerMessage = float64(count.batches.Load()-exchanges) / float64(n)
	}

	// Let the last messages arrive; a poll-only relay may wait up to a poll.
	deadline := time.Now().Add(outbox.PollIntervalDefault + 4*time.Second)
	for time.Now().Before(deadline) && !rec.has(committed) {
		time.Sleep(10 * time.Millisecond)
	}
	lat, early, missing := rec.latencies(committed)
	res.Samples, res.Early, res.Missing = len(committed), early, missing
	if idle > 0 {
		res.First = rec.first(committed)
	}
	if len(lat) > 0 {
		res.P50, res.P95, res.P99, res.Max = percentile(lat, 0.50), percentile(lat, 0.95), percentile(lat, 0.99), lat[len(lat)-1]
		res.Published = float64(len(lat)) / float64(len(committed))
	}
	return res, nil
}

// schedule commits one message every 1/rate seconds for warmup plus
// duration, spreading them over latencyWriters goroutines, and returns when
// each measured message (after the warm-up) had its commit return, with the
// achieved rate of the measured part.
func (e *env) schedule(ctx context.Context, rate int, duration, warmup time.Duration, commit func(context.Context, *outbox.Message) error) (map[uuid.UUID]time.Time, float64, error) {
	type job struct {
		due      time.Time
		measured bool
	}
	jobs := make(chan job, rate*2)
	payload := payloadOf(e.opts.PayloadBytes)
	var (
		mu        sync.Mutex
		committed = map[uuid.UUID]time.Time{}
		firstErr  error
		wg        sync.WaitGroup
	)
	for range latencyWriters {
		wg.Go(func() {
			for j := range jobs {
				m := &outbox.Message{Topic: "bench.latency", Key: "k", Payload: payload}
				err := commit(ctx, m)
				at := time.Now()
				mu.Lock()
				if err != nil && firstErr == nil {
					firstErr = err
				}
				if err == nil && j.measured {
					committed[m.ID] = at
				}
				mu.Unlock()
			}
		})
	}
	interval := time.Second / time.Duration(rate)
	start := time.Now()
	measureFrom := start.Add(warmup)
	end := measureFrom.Add(duration)
	var measuredJobs int
	for i := 0; ; i++ {
		due := start.Add(time.Duration(i) * interval)
		if !due.Before(end) || ctx.Err() != nil {
			break
		}
		if d := time.Until(due); d > 0 {
			time.Sleep(d)
		}
		j := job{due: due, measured: !due.Before(measureFrom)}
		if j.measured {
			measuredJobs++
		}
		jobs <- j // blocks when the writers fall behind: the achieved rate shows it
	}
	close(jobs)
	wg.Wait()
	elapsed := time.Since(measureFrom)
	if elapsed <= 0 || len(committed) == 0 {
		elapsed = time.Second // a warm-up only: no rate
	}
	if firstErr != nil {
		return nil, 0, firstErr
	}
	if err := ctx.Err(); err != nil {
		return nil, 0, err
	}
	return committed, float64(len(committed)) / elapsed.Seconds(), nil
}

// latencyRecorder is the no-op publisher that notes when each message
// arrived.
type latencyRecorder struct {
	mu        sync.Mutex
	published map[uuid.UUID]time.Time
}

func newLatencyRecorder() *latencyRecorder {
	return &latencyRecorder{published: map[uuid.UUID]time.Time{}}
}

// Close does nothing: the recorder holds no connection.
func (r *latencyRecorder) Close() error { return nil }

func (r *latencyRecorder) Publish(_ context.Context, msgs []outbox.Message) []error {
	now := time.Now()
	r.mu.Lock()
	for _, m := range msgs {
		if _, dup := r.published[m.ID]; !dup {
			r.published[m.ID] = now
		}
	}
	r.mu.Unlock()
	return make([]error, len(msgs))
}

func (r *latencyRecorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.published)
}

func (r *latencyRecorder) has(committed map[uuid.UUID]time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for id := range committed {
		if _, ok := r.published[id]; !ok {
			return false
		}
	}
	return true
}

// latencies returns the sorted commit-to-publish latencies of the committed
// messages. A message published before its Commit call returned (the relay
// saw the commit before the writer heard of it) counts as 0 and in early.
func (r *latencyRecorder) latencies(committed map[uuid.UUID]time.Time) (lat []time.Duration, early, missing int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for id, at := range committed {
		p, ok := r.published[id]
		if !ok {
			missing++
			continue
		}
		d := p.Sub(at)
		if d < 0 {
			early++
			d = 0
		}
		lat = append(lat, d)
	}
	slices.Sort(lat)
	return lat, early, missing
}

// first returns the latency of the committed message whose commit returned
// first (0 if it was not published).
func (r *latencyRecorder) first(committed map[uuid.UUID]time.Time) time.Duration {
	var id uuid.UUID
	var at time.Time
	for i, t := range committed {
		if at.IsZero() || t.Before(at) {
			id, at = i, t
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	p, ok := r.published[id]
	if !ok || at.IsZero() {
		return 0
	}
	return max(p.Sub(at), 0)
}

// percentile returns the q-quantile of sorted (nearest rank).
func percentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

func (l Latency) title() string {
	return fmt.Sprintf("latency %s at %d msg/s", l.Mode, l.Rate)
}
