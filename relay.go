package outbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/go-outbox/outbox/internal/backoff"
	"github.com/go-outbox/outbox/outboxdriver"
)

// Relay publishes the messages of one outbox table. Its workers claim batches
// under a lease, hand them to the Publisher and record each outcome; a
// dispatcher wakes them when messages are committed (in-process signal, the
// store's cross-process wake-up) or when a poll finds due messages. Any number
// of relays, in one process or many, may serve the same table: leases keep
// them from publishing the same message at once.
type Relay struct {
	cfg   Config
	log   *slog.Logger
	pub   Publisher
	store outboxdriver.Store

	// gate wakes idle workers: the dispatcher opens it when messages may be
	// due, a worker when it claimed a full batch (there may be more).
	gate gate
	// busy counts workers holding a batch; the dispatcher does not poll
	// while every worker is busy, since a busy worker claims again by itself.
	busy atomic.Int32
	// activity tells the dispatcher that a worker found work, so it polls
	// soon again (adaptive polling).
	activity chan struct{}
	// storeOK is when a store call last succeeded (Unix nanoseconds), for
	// Ready.
	storeOK atomic.Int64
	// running is set while Run runs, for Ready.
	running atomic.Bool
	// lastWork is when the relay last claimed and published, for its
	// registry row.
	lastWork lastWork
	// gates hold back the messages of paused topics and of topics over
	// their rate limit.
	gates *topicGates
	// noAttempts is set once the store said its table keeps no history
	// of failed attempts.
	noAttempts atomic.Bool

	mu       sync.Mutex
	started  bool
	stopping chan struct{}      // closed by Shutdown: claim no more
	abort    context.CancelFunc // cancels in-flight publishing
	done     chan struct{}      // closed when Run has returned
}

// NewRelay returns a relay that publishes store's messages with pub. It
// returns a *ConfigError if cfg is invalid.
func NewRelay(store outboxdriver.Store, pub Publisher, cfg Config) (*Relay, error) {
	if store == nil {
		return nil, &ConfigError{Field: "NewRelay store", Value: "nil", Fix: "pass a store, e.g. outboxpg.New(pool, outboxpg.Options{})"}
	}
	if pub == nil {
		return nil, &ConfigError{Field: "NewRelay publisher", Value: "nil", Fix: "pass a Publisher, e.g. &outbox.Handlers{} or a broker publisher"}
	}
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	return &Relay{
		cfg:      cfg,
		log:      cfg.Logger.With(slog.String("table", store.Name())),
		pub:      pub,
		store:    store,
		gate:     gate{ch: make(chan struct{})},
		gates:    newTopicGates(store, cfg),
		activity: make(chan struct{}, 1),
		stopping: make(chan struct{}),
		done:     make(chan struct{}),
	}, nil
}

// Run publishes until ctx is cancelled or Shutdown is called, and returns nil
// then, after every goroutine it started has ended. If the store reports that
// its table is missing or at an older migration (outboxdriver.SchemaChecker),
// Run returns an error wrapping ErrNotMigrated at once. Cancelling ctx stops at
// once: publishing in flight is cancelled, the other leases are released, so
// another relay can take them without waiting for the lease to expire, and
// the outcomes the publisher already confirmed are recorded, retried while the
// database fails for at most the rest of their lease (after that another relay
// may have claimed them). Run may be called once.
func (r *Relay) Run(ctx context.Context) error {
	r.mu.Lock()
	if r.started {
		r.mu.Unlock()
		return errors.New("outbox: Relay.Run called twice; create a new Relay")
	}
	r.started = true
	publishCtx, abort := context.WithCancel(context.WithoutCancel(ctx))
	r.abort = abort
	r.mu.Unlock()
	defer close(r.done)
	defer abort()

	// A cancelled ctx aborts publishing; Shutdown only stops claiming.
	stop := context.AfterFunc(ctx, func() {
		r.beginStop()
		abort()
	})
	defer stop()

	if err := r.checkSchema(ctx); err != nil {
		return err
	}
	r.running.Store(true)
	defer r.running.Store(false)

	loopCtx, stopLoops := context.WithCancel(ctx)
	defer stopLoops()
	go func() {
		select {
		case <-r.stopping:
			stopLoops()
		case <-loopCtx.Done():
		}
	}()

	var background sync.WaitGroup
	background.Go(func() { r.dispatch(loopCtx) })
	if rec, ok := r.store.(outboxdriver.AttemptRecorder); ok {
		background.Go(func() { r.pruneAttempts(loopCtx, rec) })
	}
	if reg, ok := r.store.(outboxdriver.RelayRegistry); ok {
		id, registered := uuid.New(), new(atomic.Bool)
		background.Go(func() { r.register(loopCtx, reg, id, registered) })
		// Deferred so that it runs after background.Wait: no beat can
		// write the row again after it is removed.
		defer func() {
			if registered.Load() {
				r.unregister(reg, id)
			}
		}()
	}
	if r.cfg.Retention > 0 {
		background.Go(func() { r.cleanPublished(loopCtx) })
	}

	var workers sync.WaitGroup
	for i := range r.cfg.Workers {
		workers.Go(func() { r.work(publishCtx, i) })
	}
	r.log.Info("outbox relay started", slog.Int("workers", r.cfg.Workers), slog.Int("batch_size", r.cfg.BatchSize))
	workers.Wait()
	stopLoops()
	background.Wait()
	r.log.Info("outbox relay stopped")
	return nil
}

