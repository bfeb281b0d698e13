package outboxevents_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/outboxevents"
)

// memInbox is an inbox table in memory: records commit with the
// transaction, and it keeps parked messages and holds their keys
// (outbox.KeyParkStore).
type memInbox struct {
	mu      sync.Mutex
	records map[string]bool // consumer/id
	parked  map[string]outbox.ParkedMessage
	retry   map[string]bool // consumer/id whose retry was requested
	seq     map[string]int  // consumer/id -> arrival order among the parked
	nextSeq int
}

type memTx struct{ marks []string }

func newMemInbox() *memInbox {
	return &memInbox{records: map[string]bool{}, parked: map[string]outbox.ParkedMessage{}, retry: map[string]bool{}, seq: map[string]int{}}
}

func recordKey(consumer string, id uuid.UUID) string { return consumer + "/" + id.String() }

func (s *memInbox) RunInTx(_ context.Context, fn func(tx *memTx) error) error {
	tx := &memTx{}
	if err := fn(tx); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, k := range tx.marks {
		s.records[k] = true
	}
	return nil
}

func (s *memInbox) MarkProcessed(_ context.Context, tx *memTx, consumer string, id uuid.UUID) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.records[recordKey(consumer, id)] {
		return false, nil
	}
	tx.marks = append(tx.marks, recordKey(consumer, id))
	return true, nil
}

func (s *memInbox) Park(_ context.Context, consumer string, m outbox.Message, attempts int, reason string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := recordKey(consumer, m.ID)
	s.parked[k] = outbox.ParkedMessage{Message: m, Attempts: attempts, Consumer: consumer, Error: reason}
	delete(s.retry, k)
	if _, ok := s.seq[k]; !ok {
		s.nextSeq++
		s.seq[k] = s.nextSeq
	}
	return nil
}

// head returns consumer's first parked message of key; s.mu is held.
func (s *memInbox) head(consumer, key string) (outbox.ParkedMessage, bool) {
	var first outbox.ParkedMessage
	found := false
	for k, p := range s.parked {
		if p.Consumer == consumer && p.Key == key && (!found || s.seq[k] < s.seq[recordKey(consumer, first.ID)]) {
			first, found = p, true
		}
	}
	return first, found
}

func (s *memInbox) ParkBehind(_ context.Context, consumer string, m outbox.Message) (uuid.UUID, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	head, ok := s.head(consumer, m.Key)
	if m.Key == "" || !ok {
		return uuid.Nil, nil
	}
	k := recordKey(consumer, m.ID)
	if _, parked := s.parked[k]; !parked {
		s.parked[k] = outbox.ParkedMessage{Message: m, Behind: head.ID, Consumer: consumer, Waiting: true}
		s.nextSeq++
		s.seq[k] = s.nextSeq
	}
	return head.ID, nil
}

func (s *memInbox) TakeNextWaiting(_ context.Context, consumer, key string) (outbox.Message, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	head, ok := s.head(consumer, key)
	if !ok || !head.Waiting {
		return outbox.Message{}, false, nil
	}
	delete(s.retry, recordKey(consumer, head.ID))
	return head.Message, true, nil
}

func (s *memInbox) CountOvertaken(_ context.Context, consumer, key string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, p := range s.parked {
		if p.Consumer == consumer && p.Key == key {
			p.Overtaken++
			s.parked[k] = p
		}
	}
	return nil
}

func (s *memInbox) TakeRetries(_ context.Context, consumer string, limit int) ([]outbox.Message, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var msgs []outbox.Message
	for k, p := range s.parked {
		if p.Consumer == consumer && s.retry[k] && len(msgs) < limit {
			delete(s.retry, k)
			msgs = append(msgs, p.Message)
		}
	}
	return msgs, nil
}

func (s *memInbox) Unpark(_ context.Context, consumer string, id uuid.UUID) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.parked, recordKey(consumer, id))
	delete(s.seq, recordKey(consumer, id))
	return nil
}

