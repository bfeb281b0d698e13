// Package storetest is the conformance suite every outboxdriver.Store must pass.
//
// A store package runs it from its own tests with a function that returns a
// fresh, migrated table for each subtest:
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, func(t *testing.T) storetest.Harness {
//			store := newStoreOnFreshTable(t)
//			return storetest.Harness{Store: store, Admin: store, Write: ..., WriteRollback: ...}
//		})
//	}
//
// The suite needs no fake clock: it uses short real leases and delays (tens to
// hundreds of milliseconds) and waits for results by polling with a deadline,
// so it also holds for stores whose clock is the database's. Subtests run in
// parallel, so every call of the harness function must return a table no
// other subtest sees.
package storetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/outboxdriver"
)

// Harness is one fresh, migrated, empty outbox table and the ways to use it.
type Harness struct {
	// Admin is the operator's access to the same table.
	Admin outboxdriver.Admin
	// Now reads the clock the store computes due times with (for PostgreSQL,
	// the database's clock_timestamp()). Nil means time.Now.
	Now func(ctx context.Context) (time.Time, error)
	// Store is the table under test.
	Store outboxdriver.Store
	// KeyOrdered is the same table through a store that claims in key
	// order (outboxpg.Options.OrderByKey, for example). Nil skips the
	// key-order cases.
	KeyOrdered outboxdriver.Store
	// KeyOrderedSkippingDead is the same table through a store that
	// claims in key order but lets a key go on past a dead message
	// (outboxpg.Options.SkipDeadInKeyOrder, for example). Nil skips the
	// case that needs it.
	KeyOrderedSkippingDead outboxdriver.Store
	// Write writes msgs in one transaction and commits it, the way
	// applications do (through an outbox.Writer).
	Write func(ctx context.Context, msgs ...*outbox.Message) error
	// WriteRollback writes msgs in one transaction and rolls it back. It
	// returns an error only if writing failed.
	WriteRollback func(ctx context.Context, msgs ...*outbox.Message) error
	// SetMinute writes the row of minute m.Start in the store's
	// per-minute rollup as m says, as relays of the past would have left
	// it (m.Sampled false leaves the sample empty). Nil skips the parts
	// of the rollup's case that need rows older than now.
	SetMinute func(ctx context.Context, m outboxdriver.Minute) error
	// SetStoredHeaders overwrites the stored headers of message id with raw,
	// as another program writing to the table could. Nil skips the cases
	// that need it.
	SetStoredHeaders func(ctx context.Context, id uuid.UUID, raw string) error
	// CountHeld, for a store whose claims hold their rows in an open
	// transaction instead of writing a lease (outboxpg's
	// TransactionLeases), counts the messages such claims hold. The
	// cases then expect what such a store does: messages in flight count
	// as pending in Stats but are not due in NextDue, a release or dead letter
	// of part of a claim shows when the claim is settled, a settlement
	// puts back the claim's messages it does not list, and a claim
	// whose lease ended is due again once its transaction is rolled
	// back. Nil for stores that write leases.
	CountHeld func(ctx context.Context) (int64, error)
}

// held reports whether the store's claims hold their rows in a
// transaction (Harness.CountHeld).
func (s *suite) held() bool { return s.h.CountHeld != nil }

// Run runs the conformance suite. newHarness is called once per subtest, with
// the subtest's t.
func Run(t *testing.T, newHarness func(t *testing.T) Harness) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.run(t, &suite{h: harness(t, newHarness)})
		})
	}
	for _, c := range keyOrderCases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			h := harness(t, newHarness)
			if h.KeyOrdered == nil {
				t.Skip("the harness sets no KeyOrdered store")
			}
			c.run(t, &suite{h: h})
		})
	}
}

func harness(t *testing.T, newHarness func(t *testing.T) Harness) Harness {
	t.Helper()
	h := newHarness(t)
	if h.Store == nil || h.Admin == nil || h.Write == nil || h.WriteRollback == nil {
		t.Fatalf("storetest: the harness must set Store, Admin, Write and WriteRollback")
	}
	return h
}

type testCase struct {
	name string
	run  func(t *testing.T, s *suite)
}