// Shutdown stops claiming new batches and waits for the batches in flight to
// be published and recorded. If ctx ends first, publishing is cancelled and
// Shutdown returns ctx's error at once, even while the database does not
// answer; Run goes on releasing the unfinished messages and recording the
// outcomes already known, for at most the rest of their lease, and returns
// then: wait for Run to return before the process exits (or closes the
// store), or those outcomes are lost and the messages go out again after
// their lease. Calling Shutdown before Run, or twice, is safe.
func (r *Relay) Shutdown(ctx context.Context) error {
	r.beginStop()
	r.mu.Lock()
	started := r.started
	r.mu.Unlock()
	if !started {
		return nil
	}
	select {
	case <-r.done:
		return nil
	case <-ctx.Done():
		r.mu.Lock()
		r.abort()
		r.mu.Unlock()
		return ctx.Err()
	}
}

// checkSchema makes sure the table is ready before the relay starts, if the
// store can tell: a missing or outdated table is an error Run returns, with
// the fix, instead of a failed claim logged every poll for as long as the
// relay runs; so is a database that refuses the store's role. While the
// store cannot tell (the database is down, say), it asks again with a
// backoff until the relay stops, which is no error.
func (r *Relay) checkSchema(ctx context.Context) error {
	checker, ok := r.store.(outboxdriver.SchemaChecker)
	if !ok {
		return nil
	}
	retry := backoff.New(errorPauseMin, errorPauseMax)
	for {
		callCtx, cancel := context.WithTimeout(ctx, storeCallTimeout)
		err := checker.CheckSchema(callCtx)
		cancel()
		switch {
		case err == nil:
			return nil
		case errors.Is(err, ErrNotMigrated), errors.Is(err, ErrRefused):
			r.log.Error("outbox relay: the outbox table is not usable; not starting", slog.Any("error", err))
			return fmt.Errorf("outbox: relay not started: %w", err)
		}
		if ctx.Err() == nil {
			r.log.Warn("outbox relay: cannot check the outbox table yet; retrying (check that the database is up and reachable)", slog.Any("error", err))
		}
		if !retry.Sleep(ctx, r.stopping) {
			return nil
		}
	}
}

func (r *Relay) beginStop() {
	r.mu.Lock()
	defer r.mu.Unlock()
	select {
	case <-r.stopping:
	default:
		close(r.stopping)
	}
}

func (r *Relay) isStopping() bool {
	select {
	case <-r.stopping:
		return true
	default:
		return false
	}
}