// GetParked finds consumer's parked share id, as the inbox tables do.
func (s *memInbox) GetParked(_ context.Context, consumer string, id uuid.UUID) (outbox.ParkedMessage, error) {
	if p, ok := s.parkedBy(consumer, id); ok {
		return p, nil
	}
	return outbox.ParkedMessage{}, fmt.Errorf("consumer %q parked no message %s: %w", consumer, id, outbox.ErrNotFound)
}

func (s *memInbox) parkedBy(consumer string, id uuid.UUID) (outbox.ParkedMessage, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, ok := s.parked[recordKey(consumer, id)]
	return p, ok
}

// noParking is an inbox table that keeps no parked messages.
type noParking struct{ in *memInbox }

func (s noParking) RunInTx(ctx context.Context, fn func(tx *memTx) error) error {
	return s.in.RunInTx(ctx, fn)
}

func (s noParking) MarkProcessed(ctx context.Context, tx *memTx, consumer string, id uuid.UUID) (bool, error) {
	return s.in.MarkProcessed(ctx, tx, consumer, id)
}

// parkOnly is an inbox table that keeps parked messages but cannot hold a
// key behind them (no outbox.KeyParkStore).
type parkOnly struct {
	outbox.InboxStore[*memTx]
	outbox.ParkStore
}

// counted is a handler that counts its successful runs and fails while
// fail returns an error.
type counted struct {
	mu      sync.Mutex
	applied int
	fail    func() error
}

func (c *counted) handle(context.Context, *memTx, OrderPlaced) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.fail != nil {
		if err := c.fail(); err != nil {
			return err
		}
	}
	c.applied++
	return nil
}

func (c *counted) setFail(fail func() error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.fail = fail
}

func (c *counted) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.applied
}

func failWith(err error) func() error { return func() error { return err } }

// newDispatcher returns a dispatcher on store with a handler per name, and
// an event for them.
func newDispatcher(t *testing.T, store outbox.InboxStore[*memTx], names ...string) (*outboxevents.Dispatcher[*memTx], map[string]*counted, outbox.Message) {
	t.Helper()
	reg := outboxevents.NewRegistry(outboxevents.Options{})
	outboxevents.MustRegister[OrderPlaced](reg, "orders.placed")
	d, err := outboxevents.NewDispatcher(reg, store)
	if err != nil {
		t.Fatal(err)
	}
	handlers := map[string]*counted{}
	for _, name := range names {
		handlers[name] = &counted{}
		if err := outboxevents.Handle(d, name, handlers[name].handle); err != nil {
			t.Fatal(err)
		}
	}
	m, err := reg.Message(OrderPlaced{OrderID: "o-1"}, "o-1")
	if err != nil {
		t.Fatal(err)
	}
	m.ID = uuid.Must(uuid.NewV7())
	return d, handlers, *m
}

func wantApplied(t *testing.T, handlers map[string]*counted, want map[string]int) {
	t.Helper()
	for name, n := range want {
		if got := handlers[name].count(); got != n {
			t.Errorf("handler %q applied the event %d times; want %d", name, got, n)
		}
	}
}

func TestAHandlersPermanentFailureParksItsShareAloneAndTheEventIsPublished(t *testing.T) {
	t.Parallel()
	store := newMemInbox()
	d, handlers, m := newDispatcher(t, store, "read-model", "welcome-mail", "ledger")
	handlers["welcome-mail"].setFail(failWith(outbox.Permanent(errors.New("no such mailbox (injected)"))))
	if err := d.Publish(t.Context(), []outbox.Message{m})[0]; err != nil {
		t.Fatalf("event %s with one handler failing permanently: %v; want published (nil), the failing handler's share parked", m.ID, err)
	}
	wantApplied(t, handlers, map[string]int{"read-model": 1, "welcome-mail": 0, "ledger": 1})
	p, ok := store.parkedBy("welcome-mail", m.ID)
	if !ok {
		t.Fatalf("event %s: no share parked for handler welcome-mail", m.ID)
	}
	if p.Topic != m.Topic || string(p.Payload) != string(m.Payload) || p.Error == "" {
		t.Fatalf("parked share of event %s: %+v; want the event with the handler's error", m.ID, p)
	}
	for _, other := range []string{"read-model", "ledger"} {
		if _, ok := store.parkedBy(other, m.ID); ok {
			t.Errorf("event %s: handler %q that succeeded has a parked share", m.ID, other)
		}
	}
}

