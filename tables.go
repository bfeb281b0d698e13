package outbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/go-outbox/outbox/outboxdriver"
)

// RescanIntervalDefault is how often a TablesRelay asks its source for its
// tables, unless TablesConfig.RescanInterval says otherwise.
const RescanIntervalDefault = time.Minute

// TablesConfig configures a TablesRelay.
type TablesConfig struct {
	// Relay configures the relay of each table. Its Workers is the number
	// of workers per table, 1 when zero (not WorkersDefault: with many
	// tables, their relays' workers already publish side by side). When the
	// source is a TablesListener, the tables' relays do not listen: the
	// source's one listener wakes them, unless DisableListen is set, which
	// then means no listening connection at all (the relays poll).
	Relay Config
	// RescanInterval is how often the source is asked for its tables;
	// RescanIntervalDefault when zero. A table that appears is served from
	// the next rescan; one that disappears has its relay stopped then. A
	// call that fails is made again after 1 s, doubling up to 30 s (or
	// RescanInterval if shorter).
	RescanInterval time.Duration
	// OnServe, if set, is called with each table's store and relay before
	// the relay runs, to watch what a process serving one table watches:
	// its gauges, say (the CLI's --metrics-addr does). The
	// function it returns, if not nil, is called once that relay's Run has
	// returned (its table gone, the relay failed to start, or the
	// TablesRelay stopping), before a relay of the same table can start
	// again, so it can undo what OnServe did. Calls for different tables
	// may run at the same time.
	OnServe func(store outboxdriver.Store, relay *Relay) (stopped func())
}

// TablesRelay publishes the messages of many outbox tables, for services
// that keep a schema or a database per tenant: it asks a TableSource for
// the tables, runs a Relay for each on the shared publisher, and asks
// again every RescanInterval, starting relays for tables that appeared and
// stopping those of tables that disappeared. A table's relay that cannot
// start (its table is not migrated, say) is logged and tried again at the
// next rescan; the other tables are served meanwhile.
//
// Each table's relay is a Relay as a process serving that table alone
// would run, with its own registry row, retention and pause checks; the
// stores of one database share its pool, so the connections are the
// pool's, plus one listening connection when the source is a
// TablesListener. A table's backlog or failing destination holds only its
// own relay's workers.
type TablesRelay struct {
	src    TableSource
	pub    Publisher
	cfg    TablesConfig
	relay  Config // cfg.Relay with the defaults of a table's relay
	log    *slog.Logger
	listen bool // the source's listener wakes the relays

	mu       sync.Mutex
	started  bool
	relays   map[string]*tableRelay // by store Name: the relays running
	retiring map[*tableRelay]bool   // relays of tables gone, stopping
	stopping chan struct{}          // closed by Shutdown
	done     chan struct{}          // closed when Run has returned
	// finished is signalled when a table's relay returns by itself, so
	// that the loop drops it at once (and starts it again at the next
	// rescan).
	finished chan struct{}
	// warnedNames are the names listed twice, logged once each;
	// warnedEmpty is set while the source lists no table, logged once
	// (rescan only).
	warnedNames map[string]bool
	warnedEmpty bool
	// listed is set while the latest call of the source succeeded;
	// listErr is the error of the latest that failed (Ready).
	listed  bool
	listErr error
}

// tableRelay is a running table's relay.
type tableRelay struct {
	name  string // its store's Name
	relay *Relay
	done  chan struct{} // closed when its Run returned
	err   error         // what its Run returned, once done
}

// NewTablesRelay returns a relay of the tables src lists, publishing with
// pub. It returns a *ConfigError if cfg is invalid.
func NewTablesRelay(src TableSource, pub Publisher, cfg TablesConfig) (*TablesRelay, error) {
	if src == nil {
		return nil, &ConfigError{Field: "NewTablesRelay source", Value: "nil", Fix: "pass a TableSource, e.g. outbox.StaticTables{store1, store2} or outboxpg.NewTables(pool, \"tenant_*\", outboxpg.Options{})"}
	}
	if pub == nil {
		return nil, &ConfigError{Field: "NewTablesRelay publisher", Value: "nil", Fix: "pass a Publisher, e.g. &outbox.Handlers{} or a broker publisher"}
	}
	if cfg.RescanInterval < 0 {
		return nil, &ConfigError{Field: "TablesConfig.RescanInterval", Value: cfg.RescanInterval,
			Fix: "use a positive duration, or 0 for the default " + RescanIntervalDefault.String()}
	}
	if cfg.RescanInterval == 0 {
		cfg.RescanInterval = RescanIntervalDefault
	}
	relay := cfg.Relay
	if relay.Workers == 0 {
		relay.Workers = 1
	}
	// A TablesListener wakes the relays, unless DisableListen asks for no
	// listening connection at all (behind a transaction-mode pooler).
	_, isListener := src.(TablesListener)
	listen := isListener && !relay.DisableListen
	if isListener {
		relay.DisableListen = true
	}
	checked, err := relay.withDefaults()
	if err != nil {
		return nil, err
	}
	return &TablesRelay{
		src: src, pub: pub, cfg: cfg, relay: relay, log: checked.Logger, listen: listen,
		relays:      map[string]*tableRelay{},
		retiring:    map[*tableRelay]bool{},
		stopping:    make(chan struct{}),
		done:        make(chan struct{}),
		finished:    make(chan struct{}, 1),
		warnedNames: map[string]bool{},
	}, nil
}