// work is one worker's loop: record the previous batch's outcomes and claim the
// next batch in one Exchange, publish, repeat; wait at the gate when there is
// nothing to claim.
func (r *Relay) work(ctx context.Context, worker int) {
	log := r.log.With(slog.Int("worker", worker))
	var (
		settle outboxdriver.Settlement
		// notes are what settle changes in the history of attempts:
		// its failures, written before it is sent (so that no other
		// relay can claim, publish and forget a message before its
		// failure is written), and the history of the messages it
		// publishes, forgotten once it is taken.
		notes attemptNotes
		// settleBy is when the lease of settle's messages ends: after it,
		// another relay may have claimed and published them again, so
		// recording settle is no longer worth a wait.
		settleBy time.Time
	)
	retry := backoff.New(errorPauseMin, errorPauseMax)  // the store failed
	outage := backoff.New(errorPauseMin, errorPauseMax) // the destination was unavailable
	for {
		// Take the gate's channel before claiming: an opening that happens
		// while the claim runs is then not missed.
		wake := r.gate.wait()
		stopping := r.isStopping()
		claim := outboxdriver.Claim{Limit: r.cfg.BatchSize, Lease: r.cfg.LeaseDuration, Token: uuid.New()}
		if stopping {
			claim.Limit = 0
		}
		if stopping && settle.Empty() {
			return
		}
		r.recordFailures(ctx, &notes, settleBy)
		// The lease starts when the database runs the claim, which is after
		// this moment: deadlines counted from here end before the lease.
		claimed := time.Now()
		storeCtx, cancel := r.storeCtx(ctx)
		batch, err := r.store.SettleAndClaim(storeCtx, settle, claim)
		cancel()
		r.exchanged(ctx, claimed, settle, len(batch), err)
		if err != nil {
			// The settlement is kept and sent again: outcomes apply only to
			// messages still leased to its token, so a repeat is harmless.
			pending := settle.Len()
			log.Warn("outbox relay: exchange with the store failed; retrying (check that the database is up and reachable)", slog.Any("error", err), slog.Int("pending_outcomes", pending))
			if stopping {
				if errors.Is(err, ErrNotMigrated) {
					// The table is gone (dropped, or renamed away): there
					// is nothing to record the outcomes in. Were it to come
					// back, its messages would come due again when their
					// lease ends: published ones would go out again.
					log.Warn("outbox relay: stopping without recording outcomes: the table is missing; if it comes back, the published among them will be published again", slog.Int("outcomes", pending), slog.Any("error", err))
					return
				}
				// Publishing is over, even if Run's ctx was cancelled: keep
				// trying to record the outcomes while their lease lasts, or
				// confirmed messages would be published again.
				if !r.sleepUntil(ctx, retry, settleBy) {
					log.Error("outbox relay: gave up recording outcomes when their lease ended; the messages among them that were published will be published again", slog.Int("outcomes", pending), slog.Any("error", err))
					return
				}
				continue
			}
			retry.Sleep(ctx, r.stopping)
			continue
		}
		retry.Reset()
		settle = outboxdriver.Settlement{}
		r.forgetPublished(ctx, notes)
		r.afterPauseSettled(ctx, notes.paused)
		notes = attemptNotes{}
		if stopping {
			return
		}
		if len(batch) == 0 {
			select {
			case <-wake:
			case <-r.stopping:
			}
			continue
		}
		r.lastWork.claimed.Store(time.Now().UnixNano())
		if len(batch) == claim.Limit {
			r.gate.open() // there may be more: let idle workers help
		}
		r.busy.Add(1)
		select {
		case r.activity <- struct{}{}:
		default:
		}
		var unavailable bool
		settleBy = claimed.Add(r.cfg.LeaseDuration)
		settle, notes, unavailable = r.publish(ctx, claim.Token, batch, claimed, outage.Next())
		r.busy.Add(-1)
		if len(settle.Published) > 0 {
			r.lastWork.published.Store(time.Now().UnixNano())
		}
		if unavailable {
			// The destination is down: wait before the next claim, which
			// would meet it again. Record this batch's outcomes first: the
			// pause may outlast the lease, after which another worker could
			// claim and send again the messages published in it.
			log.Warn("outbox relay: destination unavailable; messages postponed without counting an attempt", slog.Duration("pause", outage.Next()))
			r.recordFailures(ctx, &notes, settleBy)
			if r.record(ctx, log, settle) {
				settle = outboxdriver.Settlement{}
				r.forgetPublished(ctx, notes)
				r.afterPauseSettled(ctx, notes.paused)
				notes = attemptNotes{}
			}
			outage.Sleep(ctx, r.stopping)
		} else {
			outage.Reset()
		}
	}
}

// record stores a settlement on its own, without claiming, and reports
// whether it succeeded; on failure the caller keeps the settlement for its
// next exchange.
func (r *Relay) record(ctx context.Context, log *slog.Logger, settle outboxdriver.Settlement) bool {
	storeCtx, cancel := r.storeCtx(ctx)
	defer cancel()
	start := time.Now()
	_, err := r.store.SettleAndClaim(storeCtx, settle, outboxdriver.Claim{Token: uuid.New(), Lease: r.cfg.LeaseDuration})
	r.exchanged(ctx, start, settle, 0, err)
	if err != nil {
		log.Warn("outbox relay: recording outcomes failed; they are sent again with the next claim (check that the database is up and reachable)",
			slog.Any("error", err), slog.Int("outcomes", settle.Len()))
		return false
	}
	return true
}

