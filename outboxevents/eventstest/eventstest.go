// Package eventstest is the conformance suite of typed events on a store:
// events saved in a transaction reach every handler of their type exactly
// once through a relay and an outboxevents.Dispatcher, on a real database.
// The store packages run it (outboxpg, outboxsqlite).
package eventstest

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/outboxdriver"
	"github.com/go-outbox/outbox/outboxevents"
	"github.com/go-outbox/outbox/relaytest"
)

// Harness is one fresh outbox table, an inbox table and an effect table, in
// one database.
type Harness[TTx any] struct {
	// Store is the outbox table; it must implement outboxdriver.Admin too.
	Store outboxdriver.Store
	// Writer writes to Store; its Transact runs the application's
	// transactions.
	Writer *outbox.Writer[TTx]
	// Inbox is the handlers' inbox table, in the same database.
	Inbox outbox.InboxStore[TTx]
	// Effect adds a row for key to the effect table inside tx: a handler's
	// change to the business data. The effect table has no unique key, so a
	// handler applied twice leaves two rows.
	Effect func(ctx context.Context, tx TTx, key string) error
	// Effects counts the effect table's rows for key.
	Effects func(ctx context.Context, key string) (int, error)
}

// OrderPlaced and OrderPaid are the suite's events.
type OrderPlaced struct {
	OrderID    string `json:"order_id"`
	TotalCents int    `json:"total_cents"`
}

// OrderPaid is the suite's second event type.
type OrderPaid struct {
	OrderID string `json:"order_id"`
}

// order is an aggregate that raises the suite's events.
type order struct {
	outboxevents.Recorder
	id string
}

func (o *order) EventKey() string { return o.id }

// Run runs the suite; newHarness is called once per subtest.
func Run[TTx any](t *testing.T, newHarness func(t *testing.T) Harness[TTx]) {
	t.Helper()
	cases := []struct {
		name string
		run  func(t *testing.T, h Harness[TTx])
	}{
		{"RolledBackEventsReachNoHandlerCommittedOnesReachEveryHandler", testRollback[TTx]},
		{"EventsOfAFailedTransactionStayRecordedForItsRetry", testRetriedTransaction[TTx]},
		{"AnAggregateLoadedAndTrackedInTheTransactionHasItsEventsWrittenOnceAndCleared", testTracked[TTx]},
		{"ThreeHandlersTheSecondFailingTwiceEachApplyOnce", testFailingHandler[TTx]},
		{"UnknownTypeAndUndecodableBodyAreDeadAtOnce", testUndecodable[TTx]},
		{"OldNameAndShapeReachTheNewHandlerThroughAliasAndUpcast", testEvolution[TTx]},
		{"APermanentFailureParksThatHandlersShareAloneAndItsRetryRunsItAlone", testPermanentFailureParksOneHandler[TTx]},
		{"AnUnavailableHandlerDelaysTheEventWithoutSpendingItsAttempts", testUnavailableHandlerCountsNoAttempt[TTx]},
		{"AHandlersParkedShareHoldsTheRestOfItsKeyForThatHandlerUntilItsRetryAppliesThemInOrder", testParkedShareHoldsItsKey[TTx]},
		{"ARetriedShareThatFailsAgainBecomesItsKeysNewHeadAndTheRestWaitsBehindIt", testRetriedKeyStopsAtANewFailure[TTx]},
		{"WithSkipParkedInKeyOrderAHandlerAppliesPastItsParkedShareAndCountsWhatOvertookIt", testSkipParkedInKeyOrder[TTx]},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.run(t, newHarness(t))
		})
	}
}

func registry(t *testing.T) *outboxevents.Registry {
	t.Helper()
	r := outboxevents.NewRegistry(outboxevents.Options{Source: "/eventstest"})
	outboxevents.MustRegister[OrderPlaced](r, "orders.placed")
	outboxevents.MustRegister[OrderPaid](r, "orders.paid")
	return r
}