// Run serves the source's tables until ctx is cancelled or Shutdown is
// called, and returns nil then, after every table's relay has returned.
// Cancelling ctx stops every relay as cancelling Relay.Run's ctx does;
// Shutdown lets them finish their batches. Run may be called once.
func (t *TablesRelay) Run(ctx context.Context) error {
	t.mu.Lock()
	if t.started {
		t.mu.Unlock()
		return errors.New("outbox: TablesRelay.Run called twice; create a new TablesRelay")
	}
	t.started = true
	t.mu.Unlock()
	defer close(t.done)

	var background sync.WaitGroup
	listenCtx, stopListening := context.WithCancel(ctx)
	if l, ok := t.src.(TablesListener); ok && t.listen {
		background.Go(func() { t.listenForWrites(listenCtx, l) })
	}
	t.log.Info("outbox tables relay started", slog.Duration("rescan_interval", t.cfg.RescanInterval), slog.Int("workers_per_table", t.relay.Workers))

	var stopped sync.WaitGroup // relays of tables gone, stopping
	timer := time.NewTimer(0)
	defer timer.Stop()
	var retry time.Duration // after a failed rescan: the wait before the next
	for running := true; running; {
		select {
		case <-ctx.Done():
			running = false
		case <-t.stopping:
			running = false
		case <-t.finished:
			t.dropFinished()
		case <-timer.C:
			t.dropFinished()
			next := t.cfg.RescanInterval
			if err := t.rescan(ctx, &stopped); err != nil {
				// Asked again sooner than a rescan: a relay started while
				// the database is down serves nothing until it answers.
				retry = nextRescanRetry(retry, t.cfg.RescanInterval)
				next = retry
				if ctx.Err() == nil {
					t.log.Warn("outbox tables relay: cannot list the tables; serving the ones found before, asking again soon", slog.Any("error", err), slog.Duration("retry_in", next))
				}
			} else {
				retry = 0
			}
			timer.Reset(next)
		}
	}

	// Stop every relay: Shutdown lets each finish its batches; a
	// cancelled ctx has aborted them already.
	t.mu.Lock()
	remaining := t.relays
	t.relays = map[string]*tableRelay{}
	t.mu.Unlock()
	for _, r := range remaining {
		stopped.Go(func() { t.stop(r) })
	}
	stopped.Wait()
	stopListening()
	background.Wait()
	t.log.Info("outbox tables relay stopped")
	return nil
}

