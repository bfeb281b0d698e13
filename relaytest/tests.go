package relaytest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/outboxdriver"
)

func testRollback(t *testing.T, h Harness) {
	ctx := context.Background()
	rolledBack, committed := newMessage("rollback", 1), newMessage("commit", 2)
	if err := h.Write(ctx, false, rolledBack); err != nil {
		t.Fatalf("write and roll back: %v", err)
	}
	if err := h.Write(ctx, true, committed); err != nil {
		t.Fatalf("write and commit: %v", err)
	}
	rec := NewRecorder()
	StartRelay(t, h.Store, rec, outbox.Config{PollInterval: 50 * time.Millisecond})
	rec.WaitFor(t, 10*time.Second, "the committed message "+committed.ID.String(), func() bool { return rec.Count(committed.ID) == 1 })
	waitEmpty(t, h, 10*time.Second)
	if n := rec.Count(rolledBack.ID); n != 0 {
		t.Fatalf("rolled-back message %s was published %d times, want never", rolledBack.ID, n)
	}
	if _, err := admin(t, h).Get(ctx, rolledBack.ID); !errors.Is(err, outbox.ErrNotFound) {
		t.Fatalf("Get(rolled-back %s) = %v, want ErrNotFound", rolledBack.ID, err)
	}
	got, _ := rec.Published(committed.ID)
	if got.Topic != committed.Topic || got.Key != committed.Key || string(got.Payload) != string(committed.Payload) || got.Headers["n"] != "2" {
		t.Fatalf("published %+v, want the fields of %+v", got, committed)
	}
}