func dispatcher[TTx any](t *testing.T, h Harness[TTx], r *outboxevents.Registry) *outboxevents.Dispatcher[TTx] {
	t.Helper()
	d, err := outboxevents.NewDispatcher(r, h.Inbox)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// handle adds a handler that records an effect under its name and the
// order id, after calling before (which may fail it).
func handle[E any, TTx any](t *testing.T, d *outboxevents.Dispatcher[TTx], h Harness[TTx], name string, orderID func(E) string, before func() error) {
	t.Helper()
	err := outboxevents.Handle(d, name, func(ctx context.Context, tx TTx, e E) error {
		if before != nil {
			if err := before(); err != nil {
				return err
			}
		}
		return h.Effect(ctx, tx, name+"/"+orderID(e))
	})
	if err != nil {
		t.Fatal(err)
	}
}

func placedID(e OrderPlaced) string { return e.OrderID }
func paidID(e OrderPaid) string     { return e.OrderID }

// save raises events on a new order and saves them in a transaction that
// commits, or rolls back when commit is false.
func save[TTx any](t *testing.T, h Harness[TTx], r *outboxevents.Registry, commit bool, id string, events ...any) {
	t.Helper()
	o := &order{id: id}
	for _, e := range events {
		o.Record(e)
	}
	errRollback := errors.New("roll back on purpose")
	err := outboxevents.Transact(t.Context(), h.Writer, r, func(context.Context, TTx) error {
		if !commit {
			return errRollback
		}
		return nil
	}, o)
	if commit && err != nil || !commit && !errors.Is(err, errRollback) {
		t.Fatalf("save events of order %s (commit %v): %v", id, commit, err)
	}
}

// requireEffects waits for the outbox to drain, then checks how often each
// key's effect was applied.
func requireEffects[TTx any](t *testing.T, h Harness[TTx], want map[string]int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		st, err := h.Store.(outboxdriver.Admin).Stats(t.Context())
		if err == nil && st.Pending == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the outbox did not drain in 30s: %+v, %v", st, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	for key, n := range want {
		got, err := h.Effects(t.Context(), key)
		if err != nil {
			t.Fatal(err)
		}
		if got != n {
			t.Errorf("effect %s applied %d times, want %d", key, got, n)
		}
	}
}

func testRollback[TTx any](t *testing.T, h Harness[TTx]) {
	r := registry(t)
	d := dispatcher(t, h, r)
	handle(t, d, h, "read-model", placedID, nil)
	handle(t, d, h, "welcome-mail", placedID, nil)
	handle(t, d, h, "ledger", paidID, nil)
	save(t, h, r, false, "o-rolled-back", OrderPlaced{OrderID: "o-rolled-back"}, OrderPaid{OrderID: "o-rolled-back"})
	save(t, h, r, true, "o-1", OrderPlaced{OrderID: "o-1", TotalCents: 1250}, OrderPaid{OrderID: "o-1"})
	relaytest.StartRelay(t, h.Store, d, outbox.Config{PollInterval: 50 * time.Millisecond})
	requireEffects(t, h, map[string]int{
		"read-model/o-1": 1, "welcome-mail/o-1": 1, "ledger/o-1": 1,
		"read-model/o-rolled-back": 0, "welcome-mail/o-rolled-back": 0, "ledger/o-rolled-back": 0,
	})
}

// testRetriedTransaction saves an order's events in a transaction that then
// fails, as one refused by a serialization conflict would, and runs it
// again with the same aggregate: the events must be written by the retry.
func testRetriedTransaction[TTx any](t *testing.T, h Harness[TTx]) {
	r := registry(t)
	d := dispatcher(t, h, r)
	handle(t, d, h, "read-model", placedID, nil)
	o := &order{id: "o-retried"}
	o.Record(OrderPlaced{OrderID: "o-retried"})
	errConflict := errors.New("could not serialize access (injected)")
	err := h.Writer.Transact(t.Context(), func(ctx context.Context, tx TTx) error {
		if err := outboxevents.Save(t.Context(), h.Writer, tx, r, o); err != nil {
			return err
		}
		return errConflict
	})
	if !errors.Is(err, errConflict) {
		t.Fatalf("first try: %v, want the injected conflict", err)
	}
	if n := len(o.RecordedEvents()); n != 1 {
		t.Fatalf("after the failed transaction the order holds %d events, want its 1 event kept for the retry", n)
	}
	if err := outboxevents.Transact(t.Context(), h.Writer, r, func(context.Context, TTx) error { return nil }, o); err != nil {
		t.Fatal(err)
	}
	if n := len(o.RecordedEvents()); n != 0 {
		t.Errorf("after the commit the order still holds %d events, want them cleared", n)
	}
	relaytest.StartRelay(t, h.Store, d, outbox.Config{PollInterval: 50 * time.Millisecond})
	requireEffects(t, h, map[string]int{"read-model/o-retried": 1})
}

// An aggregate loaded inside the transaction (under a lock, in a real
// application) is tracked there: its events are written with the
// transaction, once even if tracked twice, and cleared after the commit;
// tracking with a context Transact did not give fails.
func testTracked[TTx any](t *testing.T, h Harness[TTx]) {
	r := registry(t)
	d := dispatcher(t, h, r)
	handle(t, d, h, "read-model", paidID, nil)
	var loaded *order
	err := outboxevents.Transact(t.Context(), h.Writer, r, func(ctx context.Context, tx TTx) error {
		loaded = &order{id: "o-tracked"} // loaded from its row, FOR UPDATE
		loaded.Record(OrderPaid{OrderID: "o-tracked"})
		if err := outboxevents.Track(ctx, loaded); err != nil {
			return err
		}
		return outboxevents.Track(ctx, loaded)
	})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(loaded.RecordedEvents()); n != 0 {
		t.Errorf("after the commit the tracked order still holds %d events, want them cleared", n)
	}
	if err := outboxevents.Track(t.Context(), loaded); err == nil {
		t.Error("Track with a context Transact did not give: nil error, want one saying which context to pass")
	}
	relaytest.StartRelay(t, h.Store, d, outbox.Config{PollInterval: 50 * time.Millisecond})
	requireEffects(t, h, map[string]int{"read-model/o-tracked": 1})
}