// exchanged tells the observer of an exchange that started at start, and
// notes a success for Ready.
func (r *Relay) exchanged(ctx context.Context, start time.Time, settle outboxdriver.Settlement, claimed int, err error) {
	recorded := 0
	if err == nil {
		r.storeOK.Store(time.Now().UnixNano())
		recorded = settle.Len() // a failed exchange recorded nothing
		r.lastWork.minutes.settled(settle)
	}
	r.cfg.Observer.Exchanged(ctx, Exchange{
		Table: r.store.Name(), Duration: time.Since(start), Err: err, Claimed: claimed,
		Recorded: recorded,
	})
}

// Ready reports whether the relay works: nil while Run runs and the store
// answered (a claim, or an idle poll) within the last ReadyWindow (three
// poll intervals, or the lease if longer, since a worker publishing a batch
// calls the store only when it is done). Otherwise an error says what is
// wrong. Serve it as a readiness probe (`outbox relay --metrics-addr` does,
// at /readyz).
func (r *Relay) Ready() error {
	if !r.running.Load() {
		return errors.New("outbox: relay not running")
	}
	last := r.storeOK.Load()
	if last == 0 {
		return errors.New("outbox: relay has not reached the store yet")
	}
	if ago := time.Since(time.Unix(0, last)); ago > r.ReadyWindow() {
		return fmt.Errorf("outbox: relay's last successful store call was %v ago (more than %v): is the database reachable?", ago.Round(time.Millisecond), r.ReadyWindow())
	}
	return nil
}

// ReadyWindow is how recent the relay's last successful store call must be
// for Ready: max(3 × PollInterval, LeaseDuration).
func (r *Relay) ReadyWindow() time.Duration {
	return max(3*r.cfg.PollInterval, r.cfg.LeaseDuration)
}

// sleepUntil waits for the retry's next pause, not past until, and reports
// whether until is still ahead afterwards. Aborting the relay does not cut
// it short: it paces the recording of outcomes, which an abort must not drop.
func (r *Relay) sleepUntil(ctx context.Context, retry *backoff.Backoff, until time.Time) bool {
	ctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), until)
	defer cancel()
	return retry.Sleep(ctx, nil)
}

// storeCtx returns the context for a store call made by a worker. It is not
// cancelled with ctx: aborting a relay cancels publishing, never the recording
// of outcomes already known or the release of leases, which would turn
// confirmed messages into duplicates. The timeout bounds a call to a database
// that stopped answering.
func (r *Relay) storeCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), storeCallTimeout)
}

// storeCallTimeout bounds one store call, so a connection that stalls (rather
// than breaks) cannot stall the relay.
const storeCallTimeout = 15 * time.Second

// backOffPoll returns the wait after an idle poll that followed a wait of
// delay: twice as long, up to pollInterval.
func backOffPoll(delay, pollInterval time.Duration) time.Duration {
	if delay >= pollInterval-delay {
		return pollInterval // and delay*2 might overflow
	}
	return delay * 2
}

// lookAgainIn returns when the dispatcher looks again after the store said
// the next message is due in wait (> 0).
func lookAgainIn(wait, pollInterval time.Duration) time.Duration {
	if wait >= pollInterval-time.Millisecond {
		// Also keeps a message scheduled centuries ahead (the store
		// saturates its wait) from overflowing into a busy loop.
		return pollInterval
	}
	// A retry or scheduled message is due before the next poll: look
	// just then.
	return wait + time.Millisecond
}

// retryDelay draws the delay after the failed attempt number attempt (1 for
// the first failure): uniform in [0, min(BackoffMax, BackoffBase*2^(attempt-1))].
func (r *Relay) retryDelay(attempt int) time.Duration {
	return fullJitter(r.cfg.BackoffBase, r.cfg.BackoffMax, attempt)
}

// BackoffCap returns the upper bound of the delay before the retry that follows
// the failed attempt number attempt (1-based), for the given base and max:
// min(max, base*2^(attempt-1)). The relay draws each delay uniformly between
// zero and this cap.
func BackoffCap(base, max time.Duration, attempt int) time.Duration {
	return backoff.Cap(base, max, attempt)
}