// Shutdown stops every table's relay as Relay.Shutdown does: no new
// batches, the batches in flight published and recorded. If ctx ends first,
// publishing is cancelled and Shutdown returns ctx's error; Run returns
// once every relay has recorded what it could. Calling Shutdown before Run,
// or twice, is safe.
func (t *TablesRelay) Shutdown(ctx context.Context) error {
	t.mu.Lock()
	select {
	case <-t.stopping:
	default:
		close(t.stopping)
	}
	started := t.started
	running := make([]*tableRelay, 0, len(t.relays)+len(t.retiring))
	for _, r := range t.relays {
		running = append(running, r)
	}
	for r := range t.retiring {
		running = append(running, r) // ctx bounds their stop too
	}
	t.mu.Unlock()
	if !started {
		return nil
	}
	// A relay's Shutdown fails only when ctx ends, which the select below
	// reports.
	var wg sync.WaitGroup
	for _, r := range running {
		wg.Go(func() { _ = r.relay.Shutdown(ctx) })
	}
	wg.Wait()
	select {
	case <-t.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Ready returns nil while Run runs and the latest call of the source
// succeeded, for a readiness probe of a process serving many tables: it
// reaches the database that lists them. Each table's relay has its own
// Relay.Ready. Before the first call, after a failed one and once Run
// returned, it returns why not.
func (t *TablesRelay) Ready() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	select {
	case <-t.done:
		return errors.New("outbox: the tables relay is not running")
	default:
	}
	switch {
	case !t.started:
		return errors.New("outbox: the tables relay has not started")
	case t.listErr != nil:
		return fmt.Errorf("outbox: the tables relay cannot list its tables: %w", t.listErr)
	case !t.listed:
		return errors.New("outbox: the tables relay has not listed its tables yet")
	}
	return nil
}

// Tables returns the names of the tables served now, in name order.
func (t *TablesRelay) Tables() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	names := make([]string, 0, len(t.relays))
	for name := range t.relays {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

// Bounds of the wait after a rescan that failed: the first, doubled at
// each failure in a row up to the last (or the rescan interval if
// shorter), so that the tables are found soon after a long outage too.
const (
	rescanRetryFirst = time.Second
	rescanRetryMax   = 30 * time.Second
)

// nextRescanRetry is the wait after a failed rescan, given the wait after
// the one before (0 if it succeeded) and the rescan interval.
func nextRescanRetry(last, interval time.Duration) time.Duration {
	return min(max(2*last, rescanRetryFirst), rescanRetryMax, interval)
}

// rescan asks the source for its tables, starts a relay for each new one
// and stops those of the tables gone (tracked in stopped). A source that
// fails keeps the relays as they are, and rescan returns its error.
func (t *TablesRelay) rescan(ctx context.Context, stopped *sync.WaitGroup) error {
	callCtx, cancel := context.WithTimeout(ctx, storeCallTimeout)
	stores, err := t.src.Tables(callCtx)
	cancel()
	if err != nil {
		t.mu.Lock()
		t.listed, t.listErr = false, err
		t.mu.Unlock()
		return err
	}
	listed := make(map[string]outboxdriver.Store, len(stores))
	for _, s := range stores {
		if s == nil {
			continue
		}
		name := s.Name()
		if _, ok := listed[name]; ok {
			// The name is the table's identity here and in the relay
			// registry: a second table under it would never be served.
			if !t.warnedNames[name] {
				t.warnedNames[name] = true
				t.log.Error("outbox tables relay: two tables of the source have the same name; serving the first only: give each table a name of its own (outboxsqlite and outboxmysql stores are named by their table, not their file or database: use a table name per tenant)",
					slog.String("table", name))
			}
			continue
		}
		listed[name] = s
	}
	if len(listed) == 0 && !t.warnedEmpty {
		t.log.Warn("outbox tables relay: the source lists no table; looking again at each rescan (check the pattern or the list of tables)", slog.Duration("rescan_interval", t.cfg.RescanInterval))
	}
	t.warnedEmpty = len(listed) == 0
	t.mu.Lock()
	defer t.mu.Unlock()
	t.listed, t.listErr = true, nil // before the relays start: Ready is nil once they may publish
	select {
	case <-t.stopping:
		return nil // Shutdown took the relays it saw; start no other
	default:
	}
	for name, r := range t.relays {
		if _, ok := listed[name]; !ok {
			delete(t.relays, name)
			t.retiring[r] = true
			t.log.Info("outbox tables relay: table gone; stopping its relay", slog.String("table", name))
			stopped.Go(func() {
				t.stop(r)
				t.mu.Lock()
				delete(t.retiring, r)
				t.mu.Unlock()
			})
		}
	}
	for name, store := range listed {
		if _, ok := t.relays[name]; ok || t.isRetiring(name) {
			// A table back before its last relay stopped is served from
			// the next rescan: one relay of a table at a time, and OnServe's
			// stopped called before OnServe again.
			continue
		}
		relay, err := NewRelay(store, t.pub, t.relay)
		if err != nil {
			// The configuration was checked in NewTablesRelay.
			t.log.Error("outbox tables relay: cannot create the relay of a table", slog.String("table", name), slog.Any("error", err))
			continue
		}
		r := &tableRelay{name: name, relay: relay, done: make(chan struct{})}
		t.relays[name] = r
		go func() {
			var stopped func()
			if t.cfg.OnServe != nil {
				stopped = t.cfg.OnServe(store, relay)
			}
			r.err = relay.Run(ctx)
			if stopped != nil {
				stopped()
			}
			close(r.done)
			select {
			case t.finished <- struct{}{}:
			default:
			}
		}()
		// Its workers look at the table once at start, so the writes
		// made before the relay ran are not left waiting for a poll.
		t.log.Info("outbox tables relay: serving a table", slog.String("table", name))
	}
	return nil
}

// isRetiring reports whether a relay of the table name is still stopping
// after the table was gone. t.mu is held.
func (t *TablesRelay) isRetiring(name string) bool {
	for r := range t.retiring {
		if r.name == name {
			return true
		}
	}
	return false
}

// dropFinished forgets the relays that returned by themselves (a table not
// migrated, say), so that the next rescan starts them again.
func (t *TablesRelay) dropFinished() {
	t.mu.Lock()
	defer t.mu.Unlock()
	for name, r := range t.relays {
		select {
		case <-r.done:
		default:
			continue
		}
		delete(t.relays, name)
		if r.err != nil {
			t.log.Error("outbox tables relay: a table's relay stopped; trying again at the next rescan", slog.String("table", name), slog.Any("error", r.err), slog.Duration("rescan_in", t.cfg.RescanInterval))
		}
	}
}

// stop shuts r down, letting its batches finish, and waits for its Run.
func (t *TablesRelay) stop(r *tableRelay) {
	_ = r.relay.Shutdown(context.Background())
	<-r.done
}

// listenForWrites wakes a table's relay for each write the source hears of.
func (t *TablesRelay) listenForWrites(ctx context.Context, l TablesListener) {
	err := l.ListenForWrites(ctx, func(name string) { wakeTopicFor(name).notify() })
	if err != nil && ctx.Err() == nil {
		t.log.Warn("outbox tables relay: cross-process wake-up unavailable; the relays poll", slog.Any("error", fmt.Errorf("listen for writes: %w", err)))
	}
}