// suite wraps a Harness with helpers that fail the test on error.
type suite struct {
	h Harness
}

// Timeouts of the suite. waitTimeout is generous: it bounds polls that should
// end within milliseconds, and only a broken store reaches it.
const (
	waitTimeout  = 10 * time.Second
	pollInterval = 5 * time.Millisecond
	longLease    = time.Minute
)

func (s *suite) now(t *testing.T) time.Time {
	t.Helper()
	if s.h.Now == nil {
		return time.Now()
	}
	now, err := s.h.Now(t.Context())
	if err != nil {
		t.Fatalf("read the store's clock: %v", err)
	}
	return now
}

func (s *suite) write(t *testing.T, msgs ...*outbox.Message) {
	t.Helper()
	if err := s.h.Write(t.Context(), msgs...); err != nil {
		t.Fatalf("write %d message(s): %v", len(msgs), err)
	}
}

func (s *suite) exchange(t *testing.T, settle outboxdriver.Settlement, claim outboxdriver.Claim) []outbox.Message {
	t.Helper()
	got, err := s.h.Store.SettleAndClaim(t.Context(), settle, claim)
	if err != nil {
		t.Fatalf("exchange (settle %d published, %d retried, %d dead; claim %d): %v",
			len(settle.Published), len(settle.Retry), len(settle.Dead), claim.Limit, err)
	}
	if len(got) > claim.Limit {
		t.Fatalf("exchange claimed %d messages, more than the limit %d", len(got), claim.Limit)
	}
	return got
}

// claim leases up to limit messages to a new token.
func (s *suite) claim(t *testing.T, limit int, lease time.Duration) (uuid.UUID, []outbox.Message) {
	t.Helper()
	token := uuid.New()
	return token, s.exchange(t, outboxdriver.Settlement{}, outboxdriver.Claim{Limit: limit, Lease: lease, Token: token})
}

// claimIDs claims and fails unless exactly want come back, in that order.
func (s *suite) claimIDs(t *testing.T, limit int, lease time.Duration, want ...uuid.UUID) (uuid.UUID, []outbox.Message) {
	t.Helper()
	token, got := s.claim(t, limit, lease)
	if !slices.Equal(ids(got), want) {
		t.Fatalf("claim(limit %d) returned %v; want %v", limit, ids(got), want)
	}
	return token, got
}

// claimEventually polls until a claim returns something, and returns it.
func (s *suite) claimEventually(t *testing.T, limit int, lease time.Duration) (uuid.UUID, []outbox.Message) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for {
		token, got := s.claim(t, limit, lease)
		if len(got) > 0 {
			return token, got
		}
		if time.Now().After(deadline) {
			t.Fatalf("no message became claimable within %v", waitTimeout)
		}
		time.Sleep(pollInterval)
	}
}

func (s *suite) get(t *testing.T, id uuid.UUID) outbox.Message {
	t.Helper()
	m, err := s.h.Admin.Get(t.Context(), id)
	if err != nil {
		t.Fatalf("get message %s: %v", id, err)
	}
	if m.ID != id {
		t.Fatalf("get message %s returned message %s", id, m.ID)
	}
	return m
}

func (s *suite) mustBeGone(t *testing.T, id uuid.UUID) {
	t.Helper()
	_, err := s.h.Admin.Get(t.Context(), id)
	if !errors.Is(err, outbox.ErrNotFound) {
		t.Fatalf("get message %s: got error %v; want outbox.ErrNotFound (the message should not exist)", id, err)
	}
}

func (s *suite) stats(t *testing.T) outboxdriver.Stats {
	t.Helper()
	st, err := s.h.Admin.Stats(t.Context())
	if err != nil {
		t.Fatalf("stats: %v", err)
	}
	return st
}

func (s *suite) nextDue(t *testing.T) (time.Duration, bool) {
	t.Helper()
	wait, ok, err := s.h.Store.NextDue(t.Context())
	if err != nil {
		t.Fatalf("next due: %v", err)
	}
	return wait, ok
}