func fullJitter(base, max time.Duration, attempt int) time.Duration {
	c := BackoffCap(base, max, attempt)
	if c <= 0 {
		return 0
	}
	// In uint64, c+1 cannot overflow when max is the largest Duration
	// (rand.N panics on the negative int64 it would give).
	return time.Duration(rand.Uint64N(uint64(c) + 1))
}

// dispatch decides when workers should look for work: at once when a writer in
// this process or (through the store) in another process signals a commit;
// otherwise after a poll finds due messages. It polls soon after activity and
// backs off to PollInterval when idle, and not at all while every worker is
// busy.
func (r *Relay) dispatch(ctx context.Context) {
	inProcess, unsubscribe := wakeTopicFor(r.store.Name()).subscribe()
	defer unsubscribe()

	listened := make(chan struct{}, 1)
	var listener sync.WaitGroup
	defer listener.Wait() // Run returns after every goroutine it started
	if l, ok := r.store.(outboxdriver.WriteListener); ok && !r.cfg.DisableListen {
		listener.Go(func() {
			err := l.ListenForWrites(ctx, func() {
				select {
				case listened <- struct{}{}:
				default:
				}
			})
			if err != nil && ctx.Err() == nil {
				r.log.Warn("outbox relay: cross-process wake-up unavailable; polling", slog.Any("error", err))
			}
		})
	}

	// The workers look once at start; the first poll comes a full interval
	// later unless they find work.
	delay := r.cfg.PollInterval
	timer := time.NewTimer(delay)
	defer timer.Stop()
	reset := func(d time.Duration) {
		timer.Stop()
		select {
		case <-timer.C:
		default:
		}
		timer.Reset(d)
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-inProcess:
			r.gate.open()
		case <-listened:
			r.gate.open()
		case <-r.activity:
			// Work was found: poll soon again, in case writers in other
			// processes commit more without a wake-up.
			delay = r.cfg.ActivePollInterval
			reset(delay)
		case <-timer.C:
			// While every worker is busy, polling could only find work
			// they claim anyway when they finish; while one is idle, it
			// must find due messages that no wake-up announced (retries
			// coming due, writers that do not signal).
			if int(r.busy.Load()) >= r.cfg.Workers {
				timer.Reset(delay)
				continue
			}
			next := r.probe(ctx)
			delay = backOffPoll(delay, r.cfg.PollInterval)
			timer.Reset(min(delay, next))
		}
	}
}

// probe asks the store when the next message is due, opens the gate if one is
// due now, and returns how long to wait at most before the next look.
func (r *Relay) probe(ctx context.Context) time.Duration {
	ctx, cancel := context.WithTimeout(ctx, storeCallTimeout) // a stalled connection must not stall the relay
	defer cancel()
	wait, ok, err := r.store.NextDue(ctx)
	if err == nil {
		r.storeOK.Store(time.Now().UnixNano())
	}
	switch {
	case err != nil:
		if ctx.Err() == nil {
			r.log.Warn("outbox relay: poll failed", slog.Any("error", err))
		}
		return r.cfg.PollInterval
	case !ok:
		return r.cfg.PollInterval
	case wait <= 0:
		r.gate.open()
		return r.cfg.PollInterval
	default:
		return lookAgainIn(wait, r.cfg.PollInterval)
	}
}

// cleanPublished deletes published messages older than Retention, in bounded
// batches, while the relay runs. The store lets one relay at a time do it.
func (r *Relay) cleanPublished(ctx context.Context) {
	interval := min(max(r.cfg.Retention/10, time.Second), time.Minute)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		for {
			callCtx, cancel := context.WithTimeout(ctx, storeCallTimeout)
			n, err := r.store.PurgePublished(callCtx, r.cfg.Retention, r.cfg.RetentionBatch)
			cancel()
			if err != nil {
				if ctx.Err() == nil {
					r.log.Warn("outbox relay: cleanup of published messages failed", slog.Any("error", err))
				}
				break
			}
			if n < r.cfg.RetentionBatch {
				break
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// gate is a broadcast signal that can fire many times: wait returns a channel
// closed by the next open.
type gate struct {
	mu sync.Mutex
	ch chan struct{}
}

func (g *gate) wait() <-chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.ch
}

func (g *gate) open() {
	g.mu.Lock()
	defer g.mu.Unlock()
	close(g.ch)
	g.ch = make(chan struct{})
}

// Bounds of a worker's pause after a store error (database down), and of
// its pause while the destination is unavailable (see Unavailable).
const (
	errorPauseMin = 100 * time.Millisecond
	errorPauseMax = 5 * time.Second
)
