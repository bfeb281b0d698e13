package consume_test

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/consume"
)

// memParked is an outbox.KeyParkStore in memory, with the semantics the
// inbox tables have (storetest's parked cases): rows in arrival order, a
// key's first row its head, waiting rows taken only as their key's first.
type memParked struct {
	mu    sync.Mutex
	rows  []*memParkedRow
	takes int64 // marks each take apart, as the tables' taken_at does
}

type memParkedRow struct {
	consumer  string
	m         outbox.Message
	overtaken int
	retry     bool
	taken     time.Time // by a process, for a retry: until it unparks, parks again or hands it back
	waiting   bool
}

func (p *memParked) find(consumer string, id uuid.UUID) int {
	return slices.IndexFunc(p.rows, func(r *memParkedRow) bool { return r.consumer == consumer && r.m.ID == id })
}

// row returns a copy of consumer's row id, or nil.
func (p *memParked) row(consumer string, id uuid.UUID) *memParkedRow {
	p.mu.Lock()
	defer p.mu.Unlock()
	if i := p.find(consumer, id); i >= 0 {
		r := *p.rows[i]
		return &r
	}
	return nil
}

func (p *memParked) first(consumer, key string) *memParkedRow {
	i := slices.IndexFunc(p.rows, func(r *memParkedRow) bool { return r.consumer == consumer && r.m.Key == key })
	if i < 0 {
		return nil
	}
	return p.rows[i]
}

func (p *memParked) Park(_ context.Context, consumer string, m outbox.Message, _ int, _ string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if i := p.find(consumer, m.ID); i >= 0 {
		p.rows[i].retry, p.rows[i].waiting, p.rows[i].taken = false, false, time.Time{}
		return nil
	}
	p.rows = append(p.rows, &memParkedRow{consumer: consumer, m: m})
	return nil
}

func (p *memParked) TakeRetries(_ context.Context, consumer string, limit int) ([]outbox.Message, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []outbox.Message
	for _, r := range p.rows {
		if len(out) < limit && r.consumer == consumer && r.retry && r.taken.IsZero() && (!r.waiting || p.first(consumer, r.m.Key) == r) {
			r.retry, r.taken = false, p.mark()
			out = append(out, r.m)
		}
	}
	return out, nil
}

func (p *memParked) mark() time.Time {
	p.takes++
	return time.Unix(0, p.takes)
}

// TakeRetry and TakeNext are the takes that return the mark a retry's end
// names, as the inbox tables have them.
func (p *memParked) TakeRetry(ctx context.Context, consumer string) (outbox.ParkedMessage, bool, error) {
	msgs, _ := p.TakeRetries(ctx, consumer, 1)
	if len(msgs) == 0 {
		return outbox.ParkedMessage{}, false, nil
	}
	return p.taken(consumer, msgs[0]), true, nil
}

func (p *memParked) TakeNext(ctx context.Context, consumer, key string) (outbox.ParkedMessage, bool, error) {
	m, ok, _ := p.TakeNextWaiting(ctx, consumer, key)
	if !ok {
		return outbox.ParkedMessage{}, false, nil
	}
	return p.taken(consumer, m), true, nil
}

func (p *memParked) taken(consumer string, m outbox.Message) outbox.ParkedMessage {
	p.mu.Lock()
	defer p.mu.Unlock()
	return outbox.ParkedMessage{Message: m, Consumer: consumer, TakenAt: p.rows[p.find(consumer, m.ID)].taken}
}

func (p *memParked) Unpark(_ context.Context, consumer string, id uuid.UUID) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if i := p.find(consumer, id); i >= 0 {
		p.remove(consumer, i)
	}
	return nil
}

// remove deletes row i and, if it was its key's first, requests the retry
// of the key's next waiting row, as the stores do in the same transaction.
func (p *memParked) remove(consumer string, i int) {
	key, wasFirst := p.rows[i].m.Key, p.first(consumer, p.rows[i].m.Key) == p.rows[i]
	p.rows = slices.Delete(p.rows, i, i+1)
	if next := p.first(consumer, key); wasFirst && next != nil && next.waiting {
		next.retry = true
	}
}

// UnparkRetried and ParkRetried are the end of a retry, as the inbox
// tables have it: they report whether the message was still parked.
func (p *memParked) UnparkRetried(_ context.Context, consumer string, id uuid.UUID, taken time.Time) (bool, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	i := p.find(consumer, id)
	if i < 0 || !p.rows[i].taken.Equal(taken) {
		return false, nil
	}
	p.remove(consumer, i)
	return true, nil
}

func (p *memParked) ParkRetried(_ context.Context, consumer string, m outbox.Message, taken time.Time, _ int, _ string) (bool, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	i := p.find(consumer, m.ID)
	if i < 0 || !p.rows[i].taken.Equal(taken) {
		return false, nil
	}
	p.rows[i].retry, p.rows[i].waiting, p.rows[i].taken = false, false, time.Time{}
	return true, nil
}