// makeDead writes n messages and dead-letters them, and returns their ids in
// id order.
func (s *suite) makeDead(t *testing.T, n int) []uuid.UUID {
	t.Helper()
	msgs := newMessages("orders.dead", n)
	s.write(t, msgs...)
	token, got := s.claim(t, n, longLease)
	if len(got) != n {
		t.Fatalf("claimed %d messages to dead-letter; want %d", len(got), n)
	}
	settle := outboxdriver.Settlement{Token: token}
	for _, m := range got {
		settle.Dead = append(settle.Dead, outboxdriver.Failure{ID: m.ID, Error: "cannot decode " + m.ID.String()})
	}
	s.exchange(t, settle, outboxdriver.Claim{})
	return ids(msgs)
}

// newMessage returns a message with every application field set: a binary
// payload, headers, a key, and a CreatedAt with nanoseconds (stores keep
// microseconds).
func newMessage(topic string) *outbox.Message {
	id := uuid.Must(uuid.NewV7())
	return &outbox.Message{
		ID:    id,
		Topic: topic,
		Key:   "order-" + id.String()[:8],
		Payload: append([]byte{0x00, 0xff, 0xfe, '\n', '"', '\\'},
			[]byte(`{"id":"`+id.String()+`"}`)...),
		Headers: map[string]string{
			"content-type": "application/json",
			"traceparent":  "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
			"x-unicode":    "grüße ✓",
		},
		CreatedAt: time.Now().Add(-time.Second),
	}
}

// newMessages returns n messages whose ids ascend in slice order.
func newMessages(topic string, n int) []*outbox.Message {
	msgs := make([]*outbox.Message, n)
	for i := range msgs {
		msgs[i] = newMessage(topic)
	}
	return msgs
}

func ids[M outbox.Message | *outbox.Message](msgs []M) []uuid.UUID {
	out := make([]uuid.UUID, len(msgs))
	for i := range msgs {
		switch m := any(msgs[i]).(type) {
		case outbox.Message:
			out[i] = m.ID
		case *outbox.Message:
			out[i] = m.ID
		}
	}
	return out
}

func sortedIDs(in []uuid.UUID) []uuid.UUID {
	out := slices.Clone(in)
	slices.SortFunc(out, func(a, b uuid.UUID) int { return bytes.Compare(a[:], b[:]) })
	return out
}

// within reports whether got lies in [lo, hi], allowing the microsecond the
// store may truncate.
func within(got, lo, hi time.Time) bool {
	return !got.Before(lo.Add(-time.Microsecond)) && !got.After(hi.Add(time.Microsecond))
}

// runClaimers runs claimers goroutines against store until done reports
// true (or a minute passes). Each loops: one Exchange that records its
// previous settlement and claims up to batch messages, then handle, which
// returns the settlement of what it claimed, or a failure (a broken
// invariant) that stops that claimer. Each records its last settlement
// before it returns. The failures are reported with t.Error.
func runClaimers(t *testing.T, store outboxdriver.Store, claimers, batch int, done func() bool,
	handle func(claimer int, token uuid.UUID, got []outbox.Message) (outboxdriver.Settlement, string)) {
	t.Helper()
	var (
		failures = make(chan string, claimers)
		wg       sync.WaitGroup
	)
	deadline := time.Now().Add(60 * time.Second)
	for c := range claimers {
		wg.Go(func() {
			var settle outboxdriver.Settlement
			for !done() && time.Now().Before(deadline) {
				token := uuid.New()
				got, err := store.SettleAndClaim(t.Context(), settle, outboxdriver.Claim{Limit: batch, Lease: longLease, Token: token})
				if err != nil {
					failures <- fmt.Sprintf("claimer %d: %v", c, err)
					return
				}
				var failure string
				if settle, failure = handle(c, token, got); failure != "" {
					failures <- failure
					return
				}
				if len(got) == 0 {
					time.Sleep(time.Millisecond) // the rest is leased to others for now
				}
			}
			if _, err := store.SettleAndClaim(t.Context(), settle, outboxdriver.Claim{}); err != nil {
				failures <- fmt.Sprintf("claimer %d: final settlement: %v", c, err)
			}
		})
	}
	wg.Wait()
	close(failures)
	for f := range failures {
		t.Error(f)
	}
}