func TestAPermanentFailureBesideARetryableOneParksItsShareAndRetriesTheOther(t *testing.T) {
	t.Parallel()
	store := newMemInbox()
	d, handlers, m := newDispatcher(t, store, "read-model", "welcome-mail", "ledger")
	handlers["welcome-mail"].setFail(failWith(outbox.Permanent(errors.New("no such mailbox (injected)"))))
	handlers["ledger"].setFail(failWith(errors.New("ledger locked (injected)")))
	err := d.Publish(t.Context(), []outbox.Message{m})[0]
	if err == nil || outbox.IsPermanent(err) || outbox.IsUnavailable(err) || outbox.IsHeldBack(err) {
		t.Fatalf("event %s with one handler failing permanently and one retryably: %v; want an ordinary retryable error", m.ID, err)
	}
	if _, ok := store.parkedBy("welcome-mail", m.ID); !ok {
		t.Fatalf("event %s: the share of welcome-mail, which failed permanently, is not parked", m.ID)
	}
	handlers["ledger"].setFail(nil)
	if err := d.Publish(t.Context(), []outbox.Message{m})[0]; err != nil {
		t.Fatalf("retry of event %s: %v; want published", m.ID, err)
	}
	wantApplied(t, handlers, map[string]int{"read-model": 1, "welcome-mail": 0, "ledger": 1})
}

// A share parked on an event without a key holds no key, yet the relay's
// retry of the event for another handler must leave it to RetryParked too.
func TestAParkedShareOfAnEventWithNoKeyIsNotRunAgainWhenTheRelayRetriesTheEventForAnotherHandler(t *testing.T) {
	t.Parallel()
	store := newMemInbox()
	d, handlers, m := newDispatcher(t, store, "welcome-mail", "ledger")
	m.Key = ""
	handlers["welcome-mail"].setFail(failWith(outbox.Permanent(errors.New("no such mailbox (injected)"))))
	handlers["ledger"].setFail(failWith(errors.New("ledger locked (injected)")))
	if err := d.Publish(t.Context(), []outbox.Message{m})[0]; err == nil || outbox.IsPermanent(err) || outbox.IsHeldBack(err) {
		t.Fatalf("event %s with one handler failing permanently and one retryably: %v; want an ordinary retryable error", m.ID, err)
	}
	handlers["welcome-mail"].setFail(nil)
	handlers["ledger"].setFail(nil)
	m.Attempts++
	if err := d.Publish(t.Context(), []outbox.Message{m})[0]; err != nil {
		t.Fatalf("retry of event %s: %v; want published", m.ID, err)
	}
	wantApplied(t, handlers, map[string]int{"welcome-mail": 0, "ledger": 1})
	if _, ok := store.parkedBy("welcome-mail", m.ID); !ok {
		t.Fatalf("event %s: the parked share of welcome-mail is gone after the relay's retry; want it parked until RetryParked runs it", m.ID)
	}
}

func TestAnUnavailableHandlerPostponesTheEventWithoutPausingTheRelayAndTheOthersApplyOnce(t *testing.T) {
	t.Parallel()
	store := newMemInbox()
	d, handlers, m := newDispatcher(t, store, "read-model", "welcome-mail")
	handlers["welcome-mail"].setFail(failWith(outbox.Unavailable(errors.New("dial tcp: connection refused (injected)"))))
	err := d.Publish(t.Context(), []outbox.Message{m})[0]
	if err == nil || outbox.IsUnavailable(err) || outbox.IsPermanent(err) || !outbox.IsHeldBack(err) {
		t.Fatalf("event %s with one handler unavailable: %v; want held back (no attempt counted, no pause of the relay's worker), not unavailable", m.ID, err)
	}
	if delay, ok := outbox.RetryAfterOf(err); !ok || delay <= 0 {
		t.Fatalf("event %s with one handler unavailable: %v; want a delay before the retry", m.ID, err)
	}
	handlers["welcome-mail"].setFail(nil)
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := d.Publish(t.Context(), []outbox.Message{m})[0]
		if err == nil {
			break
		}
		if !outbox.IsHeldBack(err) || time.Now().After(deadline) {
			t.Fatalf("retry of event %s once the handler is back: %v; want published within 30s", m.ID, err)
		}
		delay, _ := outbox.RetryAfterOf(err)
		time.Sleep(min(delay, 100*time.Millisecond)) // as the relay waits before the retry
	}
	wantApplied(t, handlers, map[string]int{"read-model": 1, "welcome-mail": 1})
}