// ReturnTaken hands back a message a stopping process had taken: its
// retry is requested again.
func (p *memParked) ReturnTaken(_ context.Context, consumer string, id uuid.UUID, taken time.Time) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if i := p.find(consumer, id); i >= 0 && !p.rows[i].taken.IsZero() && p.rows[i].taken.Equal(taken) {
		p.rows[i].retry, p.rows[i].taken = true, time.Time{}
	}
	return nil
}

func (p *memParked) ParkBehind(_ context.Context, consumer string, m outbox.Message) (uuid.UUID, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	head := p.first(consumer, m.Key)
	if m.Key == "" || head == nil {
		return uuid.Nil, nil
	}
	if p.find(consumer, m.ID) < 0 {
		p.rows = append(p.rows, &memParkedRow{consumer: consumer, m: m, waiting: true})
	}
	return head.m.ID, nil
}

func (p *memParked) TakeNextWaiting(_ context.Context, consumer, key string) (outbox.Message, bool, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	head := p.first(consumer, key)
	if head == nil || !head.waiting || !head.retry || !head.taken.IsZero() {
		return outbox.Message{}, false, nil
	}
	head.retry, head.taken = false, p.mark()
	return head.m, true, nil
}

func (p *memParked) CountOvertaken(_ context.Context, consumer, key string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, r := range p.rows {
		if r.consumer == consumer && r.m.Key == key {
			r.overtaken++
		}
	}
	return nil
}

// requestRetry and discard are the operator's side.
func (p *memParked) requestRetry(consumer string, id uuid.UUID) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.rows[p.find(consumer, id)].retry = true
}

func (p *memParked) discard(consumer string, id uuid.UUID) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.remove(consumer, p.find(consumer, id))
}

// state returns the parked ids, each with whether it waits, and overtaken
// counts.
func (p *memParked) state() (ids []uuid.UUID, waiting []bool, overtaken []int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, r := range p.rows {
		ids, waiting, overtaken = append(ids, r.m.ID), append(waiting, r.waiting), append(overtaken, r.overtaken)
	}
	return ids, waiting, overtaken
}

// appliedLog is a handler that fails on the messages in poison (until they
// are removed) and records the others, in order.
type appliedLog struct {
	mu      sync.Mutex
	applied []uuid.UUID
	poison  map[uuid.UUID]bool
}

func (a *appliedLog) handle(_ context.Context, m outbox.Message) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.poison[m.ID] {
		return outbox.Permanent(errors.New("poison"))
	}
	a.applied = append(a.applied, m.ID)
	return nil
}

func (a *appliedLog) heal(id uuid.UUID) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.poison, id)
}

func (a *appliedLog) got() []uuid.UUID {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.applied)
}

// eventually polls cond until it holds or a deadline passes.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting: %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// deliver submits ms to lanes run with cfg and waits for every delivery to
// be settled (acknowledged: applied or parked in the store).
func deliver(t *testing.T, cfg consume.Config, fn func(context.Context, outbox.Message) error, ms ...outbox.Message) {
	t.Helper()
	lanes := consume.Start(t.Context(), cfg, fn)
	ds := make([]*fakeDelivery, len(ms))
	for i, m := range ms {
		ds[i] = &fakeDelivery{m: m}
		if !lanes.Submit(t.Context(), ds[i]) {
			t.Fatalf("submit %s: context ended", m.ID)
		}
	}
	lanes.Close()
	for i, d := range ds {
		if acked, parked := d.state(); !acked || parked {
			t.Fatalf("delivery %d (%s): acked %v, parked on the broker %v; want acknowledged", i, d.m.ID, acked, parked)
		}
	}
}

func parkedConfig(p outbox.ParkStore) consume.Config {
	return consume.Config{Consumer: "billing", Concurrency: 2, MaxDeliver: 1, BackoffBase: time.Millisecond, BackoffMax: time.Millisecond,
		Logger: slog.New(slog.DiscardHandler), Parked: p, RetryPoll: time.Millisecond}
}

// An OrderPaid of order-1 is parked; the OrderCancelled of order-1 behind it
// must not be applied before it (the read model would say paid while the
// order is cancelled), while order-2 goes on. Retrying the OrderPaid applies
// it, then the OrderCancelled. Before the fix the OrderCancelled was applied
// at once.
func TestAMessageBehindAParkedOneOfItsKeyWaitsAndIsAppliedAfterItsRetry(t *testing.T) {
	t.Parallel()
	paid, cancelled, other := message("order-1"), message("order-1"), message("order-2")
	log := &appliedLog{poison: map[uuid.UUID]bool{paid.ID: true}}
	store := &memParked{}
	cfg := parkedConfig(store)
	deliver(t, cfg, log.handle, paid, cancelled, other)
	if got := log.got(); !slices.Equal(got, []uuid.UUID{other.ID}) {
		t.Fatalf("applied %v while OrderPaid %s is parked; want only order-2's %s (OrderCancelled %s waits)", got, paid.ID, other.ID, cancelled.ID)
	}
	if ids, waiting, _ := store.state(); !slices.Equal(ids, []uuid.UUID{paid.ID, cancelled.ID}) || !slices.Equal(waiting, []bool{false, true}) {
		t.Fatalf("parked %v (waiting %v); want OrderPaid %s parked, OrderCancelled %s waiting behind it", ids, waiting, paid.ID, cancelled.ID)
	}

	log.heal(paid.ID)
	store.requestRetry("billing", paid.ID)
	stop := consume.StartRetrying(t.Context(), cfg, log.handle)
	defer stop()
	eventually(t, "OrderPaid and OrderCancelled applied", func() bool { return len(log.got()) == 3 })
	if got := log.got(); !slices.Equal(got, []uuid.UUID{other.ID, paid.ID, cancelled.ID}) {
		t.Fatalf("applied %v; want order-2's, then OrderPaid %s, then OrderCancelled %s", got, paid.ID, cancelled.ID)
	}
	eventually(t, "nothing left parked", func() bool { ids, _, _ := store.state(); return len(ids) == 0 })
}