func testConcurrent(t *testing.T, h Harness) {
	ctx := context.Background()
	const writers, relays = 8, 4
	total := scaled(h, 20000)
	perWriter := total / writers
	total = perWriter * writers
	rec := NewRecorder()
	for range relays {
		StartRelay(t, h.Store, rec, outbox.Config{BatchSize: 100, Workers: 2, PollInterval: 50 * time.Millisecond})
	}
	ids := make(chan uuid.UUID, total)
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		wg.Go(func() {
			const perTx = 10
			for i := 0; i < perWriter; i += perTx {
				var msgs []*outbox.Message
				for j := i; j < min(i+perTx, perWriter); j++ {
					msgs = append(msgs, newMessage("concurrent", w*perWriter+j))
				}
				if err := h.Write(ctx, true, msgs...); err != nil {
					errs <- fmt.Errorf("writer %d: %w", w, err)
					return
				}
				h.Notify()
				for _, m := range msgs {
					ids <- m.ID
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	close(ids)
	rec.WaitFor(t, 3*time.Minute, fmt.Sprintf("%d distinct messages published", total), func() bool { return rec.Distinct() >= total })
	waitEmpty(t, h, 30*time.Second)
	seen := 0
	for id := range ids {
		seen++
		if n := rec.Count(id); n != 1 {
			t.Errorf("message %s was published %d times, want exactly once", id, n)
		}
	}
	if seen != total || rec.Distinct() != total {
		t.Fatalf("wrote %d messages, published %d distinct, want %d", seen, rec.Distinct(), total)
	}
}

// An outage of the destination must not use up attempts: with MaxAttempts 1,
// one counted failure would dead-letter the message.
func testUnavailable(t *testing.T, h Harness) {
	ctx := context.Background()
	m := newMessage("orders", 1)
	if err := h.Write(ctx, true, m); err != nil {
		t.Fatal(err)
	}
	const outageCalls = 4
	var mu sync.Mutex
	var calls []time.Time
	rec := NewRecorder()
	rec.Fail = func(outbox.Message) error {
		mu.Lock()
		defer mu.Unlock()
		calls = append(calls, time.Now())
		if len(calls) <= outageCalls {
			return outbox.Unavailable(errors.New("dial tcp 127.0.0.1:5672: connection refused"))
		}
		return nil
	}
	cfg := outbox.Config{MaxAttempts: 1, PollInterval: 20 * time.Millisecond, ActivePollInterval: 5 * time.Millisecond, Workers: 1}
	StartRelay(t, h.Store, rec, cfg)
	rec.WaitFor(t, 30*time.Second, "the message, after the outage", func() bool { return rec.Count(m.ID) == 1 })

	got, _ := rec.Published(m.ID)
	if got.Attempts != 0 {
		t.Errorf("published with %d attempt(s) recorded; want 0: an unavailable destination is no attempt", got.Attempts)
	}
	if st, err := admin(t, h).Stats(ctx); err != nil || st.Dead != 0 {
		t.Errorf("stats %+v, %v; want nothing dead", st, err)
	}
	// The worker paused between tries (100 ms, then 200 ms, then 400 ms)
	// instead of claiming and failing in a tight loop.
	mu.Lock()
	defer mu.Unlock()
	if pause := calls[outageCalls-1].Sub(calls[0]); pause < 700*time.Millisecond {
		t.Errorf("%d tries during the outage within %v; want pauses of at least 100+200+400 ms between them", outageCalls, pause)
	}
}

// failDown is a Recorder.Fail that makes the destination of topic "down"
// unreachable and publishes everything else.
func failDown(m outbox.Message) error {
	if m.Topic == "down" {
		return outbox.Unavailable(errors.New("dial tcp 127.0.0.1:8443: connection refused"))
	}
	return nil
}

// testUnavailableLeavesOthersATurn queues a batch's worth of messages to an
// unreachable destination ahead of messages to one that is up: the first
// must step back in the queue, not be claimed again and again ahead of the
// others.
func testUnavailableLeavesOthersATurn(t *testing.T, h Harness) {
	ctx := context.Background()
	const batch = 3
	var down, up []*outbox.Message
	for i := range 2 * batch {
		down = append(down, newMessage("down", i))
	}
	for i := range batch {
		up = append(up, newMessage("up", i))
	}
	if err := h.Write(ctx, true, down...); err != nil {
		t.Fatal(err)
	}
	if err := h.Write(ctx, true, up...); err != nil {
		t.Fatal(err)
	}
	rec := NewRecorder()
	rec.Fail = failDown
	cfg := outbox.Config{BatchSize: batch, Workers: 1, PollInterval: 20 * time.Millisecond, ActivePollInterval: 5 * time.Millisecond}
	StartRelay(t, h.Store, rec, cfg)
	rec.WaitFor(t, 30*time.Second, "the messages to the destination that is up", func() bool { return rec.Distinct() == len(up) })

	// The first claim took a batch of them at least: their error is on
	// record, and none counts an attempt.
	a := admin(t, h)
	withError := 0
	for _, m := range down {
		got, err := a.Get(ctx, m.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.Status != outbox.StatusPending || got.Attempts != 0 {
			t.Errorf("message %s to the unreachable destination: status %s, %d attempt(s); want pending with none", m.ID, got.Status, got.Attempts)
		}
		if strings.Contains(got.LastError, "connection refused") {
			withError++
		}
	}
	if withError < batch {
		t.Errorf("%d messages to the unreachable destination have its error on record; want at least the first batch, %d", withError, batch)
	}
}

// testUnavailableRecordsBeforePause publishes a batch of which one message
// goes through and one meets an unreachable destination: the published
// message's outcome must be recorded before the worker pauses, since the
// pause may outlast the lease and let another worker send it again.
func testUnavailableRecordsBeforePause(t *testing.T, h Harness) {
	ctx := context.Background()
	ok, down := newMessage("up", 1), newMessage("down", 2)
	if err := h.Write(ctx, true, ok, down); err != nil {
		t.Fatal(err)
	}
	rec := NewRecorder()
	rec.Fail = failDown
	spy := &publishedSpy{Store: h.Store, watch: ok.ID, recorded: make(chan outboxdriver.Claim, 1)}
	cfg := outbox.Config{Workers: 1, PollInterval: 20 * time.Millisecond, ActivePollInterval: 5 * time.Millisecond}
	StartRelay(t, spy, rec, cfg)
	select {
	case claim := <-spy.recorded:
		if claim.Limit != 0 {
			t.Errorf("the published message was recorded together with a claim of %d: after the pause, not before it", claim.Limit)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the published message was never recorded")
	}
	if n := rec.Count(ok.ID); n != 1 {
		t.Errorf("message %s published %d times, want 1", ok.ID, n)
	}
}

// publishedSpy reports the claim that came with the settlement recording one
// message as published.
type publishedSpy struct {
	outboxdriver.Store
	watch    uuid.UUID
	once     sync.Once
	recorded chan outboxdriver.Claim
}

func (s *publishedSpy) SettleAndClaim(ctx context.Context, settle outboxdriver.Settlement, claim outboxdriver.Claim) ([]outbox.Message, error) {
	batch, err := s.Store.SettleAndClaim(ctx, settle, claim)
	if err == nil && slices.Contains(settle.Published, s.watch) {
		s.once.Do(func() { s.recorded <- claim })
	}
	return batch, err
}

// testFailures fails a number of messages until they are dead, and one
// message permanently. Each message's retry delays must be drawn under a cap
// that starts at BackoffBase and doubles (full jitter): the test checks the
// delays the relay asked the store for, across the messages (they must vary,
// fill the range below each cap and grow from the first retry to the
// second), that the store applied them, and that the next try came no
// sooner. A permanent failure is dead at its first attempt.
func testFailures(t *testing.T, h Harness) {
	ctx := context.Background()
	a := admin(t, h)
	// Enough messages that drawing all of one attempt's delays in one half of
	// its range (the chance of a false failure below) is about 2^-flakies.
	const flakies = 24
	var flaky []*outbox.Message
	for i := range flakies {
		// A key each: a failure must not hold another flaky message back.
		flaky = append(flaky, &outbox.Message{Topic: "flaky", Key: fmt.Sprintf("flaky-%d", i), Payload: fmt.Appendf(nil, `{"n":%d}`, i)})
	}
	poison := &outbox.Message{Topic: "poison", Key: "poison", Payload: []byte(`{`)}
	if err := h.Write(ctx, true, append(slices.Clone(flaky), poison)...); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	healthy := false
	failedAt := map[uuid.UUID][]time.Time{}
	poisonCalls := 0
	rec := NewRecorder()
	rec.Fail = func(m outbox.Message) error {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case healthy:
			return nil
		case m.Topic == "poison":
			poisonCalls++
			return outbox.Permanent(errors.New("cannot decode payload"))
		default:
			failedAt[m.ID] = append(failedAt[m.ID], time.Now())
			return fmt.Errorf("broker said no (%d)", len(failedAt[m.ID]))
		}
	}
	const base, maxDelay, attempts = 100 * time.Millisecond, 10 * time.Second, 3
	cfg := outbox.Config{MaxAttempts: attempts, BackoffBase: base, BackoffMax: maxDelay, PollInterval: 20 * time.Millisecond, ActivePollInterval: 5 * time.Millisecond, Workers: 1}
	spy := &settlementSpy{Store: h.Store, admin: a, retries: map[uuid.UUID][]observedRetry{}}
	StartRelay(t, spy, rec, cfg)

	deadline := time.Now().Add(30 * time.Second)
	for {
		st, err := a.Stats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if st.Dead == flakies+1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 30s, %d of %d messages are dead (%d pending)", st.Dead, flakies+1, st.Pending)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if rec.Distinct() != 0 {
		t.Fatal("a failed message was recorded as published")
	}

	mu.Lock()
	tried, calls := maps.Clone(failedAt), poisonCalls
	mu.Unlock()
	spy.mu.Lock()
	retried, rowErrs := maps.Clone(spy.retries), slices.Clone(spy.rowErrs)
	spy.mu.Unlock()
	if calls != 1 {
		t.Errorf("the permanently failing message %s was tried %d times, want once: a permanent error is dead at once, not retried", poison.ID, calls)
	}
	if m, err := a.Get(ctx, poison.ID); err != nil || m.Status != outbox.StatusDead || m.Attempts != 1 || !strings.Contains(m.LastError, "cannot decode payload") || strings.Contains(m.LastError, "attempt ") {
		t.Errorf("permanently failed message %s: %+v, %v; want dead after 1 attempt with the publisher's error (not that attempts ran out)", poison.ID, m, err)
	}

	if len(rowErrs) > 0 {
		t.Errorf("the stored rows did not take the retries the relay asked for:\n%s", strings.Join(rowErrs, "\n"))
	}
	// delays[i] holds every message's delay after its failed attempt i+1.
	delays := make([][]time.Duration, attempts-1)
	for _, f := range flaky {
		m, err := a.Get(ctx, f.ID)
		if err != nil {
			t.Fatal(err)
		}
		if m.Status != outbox.StatusDead || m.Attempts != attempts || !strings.Contains(m.LastError, fmt.Sprintf("attempt %d of %d", attempts, attempts)) {
			t.Errorf("message %s: status %s, attempts %d, error %q; want dead after %d attempts with the last error", f.ID, m.Status, m.Attempts, m.LastError, attempts)
		}
		times, retries := tried[f.ID], retried[f.ID]
		if len(times) != attempts || len(retries) != attempts-1 {
			t.Errorf("message %s failed %d times with %d retries recorded, want exactly MaxAttempts=%d failures and %d retries", f.ID, len(times), len(retries), attempts, attempts-1)
			continue
		}
		for i, r := range retries {
			capped := outbox.BackoffCap(base, maxDelay, i+1)
			if r.delay < 0 || r.delay > capped {
				t.Errorf("message %s: retry delay after attempt %d is %v, want within the full-jitter bounds [0, %v]", f.ID, i+1, r.delay, capped)
			}
			delays[i] = append(delays[i], r.delay)
			// The next try waits for the delay: the store's clock started it
			// after the failure, and the claim needs it to have passed.
			if gap := times[i+1].Sub(times[i]); gap < r.delay-clockSlack || gap > capped+2*time.Second {
				t.Errorf("message %s: try %d came %v after the failure before it, want between its delay %v and its cap %v plus what polling allows", f.ID, i+2, gap, r.delay, capped)
			}
		}
	}
	// Full jitter: below each cap the delays spread over the whole range,
	// so some fall in each half; the cap doubles, so some second delays
	// exceed the first cap.
	for i, ds := range delays {
		capped := outbox.BackoffCap(base, maxDelay, i+1)
		low := slices.ContainsFunc(ds, func(d time.Duration) bool { return d < capped/2 })
		high := slices.ContainsFunc(ds, func(d time.Duration) bool { return d > capped/2 })
		if !low || !high {
			t.Errorf("retry delays after attempt %d: %v; want them drawn uniformly in [0, %v] (full jitter), some in each half", i+1, ds, capped)
		}
	}
	if first := outbox.BackoffCap(base, maxDelay, 1); !slices.ContainsFunc(delays[1], func(d time.Duration) bool { return d > first }) {
		t.Errorf("retry delays after attempt 2: %v; none above the first cap %v, want the cap doubled to %v", delays[1], first, outbox.BackoffCap(base, maxDelay, 2))
	}

	// An operator retries them; the broker is healthy again.
	mu.Lock()
	healthy = true
	mu.Unlock()
	ids := []uuid.UUID{poison.ID}
	for _, f := range flaky {
		ids = append(ids, f.ID)
	}
	n, err := a.RetryDead(ctx, ids...)
	if err != nil || n != len(ids) {
		t.Fatalf("RetryDead = %d, %v; want %d, nil", n, err, len(ids))
	}
	rec.WaitFor(t, 10*time.Second, "retried dead messages to be published", func() bool { return rec.Distinct() == len(ids) })
}

// clockSlack allows for the store's clock and the test's to differ a little
// (the same machine's, read at different moments).
const clockSlack = 50 * time.Millisecond

func testWakeLatency(t *testing.T, h Harness, cfg outbox.Config, ready func(), write func(ctx context.Context, m *outbox.Message) error) {
	ctx := context.Background()
	rec := NewRecorder()
	// Polls are an hour apart: only the wake-up can deliver in time.
	cfg.PollInterval, cfg.ActivePollInterval = time.Hour, time.Hour
	StartRelay(t, h.Store, rec, cfg)
	if ready != nil {
		ready()
	}
	var latencies []time.Duration
	for i := range 5 {
		m := newMessage("wake", i)
		start := time.Now()
		if err := write(ctx, m); err != nil {
			t.Fatal(err)
		}
		// Well short of the hour-long poll, and long enough for a WAL
		// watch on a loaded 2-core CI machine (5 s failed there once).
		rec.WaitFor(t, 30*time.Second, "message "+m.ID.String()+" to be published after its commit", func() bool { return rec.Count(m.ID) == 1 })
		latencies = append(latencies, time.Since(start))
	}
	slices.Sort(latencies)
	t.Logf("commit-to-publish latencies: %v (median %v)", latencies, latencies[len(latencies)/2])
	// The bound is generous for a loaded CI machine; the measured median is
	// logged above and is typically a few milliseconds.
	if median := latencies[len(latencies)/2]; median > time.Second {
		t.Fatalf("median commit-to-publish latency %v, want well under a second", median)
	}
}

// TestWakeLatency checks a store's own cross-process wake-up: a relay that
// polls once an hour must publish each message write commits within a
// second (the median is logged). write must not wake relays in-process;
// ready, if not nil, returns once the relay's listener is set up.
func TestWakeLatency(t *testing.T, h Harness, cfg outbox.Config, ready func(), write func(ctx context.Context, m *outbox.Message) error) {
	testWakeLatency(t, h, cfg, ready, write)
}

// waitIdle lets a just-started relay finish its first look at the table (and
// any wake-up its store's listener sends once connected), so a measurement
// starts from an idle relay: it waits until a whole poll interval passes with
// at most one statement sent, the last two being idle probes (read-only
// SELECTs). The count matters, not only the kind: a store may look for work
// with a read-only SELECT too (a claim that first checks whether anything is
// due, so that an idle relay never takes a write lock), and then the burst of
// first looks ends in SELECTs as well.
func waitIdle(t *testing.T, h Harness, interval time.Duration) {
	t.Helper()
	if h.Statements == nil {
		time.Sleep(200 * time.Millisecond)
		return
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		before := len(h.Statements())
		time.Sleep(interval) // one poll interval of the relay under test
		all := h.Statements()
		if n := len(all); n-before <= 1 && n >= 2 && isSelect(all[n-1]) && isSelect(all[n-2]) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the relay did not settle into idle probes within 30s; last statements: %q", all[max(0, len(all)-3):])
		}
	}
}

// waitForStatement waits up to 10s for a statement matching match among
// the store's statements from index from on, and returns its index.
func waitForStatement(t *testing.T, h Harness, from int, match func(sql string) bool, what string) int {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		all := h.Statements()
		if from < len(all) {
			if i := slices.IndexFunc(all[from:], match); i >= 0 {
				return from + i
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not sent within 10s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func isSelect(sql string) bool {
	return strings.HasPrefix(strings.ToUpper(strings.TrimSpace(sql)), "SELECT")
}

func testPollOnly(t *testing.T, h Harness) {
	ctx := context.Background()
	rec := NewRecorder()
	StartRelay(t, h.Store, rec, outbox.Config{DisableListen: true, PollInterval: 100 * time.Millisecond})
	m := newMessage("poll", 1)
	if err := h.Write(ctx, true, m); err != nil { // no Notify: only the poll finds it
		t.Fatal(err)
	}
	rec.WaitFor(t, 10*time.Second, "the poll to find "+m.ID.String(), func() bool { return rec.Count(m.ID) == 1 })
}

func testIdle(t *testing.T, h Harness) {
	if h.Statements == nil {
		t.Skip("the store cannot count statements")
	}
	const (
		interval, heartbeat, window = 200 * time.Millisecond, 500 * time.Millisecond, 3 * time.Second
		workers                     = 4
	)
	rec := NewRecorder()
	StartRelay(t, h.Store, rec, outbox.Config{PollInterval: interval, HeartbeatInterval: heartbeat, Workers: workers})
	waitIdle(t, h, interval)
	// The relay's first add to the per-minute rollup, at one of its first
	// heartbeats, writes the minute's row and counts the backlog; the next
	// comes a minute later. The window starts at the registry beat after
	// it, so that the idle workers the add woke (on a store whose own
	// writes wake them) have probed before the window, not in it.
	isMinuteAdd := func(sql string) bool { return strings.Contains(sql, "_minutes") && strings.Contains(sql, "INSERT") }
	isBeat := func(sql string) bool { return strings.Contains(sql, "_relays") && strings.Contains(sql, "INSERT") }
	added := waitForStatement(t, h, 0, isMinuteAdd, "the relay's first add to the per-minute rollup")
	before := waitForStatement(t, h, added+1, isBeat, "the registry beat after the relay's first add to the per-minute rollup") + 1
	time.Sleep(window) // measuring what happens over a stretch of idle time
	idle := h.Statements()[before:]
	// The registry beats, one per heartbeat plus one the window may
	// straddle, are the only writes; on a store whose own writes wake
	// the relay, each may also wake its idle workers, which probe once.
	beats, beatLimit := int64(0), int64(window/heartbeat)+1
	var sent, control, purges int64
	for _, sql := range idle {
		switch {
		case strings.Contains(sql, "_relays") && !isSelect(sql):
			if strings.Contains(sql, "INSERT") {
				beats++ // one per beat, whatever else its transaction runs
			}
		case isTransactionControl(sql):
			control++ // of a beat's transaction, counted below
		case strings.Contains(sql, "_attempts") && purges < 2:
			purges++ // the purge of the attempts history, a heartbeat after start
		case !isSelect(sql):
			t.Errorf("idle relay sent %q; want only read-only SELECT probes and registry beats", sql)
		default:
			sent++
		}
	}
	if beats > beatLimit || control > 4*beatLimit {
		t.Errorf("idle relay wrote %d registry statements (and %d transaction statements) in %v; want at most %d beats (one per heartbeat of %v)", beats, control, window, beatLimit, heartbeat)
	}
	// One probe per interval, plus one for the interval the window may
	// straddle; plus one per worker for each beat that woke them, and for
	// a beat just before the window.
	polls := int64(window/interval) + 1
	limit := polls
	if h.OwnWritesWake {
		limit += (beats + 1) * workers
	}
	t.Logf("idle relay sent %d statements in %v (poll interval %v, limit %d)", sent, window, interval, limit)
	if sent > limit {
		t.Fatalf("idle relay sent %d statements in %v, want at most %d (one read-only probe per poll interval, and per idle worker after each heartbeat that woke it)", sent, window, limit)
	}
	if sent < polls/2 {
		t.Fatalf("idle relay sent only %d statements in %v: it is not polling every %v", sent, window, interval)
	}
}

func testShutdownFinishes(t *testing.T, h Harness) {
	ctx := context.Background()
	m := newMessage("slow", 1)
	if err := h.Write(ctx, true, m); err != nil {
		t.Fatal(err)
	}
	entered, release := make(chan struct{}), make(chan struct{})
	rec := NewRecorder()
	slow := outbox.PublisherFunc(func(ctx context.Context, batch []outbox.Message) []error {
		close(entered)
		<-release
		return rec.Publish(ctx, batch)
	})
	relay, err := outbox.NewRelay(h.Store, slow, outbox.Config{Logger: TestLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	runDone := make(chan error, 1)
	go func() { runDone <- relay.Run(ctx) }()
	<-entered
	shutdownDone := make(chan error, 1)
	go func() { shutdownDone <- relay.Shutdown(ctx) }()
	select {
	case err := <-shutdownDone:
		t.Fatalf("Shutdown returned %v while a batch was still publishing", err)
	case <-time.After(100 * time.Millisecond): // Shutdown must still be waiting
	}
	close(release)
	if err := <-shutdownDone; err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if err := <-runDone; err != nil {
		t.Fatalf("Run: %v", err)
	}
	if rec.Count(m.ID) != 1 {
		t.Fatalf("message %s published %d times, want once", m.ID, rec.Count(m.ID))
	}
	if _, err := admin(t, h).Get(ctx, m.ID); !errors.Is(err, outbox.ErrNotFound) {
		t.Fatalf("after a clean shutdown, Get(%s) = %v; want it deleted as published", m.ID, err)
	}
}

func testShutdownReleases(t *testing.T, h Harness) {
	ctx := context.Background()
	m := newMessage("stuck", 1)
	if err := h.Write(ctx, true, m); err != nil {
		t.Fatal(err)
	}
	entered := make(chan struct{})
	stuck := outbox.PublisherFunc(func(ctx context.Context, batch []outbox.Message) []error {
		close(entered)
		<-ctx.Done() // a broker that never answers
		errs := make([]error, len(batch))
		for i := range errs {
			errs[i] = ctx.Err()
		}
		return errs
	})
	relay, err := outbox.NewRelay(h.Store, stuck, outbox.Config{LeaseDuration: time.Hour, Logger: TestLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	runDone := make(chan error, 1)
	go func() { runDone <- relay.Run(ctx) }()
	<-entered
	sctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if err := relay.Shutdown(sctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Shutdown past its deadline = %v, want context.DeadlineExceeded", err)
	}
	<-runDone
	got, err := admin(t, h).Get(ctx, m.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Attempts != 0 || got.Status != outbox.StatusPending {
		t.Fatalf("released message %s: attempts %d, status %s; want 0 attempts (a shutdown is no failure), pending", m.ID, got.Attempts, got.Status)
	}
	wait, ok, err := h.Store.NextDue(ctx)
	if err != nil || !ok || wait > 0 {
		t.Fatalf("NextDue after shutdown = %v, %v, %v; want the released message due at once, not after its one-hour lease", wait, ok, err)
	}
}

// testRetention checks that published messages are kept, then deleted, and
// never deleted before their retention: a row found gone less than the
// retention after its publisher was called is a failure, whenever the test
// looks, so a slow machine cannot make it fail, only later.
func testRetention(t *testing.T, h Harness) {
	ctx := context.Background()
	a := admin(t, h)
	msgs := []*outbox.Message{newMessage("kept", 1), newMessage("kept", 2)}
	if err := h.Write(ctx, true, msgs...); err != nil {
		t.Fatal(err)
	}
	rec := NewRecorder()
	var (
		mu     sync.Mutex
		called = map[uuid.UUID]time.Time{} // first publisher call per message
	)
	pub := outbox.PublisherFunc(func(ctx context.Context, batch []outbox.Message) []error {
		mu.Lock()
		for _, m := range batch {
			if _, ok := called[m.ID]; !ok {
				called[m.ID] = time.Now()
			}
		}
		mu.Unlock()
		return rec.Publish(ctx, batch)
	})
	const retention = 3 * time.Second
	StartRelay(t, h.Store, pub, outbox.Config{Retention: retention, PollInterval: 50 * time.Millisecond})
	rec.WaitFor(t, 10*time.Second, "both messages published", func() bool { return rec.Distinct() == 2 })
	deadline := time.Now().Add(retention + 15*time.Second)
	kept, gone := map[uuid.UUID]bool{}, map[uuid.UUID]bool{}
	for len(gone) < len(msgs) {
		for _, m := range msgs {
			if gone[m.ID] {
				continue
			}
			mu.Lock()
			publishing := called[m.ID]
			mu.Unlock()
			got, err := a.Get(ctx, m.ID)
			now := time.Now()
			switch {
			case errors.Is(err, outbox.ErrNotFound):
				if age := now.Sub(publishing); age < retention-clockSlack {
					t.Fatalf("message %s gone %v after it was handed to the publisher; retention is %v", m.ID, age, retention)
				}
				if !kept[m.ID] {
					t.Fatalf("message %s was gone at the first look, %v after publishing, so the test could not see it kept: the machine stalled for the whole retention", m.ID, now.Sub(publishing))
				}
				gone[m.ID] = true
			case err != nil:
				t.Fatalf("Get(%s): %v", m.ID, err)
			case got.Status == outbox.StatusPublished && !got.PublishedAt.IsZero():
				kept[m.ID] = true
			case got.Status != outbox.StatusPending: // pending: its outcome not recorded yet
				t.Fatalf("kept message %s: status %s, published at %v; want published with its time", m.ID, got.Status, got.PublishedAt)
			}
			if !gone[m.ID] && now.After(deadline) {
				t.Fatalf("message %s still kept %v after publishing, retention is %v", m.ID, now.Sub(publishing), retention)
			}
		}
		time.Sleep(50 * time.Millisecond) // polling the table
	}
}

// settlementSpy records every retry the relay asks the store for, and checks
// the stored row of each (due after its delay, counted from the exchange)
// when the delay is long enough that the same exchange's claim cannot have
// taken the row again.
type settlementSpy struct {
	outboxdriver.Store
	admin outboxdriver.Admin

	mu      sync.Mutex
	retries map[uuid.UUID][]observedRetry
	rowErrs []string
}

type observedRetry struct {
	delay time.Duration
}

func (s *settlementSpy) SettleAndClaim(ctx context.Context, settle outboxdriver.Settlement, claim outboxdriver.Claim) ([]outbox.Message, error) {
	before := time.Now()
	batch, err := s.Store.SettleAndClaim(ctx, settle, claim)
	if err != nil {
		return batch, err
	}
	after := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range settle.Retry {
		if r.Unsent {
			continue
		}
		s.retries[r.ID] = append(s.retries[r.ID], observedRetry{delay: r.Delay})
		if r.Delay < 4*clockSlack+after.Sub(before) {
			continue
		}
		row, err := s.admin.Get(ctx, r.ID)
		earliest, latest := before.Add(r.Delay-clockSlack), after.Add(r.Delay+clockSlack)
		if err != nil || row.AvailableAt.Before(earliest) || row.AvailableAt.After(latest) || row.Status != outbox.StatusPending || row.Attempts != len(s.retries[r.ID]) || row.LastError != r.Error {
			s.rowErrs = append(s.rowErrs, fmt.Sprintf("message %s retried after %v with error %q: stored as %s, attempts %d, error %q, next attempt at %v (%v); want pending, %d attempts, that error, next attempt within [%v, %v]",
				r.ID, r.Delay, r.Error, row.Status, row.Attempts, row.LastError, row.AvailableAt, err, len(s.retries[r.ID]), earliest, latest))
		}
	}
	return batch, nil
}

// testKeyOrder runs two relays in key order. The first message of key bad
// is claimed alone and its publishing blocks; only then are the key's later
// messages and those of other keys written. While the head is in flight, no
// claim may take the key's later messages (a store that claims without key
// order takes them at once, being older than the other keys' messages, so
// the test fails every time against it), and the relays must go on with the
// other keys (or the test times out). The head then fails once and is
// retried; every key's messages must come out in the order written.
func testKeyOrder(t *testing.T, h Harness) {
	ctx := context.Background()
	const (
		goodKeys = 4
		perKey   = 10
	)
	head := &outbox.Message{Topic: "orders", Key: "bad", Payload: []byte(`{"n":0}`)}
	if err := h.Write(ctx, true, head); err != nil {
		t.Fatal(err)
	}
	bad := []*outbox.Message{head}
	for i := 1; i < 5; i++ {
		bad = append(bad, &outbox.Message{Topic: "orders", Key: "bad", Payload: fmt.Appendf(nil, `{"n":%d}`, i)})
	}
	var good []*outbox.Message
	for i := range perKey {
		for k := range goodKeys {
			good = append(good, &outbox.Message{Topic: "orders", Key: fmt.Sprintf("good-%d", k), Payload: fmt.Appendf(nil, `{"n":%d}`, i)})
		}
	}
	// The ids now, in the order of writing, for the spy to read while the
	// writes run.
	written := map[string][]uuid.UUID{}
	for _, m := range slices.Concat(bad[1:], good) {
		m.ID = uuid.Must(uuid.NewV7())
	}
	for _, m := range append(slices.Clone(bad), good...) {
		written[m.Key] = append(written[m.Key], m.ID)
	}

	rec := NewRecorder()
	goodPublished := func() bool {
		return !slices.ContainsFunc(good, func(m *outbox.Message) bool { return rec.Count(m.ID) == 0 })
	}
	entered := make(chan struct{})
	var (
		blockOnce sync.Once
		failures  atomic.Int32
	)
	pub := outbox.PublisherFunc(func(ctx context.Context, batch []outbox.Message) []error {
		if batch[0].ID != head.ID || failures.Load() > 0 {
			return rec.Publish(ctx, batch)
		}
		errs := make([]error, len(batch))
		blockOnce.Do(func() {
			// Keep the head in flight until the other keys are done.
			close(entered)
			tick := time.NewTicker(5 * time.Millisecond)
			defer tick.Stop()
			for !goodPublished() && ctx.Err() == nil {
				select {
				case <-ctx.Done():
				case <-tick.C:
				}
			}
		})
		failures.Add(1)
		for i := range errs {
			errs[i] = errors.New("the destination of key bad refuses its first message")
		}
		return errs
	})
	spy := &keyOrderSpy{Store: h.KeyOrdered, written: written, published: rec.Count}
	cfg := outbox.Config{BatchSize: 5, Workers: 2, PollInterval: 20 * time.Millisecond, ActivePollInterval: 5 * time.Millisecond,
		BackoffBase: 10 * time.Millisecond, BackoffMax: 20 * time.Millisecond, MaxAttempts: 1000}
	StartRelay(t, spy, pub, cfg)
	StartRelay(t, spy, pub, cfg)
	select {
	case <-entered:
	case <-time.After(30 * time.Second):
		t.Fatalf("the first message of key bad, %s, was never published", head.ID)
	}
	// The key's later messages come first: the oldest due messages but for
	// the head in flight.
	if err := h.Write(ctx, true, bad[1:]...); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < len(good); i += goodKeys {
		// One transaction per round, so the keys' messages interleave.
		if err := h.Write(ctx, true, good[i:i+goodKeys]...); err != nil {
			t.Fatal(err)
		}
	}
	h.Notify()
	rec.WaitFor(t, 60*time.Second, "the other keys' messages while the first message of key bad is in flight", goodPublished)
	total := len(good) + len(bad)
	rec.WaitFor(t, 60*time.Second, "every message, the failing key's last", func() bool { return rec.Distinct() == total })

	if v := spy.violations(); len(v) > 0 {
		t.Errorf("claims took messages ahead of their key's earlier ones, which were neither published nor before them in the batch:\n%s", strings.Join(v, "\n"))
	}
	keyOf := map[uuid.UUID]string{}
	for key, ids := range written {
		for _, id := range ids {
			keyOf[id] = key
		}
	}
	published := map[string][]uuid.UUID{}
	seen := map[uuid.UUID]bool{}
	for _, id := range rec.Order() {
		if !seen[id] {
			seen[id] = true
			published[keyOf[id]] = append(published[keyOf[id]], id)
		}
	}
	for key, want := range written {
		if got := published[key]; !slices.Equal(got, want) {
			t.Errorf("key %s: published in the order %v; want the order written, %v", key, got, want)
		}
	}
	if failures.Load() == 0 {
		t.Errorf("the first message of key bad never failed: the test did not hold it back")
	}
}

// keyOrderSpy checks every claim against key order: a message claimed must
// have each earlier message of its key published already or ahead of it in
// the same batch.
type keyOrderSpy struct {
	outboxdriver.Store
	written   map[string][]uuid.UUID // each key's messages in insert order
	published func(uuid.UUID) int

	mu  sync.Mutex
	bad []string
}

func (s *keyOrderSpy) SettleAndClaim(ctx context.Context, settle outboxdriver.Settlement, claim outboxdriver.Claim) ([]outbox.Message, error) {
	batch, err := s.Store.SettleAndClaim(ctx, settle, claim)
	inBatch := map[uuid.UUID]bool{}
	for _, m := range batch {
		for _, earlier := range s.written[m.Key] {
			if earlier == m.ID {
				break
			}
			if !inBatch[earlier] && s.published(earlier) == 0 {
				s.mu.Lock()
				s.bad = append(s.bad, fmt.Sprintf("message %s of key %s claimed while %s, written before it, was unpublished and outside the batch", m.ID, m.Key, earlier))
				s.mu.Unlock()
				break
			}
		}
		inBatch[m.ID] = true
	}
	return batch, err
}

func (s *keyOrderSpy) violations() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.bad)
}

// testKeyOrderRuns writes one hot key and a few quiet ones, with a batch size
// that lets runs of the hot key fill batches, and fails messages in the
// middle of the hot key's runs a few times each. Every key must come out in
// the order written; the failing messages count their failures, and the
// messages released behind them none.
func testKeyOrderRuns(t *testing.T, h Harness) {
	testKeyOrderRunsThrough(t, h, func(rec *Recorder) outbox.Publisher { return rec })
}

// testKeyOrderRunsBrokerLike is testKeyOrderRuns through a publisher that
// sends a batch at once and holds nothing back (BrokerLike): the relay must
// hand it a key's run in waves.
func testKeyOrderRunsBrokerLike(t *testing.T, h Harness) {
	testKeyOrderRunsThrough(t, h, func(rec *Recorder) outbox.Publisher { return BrokerLike{rec} })
}

func testKeyOrderRunsThrough(t *testing.T, h Harness, publisher func(*Recorder) outbox.Publisher) {
	ctx := context.Background()
	const (
		hot      = 60
		failures = 3 // per failing message
	)
	var msgs []*outbox.Message
	for i := range hot {
		msgs = append(msgs, &outbox.Message{Topic: "orders", Key: "hot", Payload: fmt.Appendf(nil, `{"n":%d}`, i)})
		if i%10 == 0 {
			msgs = append(msgs, &outbox.Message{Topic: "orders", Key: fmt.Sprintf("quiet-%d", i), Payload: []byte(`{}`)})
		}
	}
	if err := h.Write(ctx, true, msgs...); err != nil {
		t.Fatal(err)
	}
	failing := map[uuid.UUID]int{} // message -> failures left
	for i, m := range msgs {
		if m.Key == "hot" && i%17 == 5 {
			failing[m.ID] = failures
		}
	}
	rec := NewRecorder()
	rec.Fail = func(m outbox.Message) error {
		if failing[m.ID] > 0 {
			failing[m.ID]--
			return errors.New("the broker refuses this one for now")
		}
		return nil
	}
	cfg := outbox.Config{BatchSize: 20, Workers: 2, PollInterval: 20 * time.Millisecond, ActivePollInterval: 5 * time.Millisecond,
		BackoffBase: 10 * time.Millisecond, BackoffMax: 20 * time.Millisecond, MaxAttempts: 1000}
	StartRelay(t, h.KeyOrdered, publisher(rec), cfg)
	StartRelay(t, h.KeyOrdered, publisher(rec), cfg)
	rec.WaitFor(t, 60*time.Second, "every message", func() bool { return rec.Distinct() == len(msgs) })

	written := map[string][]uuid.UUID{}
	keyOf := map[uuid.UUID]string{}
	for _, m := range msgs {
		written[m.Key] = append(written[m.Key], m.ID)
		keyOf[m.ID] = m.Key
	}
	published := map[string][]uuid.UUID{}
	seen := map[uuid.UUID]bool{}
	for _, id := range rec.Order() {
		if !seen[id] {
			seen[id] = true
			published[keyOf[id]] = append(published[keyOf[id]], id)
		}
	}
	for key, want := range written {
		if got := published[key]; !slices.Equal(got, want) {
			t.Errorf("key %s: published in the order %v; want the order written, %v", key, got, want)
		}
	}
	for _, m := range msgs {
		got, _ := rec.Published(m.ID)
		want := 0
		if _, ok := failing[m.ID]; ok {
			want = failures
		}
		if got.Attempts != want {
			t.Errorf("message %s (key %s) was published after %d counted attempts; want %d (only the failing messages count theirs, not those released behind them)", m.ID, m.Key, got.Attempts, want)
		}
	}
}

// isTransactionControl reports whether sql begins or ends a transaction or
// sets its lock wait, as an SQLite store's write transaction does around a
// registry beat.
func isTransactionControl(sql string) bool {
	sql = strings.ToUpper(strings.TrimSpace(sql))
	for _, prefix := range []string{"BEGIN", "COMMIT", "ROLLBACK", "PRAGMA BUSY_TIMEOUT"} {
		if strings.HasPrefix(sql, prefix) {
			return true
		}
	}
	return false
}
