package consume

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/go-outbox/outbox"
)

// MaxHeldPerWorker is Config.MaxHeld per worker when MaxHeld is zero: above
// the adapters' default windows of unacknowledged deliveries (16 per worker
// on RabbitMQ, 32 on NATS).
const MaxHeldPerWorker = 64

// Lanes hands deliveries to fn: one queue per key, so that a key's messages
// are tried one at a time in the order they were submitted, and
// Config.Concurrency workers that try the head of any key whose head is
// ready.
//
// A failing message holds back its own key and nothing else: between two
// attempts its key waits on a timer, not in a worker, and the messages that
// arrive behind it queue in its key, not in a queue other keys share.
// Submit waits only when the lanes hold Config.MaxHeld deliveries
// altogether. That bound is what keeps memory bounded, rather than a bound
// per key, because a delivery a full key turned away could only be handed
// back to the broker: JetStream counts that as a delivery towards
// MaxDeliver, and both brokers may deliver it again behind later messages of
// its key, breaking the key's order. Set to the broker's window, the bound
// never makes Submit wait; the limit is the window itself: a key that
// receives more than the window while it fails fills it, and the broker
// then sends nothing else until the key moves.
type Lanes struct {
	cfg     Config
	ctx     context.Context
	fn      func(context.Context, outbox.Message) error
	ready   chan *keyQueue // keys whose head may be tried now; never full, as no more keys than deliveries are held
	slots   chan struct{}  // one per held delivery: Submit waits for a free one
	workers sync.WaitGroup

	mu      sync.Mutex
	closing bool                 // Close called: ready closes once nothing is held
	held    int                  // deliveries queued or being handled
	keys    map[string]*keyQueue // the keys holding deliveries
}

// keyQueue is a key's held deliveries, the head first. A key is in ready,
// with a worker, or waiting for its head's next attempt exactly when its
// queue is not empty; only that holder touches the head.
type keyQueue struct {
	jobs []*handling // guarded by Lanes.mu
	key  string
}

// Start starts the lanes; they handle deliveries with fn until ctx ends
// (then unfinished ones stay unacknowledged: the broker delivers them
// again) or Close.
func Start(ctx context.Context, cfg Config, fn func(context.Context, outbox.Message) error) *Lanes {
	cfg.Concurrency = max(cfg.Concurrency, 1)
	if cfg.MaxHeld <= 0 {
		cfg.MaxHeld = MaxHeldPerWorker * cfg.Concurrency
	}
	l := &Lanes{cfg: cfg, ctx: ctx, fn: fn, keys: map[string]*keyQueue{},
		ready: make(chan *keyQueue, cfg.MaxHeld), slots: make(chan struct{}, cfg.MaxHeld)}
	for range cfg.Concurrency {
		l.workers.Go(l.work)
	}
	return l
}

// Submit queues d behind the deliveries of its key (of its id when it has
// none). It waits only while the lanes hold Config.MaxHeld deliveries, and
// returns false if ctx ended first or Close was called.
func (l *Lanes) Submit(ctx context.Context, d Delivery) bool {
	select {
	case l.slots <- struct{}{}:
	case <-ctx.Done():
		return false
	}
	h := newHandling(l.cfg, d)
	key := h.m.Key
	if key == "" {
		key = h.m.ID.String()
	}
	l.mu.Lock()
	if l.closing {
		// Close came first: ready may be closed already. A delivery
		// submitted this late (a broker client's callback still running
		// at shutdown) stays unacknowledged and comes again.
		l.mu.Unlock()
		<-l.slots
		return false
	}
	l.held++
	kq := l.keys[key]
	if kq == nil {
		kq = &keyQueue{key: key}
		l.keys[key] = kq
	}
	kq.jobs = append(kq.jobs, h)
	first := len(kq.jobs) == 1
	l.mu.Unlock()
	if first {
		l.ready <- kq
	}
	return true
}

// Close waits for the held deliveries to be handled (or dropped, when the
// context of Start ended) and stops the lanes.
func (l *Lanes) Close() {
	l.mu.Lock()
	l.closing = true
	if l.held == 0 {
		close(l.ready)
	}
	l.mu.Unlock()
	l.workers.Wait()
}

// work tries the heads of ready keys until Close.
func (l *Lanes) work() {
	for kq := range l.ready {
		l.mu.Lock()
		h := kq.jobs[0]
		l.mu.Unlock()
		if l.ctx.Err() != nil {
			l.drop(kq)
			continue
		}
		wait, again := h.try(l.ctx, l.fn)
		if !again {
			l.settle(kq)
			continue
		}
		// The key's other deliveries wait as long as its head: tell the
		// broker they are being worked on too, or JetStream delivers them
		// again once AckWait passes.
		l.mu.Lock()
		behind := slices.Clone(kq.jobs[1:])
		l.mu.Unlock()
		for _, b := range behind {
			b.d.Working()
		}
		go l.readyAfter(wait, kq)
	}
}

// readyAfter puts kq back in ready after wait, or at once if the context of
// Start ends (a worker then drops its deliveries).
func (l *Lanes) readyAfter(wait time.Duration, kq *keyQueue) {
	sleep(l.ctx, wait)
	l.ready <- kq
}

// settle takes kq's head, acknowledged, parked or left to the broker, off
// its queue, and makes the next one ready.
func (l *Lanes) settle(kq *keyQueue) {
	l.mu.Lock()
	kq.jobs[0] = nil
	kq.jobs = kq.jobs[1:]
	more := len(kq.jobs) > 0
	if !more {
		delete(l.keys, kq.key)
	}
	l.release(1)
	l.mu.Unlock()
	<-l.slots
	if more {
		l.ready <- kq
	}
}

// drop forgets kq's deliveries, unacknowledged: the context of Start ended
// and the broker delivers them again.
func (l *Lanes) drop(kq *keyQueue) {
	l.mu.Lock()
	n := len(kq.jobs)
	kq.jobs = nil
	delete(l.keys, kq.key)
	l.release(n)
	l.mu.Unlock()
	for range n {
		<-l.slots
	}
}

// release counts n deliveries no longer held; the last one after Close
// stops the workers. l.mu must be held.
func (l *Lanes) release(n int) {
	l.held -= n
	if l.closing && l.held == 0 {
		close(l.ready)
	}
}