func TestAnUnavailableHandlerBesideAFailingOneCountsAnAttempt(t *testing.T) {
	t.Parallel()
	d, handlers, m := newDispatcher(t, newMemInbox(), "read-model", "welcome-mail")
	handlers["read-model"].setFail(failWith(errors.New("deadlock detected (injected)")))
	handlers["welcome-mail"].setFail(failWith(outbox.Unavailable(errors.New("dial tcp: connection refused (injected)"))))
	err := d.Publish(t.Context(), []outbox.Message{m})[0]
	if err == nil || outbox.IsUnavailable(err) || outbox.IsPermanent(err) || outbox.IsHeldBack(err) {
		t.Fatalf("event %s with one handler failing and one unavailable: %v; want an ordinary retryable error", m.ID, err)
	}
}

// Without a table of parked messages a permanent failure still dead-letters
// the event; its retry (`outbox dead retry`) runs only the handlers that
// have not applied it.
func TestWithoutParkingAHandlersPermanentFailureDeadLettersTheEvent(t *testing.T) {
	t.Parallel()
	d, handlers, m := newDispatcher(t, noParking{newMemInbox()}, "read-model", "welcome-mail")
	handlers["welcome-mail"].setFail(failWith(outbox.Permanent(errors.New("no such mailbox (injected)"))))
	if err := d.Publish(t.Context(), []outbox.Message{m})[0]; !outbox.IsPermanent(err) {
		t.Fatalf("event %s with a handler failing permanently and no parking: %v; want a permanent error", m.ID, err)
	}
	handlers["welcome-mail"].setFail(nil)
	if err := d.Publish(t.Context(), []outbox.Message{m})[0]; err != nil {
		t.Fatalf("retry of dead event %s: %v", m.ID, err)
	}
	wantApplied(t, handlers, map[string]int{"read-model": 1, "welcome-mail": 1})
}

func TestADispatcherRefusesAnInboxThatParksButCannotHoldKeysUnlessToldToSkipParkedInKeyOrder(t *testing.T) {
	t.Parallel()
	reg := outboxevents.NewRegistry(outboxevents.Options{})
	in := newMemInbox()
	store := parkOnly{in, in}
	_, err := outboxevents.NewDispatcher(reg, store)
	var cfgErr *outbox.ConfigError
	if !errors.As(err, &cfgErr) || !strings.Contains(err.Error(), "SkipParkedInKeyOrder") {
		t.Fatalf("NewDispatcher on an inbox that parks but holds no key: %v; want a ConfigError naming SkipParkedInKeyOrder", err)
	}
	if _, err := outboxevents.NewDispatcher(reg, store, outboxevents.SkipParkedInKeyOrder()); err != nil {
		t.Fatalf("NewDispatcher on an inbox that parks but holds no key, with SkipParkedInKeyOrder: %v; want accepted", err)
	}
	if _, err := outboxevents.NewDispatcher(reg, noParking{in}); err != nil {
		t.Fatalf("NewDispatcher on an inbox that parks nothing: %v; want accepted (a permanent failure dead-letters the event, which the relay holds its key behind)", err)
	}
}

// requestRetry marks consumer's parked share id for a retry, as an
// operator's `outbox inbox parked retry` does.
func (s *memInbox) requestRetry(consumer string, id uuid.UUID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.retry[recordKey(consumer, id)] = true
}
