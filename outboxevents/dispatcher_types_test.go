package outboxevents_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/outboxevents"
)

// mailer is a handler of two types under one name, which fails for good
// while blocked and notes the messages it applied (found with MessageOf).
type mailer struct {
	mu      sync.Mutex
	blocked bool
	applied []uuid.UUID
}

func (h *mailer) apply(ctx context.Context, permanentWhileBlocked bool) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if permanentWhileBlocked && h.blocked {
		return outbox.Permanent(errors.New("mailbox blocked (injected)"))
	}
	m, ok := outboxevents.MessageOf(ctx)
	if !ok {
		return errors.New("no message in the handler's context")
	}
	h.applied = append(h.applied, m.ID)
	return nil
}

func (h *mailer) unblock() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.blocked = false
}

func (h *mailer) got() []uuid.UUID {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.applied)
}

// One handler name over two types is one handler: its parked share of an
// aggregate's first event (OrderPlaced) holds the key's next event of the
// other type (OrderPaid), which it applies only after the first, on the
// retry.
func TestAHandlerOfTwoTypesKeepsItsKeyOrderAcrossThem(t *testing.T) {
	t.Parallel()
	store := newMemInbox()
	reg := outboxevents.NewRegistry(outboxevents.Options{})
	outboxevents.MustRegister[OrderPlaced](reg, "orders.placed")
	outboxevents.MustRegister[OrderPaid](reg, "orders.paid")
	d, err := outboxevents.NewDispatcher(reg, store)
	if err != nil {
		t.Fatal(err)
	}
	h := &mailer{blocked: true}
	if err := outboxevents.Handle(d, "mailer", func(ctx context.Context, _ *memTx, _ OrderPlaced) error { return h.apply(ctx, true) }); err != nil {
		t.Fatal(err)
	}
	if err := outboxevents.Handle(d, "mailer", func(ctx context.Context, _ *memTx, _ OrderPaid) error { return h.apply(ctx, false) }); err != nil {
		t.Fatalf("a second type under the same handler name: %v; want it accepted", err)
	}
	err = outboxevents.Handle(d, "mailer", func(context.Context, *memTx, OrderPaid) error { return nil })
	var cfgErr *outbox.ConfigError
	if !errors.As(err, &cfgErr) {
		t.Fatalf("a second function for one type under one name: %v; want a *outbox.ConfigError", err)
	}

	placed, _ := reg.Message(OrderPlaced{OrderID: "o-1"}, "o-1")
	paid, _ := reg.Message(OrderPaid{OrderID: "o-1"}, "o-1")
	placed.ID, paid.ID = uuid.Must(uuid.NewV7()), uuid.Must(uuid.NewV7())
	for _, m := range []outbox.Message{*placed, *paid} {
		if err := d.Deliver(t.Context(), m); err != nil {
			t.Fatalf("deliver %s: %v", m.Topic, err)
		}
	}
	if got := h.got(); len(got) != 0 {
		t.Fatalf("mailer applied %v while its share of the key's first event is parked; want the paid event held behind it", got)
	}
	if p, ok := store.parkedBy("mailer", paid.ID); !ok || !p.Waiting || p.Behind != placed.ID {
		t.Fatalf("mailer's share of the paid event: %+v (parked %v); want it waiting behind the placed event %s", p, ok, placed.ID)
	}

	h.unblock()
	store.requestRetry("mailer", placed.ID)
	ctx, stop := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- d.RetryParked(ctx, outboxevents.RetryConfig{Poll: time.Millisecond}) }()
	for deadline := time.Now().Add(10 * time.Second); len(h.got()) < 2 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got := h.got(); len(got) != 2 || got[0] != placed.ID || got[1] != paid.ID {
		t.Fatalf("after the retry of its parked share, mailer applied %v; want placed %s then paid %s", got, placed.ID, paid.ID)
	}
}

// A consumer adapter named as a handler would mix the adapter's parked
// messages with the handler's parked shares: Deliver refuses to run under
// it, unavailable (the adapter waits, parking and losing nothing), naming
// the fix; under another name it applies the event.
func TestDeliverRefusesAConsumerAdapterNamedAsAHandler(t *testing.T) {
	t.Parallel()
	h := &mailer{}
	d, m := dispatcherWith(t, newMemInbox(), nil, func(ctx context.Context, _ *memTx, _ OrderPlaced) error { return h.apply(ctx, false) }, "mailer")
	err := d.Deliver(outbox.WithConsumerName(t.Context(), "mailer"), m)
	var cfgErr *outbox.ConfigError
	if !outbox.IsUnavailable(err) || outbox.IsPermanent(err) || !errors.As(err, &cfgErr) || len(h.got()) != 0 {
		t.Fatalf("Deliver under an adapter named as its handler: %v, applied %v; want an unavailable *outbox.ConfigError and the handler not run", err, h.got())
	}
	if err := d.Deliver(outbox.WithConsumerName(t.Context(), "orders-service"), m); err != nil || len(h.got()) != 1 {
		t.Fatalf("Deliver under another name: %v, applied %v; want applied", err, h.got())
	}
}