func testFailingHandler[TTx any](t *testing.T, h Harness[TTx]) {
	r := registry(t)
	d := dispatcher(t, h, r)
	var tries atomic.Int32
	handle(t, d, h, "first", placedID, nil)
	handle(t, d, h, "second", placedID, func() error {
		if tries.Add(1) <= 2 {
			return errors.New("mail server busy (injected)")
		}
		return nil
	})
	handle(t, d, h, "third", placedID, nil)
	save(t, h, r, true, "o-2", OrderPlaced{OrderID: "o-2"})
	relaytest.StartRelay(t, h.Store, d, outbox.Config{PollInterval: 20 * time.Millisecond, ActivePollInterval: 5 * time.Millisecond,
		BackoffBase: 10 * time.Millisecond, BackoffMax: 50 * time.Millisecond})
	requireEffects(t, h, map[string]int{"first/o-2": 1, "second/o-2": 1, "third/o-2": 1})
	if n := tries.Load(); n != 3 {
		t.Errorf("the failing handler ran %d times, want 3 (two failures, one success)", n)
	}
}

func testUndecodable[TTx any](t *testing.T, h Harness[TTx]) {
	r := registry(t)
	d := dispatcher(t, h, r)
	handle(t, d, h, "read-model", placedID, nil)
	unknown := &outbox.Message{Topic: "orders.cancelled", Payload: []byte(`{}`), Headers: map[string]string{outboxevents.HeaderType: "orders.cancelled"}}
	garbled := &outbox.Message{Topic: "orders.placed", Payload: []byte(`{"total_cents":"lots"}`), Headers: map[string]string{outboxevents.HeaderType: "orders.placed"}}
	if err := h.Writer.Transact(t.Context(), func(ctx context.Context, tx TTx) error { return h.Writer.Write(t.Context(), tx, unknown, garbled) }); err != nil {
		t.Fatal(err)
	}
	relaytest.StartRelay(t, h.Store, d, outbox.Config{PollInterval: 50 * time.Millisecond, MaxAttempts: 10})
	admin := h.Store.(outboxdriver.Admin)
	for _, tc := range []struct {
		m     *outbox.Message
		wants []string
	}{
		{unknown, []string{"orders.cancelled", "registered: orders.paid, orders.placed"}},
		{garbled, []string{"orders.placed", "undecodable"}},
	} {
		deadline := time.Now().Add(30 * time.Second)
		for {
			got, err := admin.Get(t.Context(), tc.m.ID)
			if err == nil && got.Status == outbox.StatusDead {
				if got.Attempts > 1 {
					t.Errorf("message %s dead after %d attempts, want at once", tc.m.ID, got.Attempts)
				}
				for _, w := range tc.wants {
					if !strings.Contains(got.LastError, w) {
						t.Errorf("message %s: last error %q does not say %q", tc.m.ID, got.LastError, w)
					}
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("message %s not dead-lettered in 30s: %+v, %v", tc.m.ID, got, err)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// OrderPlacedV1 is OrderPlaced as an older release wrote it, under another
// name and with the total in whole euros.
type OrderPlacedV1 struct {
	OrderID string `json:"order_id"`
	Euros   int    `json:"euros"`
}

func testEvolution[TTx any](t *testing.T, h Harness[TTx]) {
	old := outboxevents.NewRegistry(outboxevents.Options{})
	outboxevents.MustRegister[OrderPlacedV1](old, "order_placed")
	save(t, h, old, true, "o-3", OrderPlacedV1{OrderID: "o-3", Euros: 12})

	r := outboxevents.NewRegistry(outboxevents.Options{})
	outboxevents.MustRegister[OrderPlaced](r, "orders.placed", outboxevents.Alias("order_placed"), outboxevents.Version(2),
		outboxevents.Upcast(1, func(body []byte) ([]byte, error) {
			return []byte(strings.Replace(strings.Replace(string(body), `"euros":`, `"total_cents":`, 1), `}`, `00}`, 1)), nil
		}))
	d := dispatcher(t, h, r)
	var got atomic.Value
	handle(t, d, h, "read-model", func(e OrderPlaced) string { got.Store(e); return e.OrderID }, nil)
	relaytest.StartRelay(t, h.Store, d, outbox.Config{PollInterval: 50 * time.Millisecond})
	requireEffects(t, h, map[string]int{"read-model/o-3": 1})
	if e, _ := got.Load().(OrderPlaced); e != (OrderPlaced{OrderID: "o-3", TotalCents: 1200}) {
		t.Fatalf("the handler of the current type got %+v, want OrderPlaced{o-3, 1200} from the old name and shape", e)
	}
}