// A message waiting behind a retried head fails in its turn: it becomes the
// key's head, and those behind it keep waiting.
func TestAWaitingMessageThatFailsOnItsTurnHoldsTheRestOfItsKey(t *testing.T) {
	t.Parallel()
	m1, m2, m3 := message("order-1"), message("order-1"), message("order-1")
	log := &appliedLog{poison: map[uuid.UUID]bool{m1.ID: true, m2.ID: true}}
	store := &memParked{}
	cfg := parkedConfig(store)
	deliver(t, cfg, log.handle, m1, m2, m3)
	log.heal(m1.ID)
	store.requestRetry("billing", m1.ID)
	stop := consume.StartRetrying(t.Context(), cfg, log.handle)
	defer stop()
	eventually(t, "m1 applied and m2 parked again", func() bool {
		ids, waiting, _ := store.state()
		return slices.Equal(ids, []uuid.UUID{m2.ID, m3.ID}) && slices.Equal(waiting, []bool{false, true})
	})
	if got := log.got(); !slices.Equal(got, []uuid.UUID{m1.ID}) {
		t.Fatalf("applied %v; want only %s (its successor failed, and the one behind that waits)", got, m1.ID)
	}
}

// Discarding the parked head lets the key's waiting messages go on, in
// order.
func TestDiscardingAParkedHeadAppliesTheMessagesWaitingBehindIt(t *testing.T) {
	t.Parallel()
	m1, m2, m3 := message("order-1"), message("order-1"), message("order-1")
	log := &appliedLog{poison: map[uuid.UUID]bool{m1.ID: true}}
	store := &memParked{}
	cfg := parkedConfig(store)
	deliver(t, cfg, log.handle, m1, m2, m3)
	if got := log.got(); len(got) != 0 {
		t.Fatalf("applied %v while the head %s is parked; want nothing of its key", got, m1.ID)
	}
	store.discard("billing", m1.ID)
	stop := consume.StartRetrying(t.Context(), cfg, log.handle)
	defer stop()
	eventually(t, "m2 and m3 applied", func() bool { return len(log.got()) == 2 })
	if got := log.got(); !slices.Equal(got, []uuid.UUID{m2.ID, m3.ID}) {
		t.Fatalf("applied %v after the head was discarded; want %s then %s", got, m2.ID, m3.ID)
	}
}

// With SkipParkedInKeyOrder the key goes on past its parked message, and
// each message applied past it is counted on it.
func TestSkippingParkedMessagesAppliesTheKeyAndCountsWhatOvertookThem(t *testing.T) {
	t.Parallel()
	m1, m2, m3, noKey := message("order-1"), message("order-1"), message("order-1"), message("")
	log := &appliedLog{poison: map[uuid.UUID]bool{m1.ID: true}}
	store := &memParked{}
	cfg := parkedConfig(store)
	cfg.SkipParkedInKeyOrder = true
	deliver(t, cfg, log.handle, m1, m2, m3, noKey)
	if got := log.got(); len(got) != 3 || !slices.Contains(got, m2.ID) || !slices.Contains(got, m3.ID) || !slices.Contains(got, noKey.ID) {
		t.Fatalf("applied %v; want %s, %s and the keyless %s, past the parked %s", got, m2.ID, m3.ID, noKey.ID, m1.ID)
	}
	if ids, waiting, overtaken := store.state(); !slices.Equal(ids, []uuid.UUID{m1.ID}) || waiting[0] || overtaken[0] != 2 {
		t.Fatalf("parked %v, waiting %v, overtaken %v; want %s alone, overtaken by 2", ids, waiting, overtaken, m1.ID)
	}
}

// A message with no key is never held, even when other messages with no
// key are parked.
func TestAMessageWithNoKeyIsNeverHeld(t *testing.T) {
	t.Parallel()
	m1, m2 := message(""), message("")
	log := &appliedLog{poison: map[uuid.UUID]bool{m1.ID: true}}
	store := &memParked{}
	deliver(t, parkedConfig(store), log.handle, m1, m2)
	if got := log.got(); !slices.Equal(got, []uuid.UUID{m2.ID}) {
		t.Fatalf("applied %v; want %s, which has no key", got, m2.ID)
	}
}
