package storetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/outboxdriver"
)

// InboxHarness is one fresh, empty inbox table and an effect table in the
// same database.
type InboxHarness[TTx any] struct {
	// Table is the inbox table under test.
	Table outbox.InboxStore[TTx]
	// Purge is the table's PurgeProcessed.
	Purge func(ctx context.Context, olderThan time.Duration, limit int) (int, error)
	// Outbox is an empty outbox table in the same database, the one the
	// inbox table watches for the messages handlers write; Writer writes to
	// it.
	Outbox outboxdriver.Store
	Writer *outbox.Writer[TTx]
	// Effect adds one row for id to the effect table inside tx: a handler's
	// change to the business data. The effect table has no unique key, so
	// a handler applied twice leaves two rows.
	Effect func(ctx context.Context, tx TTx, id uuid.UUID) error
	// Effects counts the effect table's rows for id.
	Effects func(ctx context.Context, id uuid.UUID) (int, error)
	// Parked is the table's side for parked messages, if it keeps them:
	// the suite then also runs the parking cases against it.
	Parked ParkedTable
}

// RunInbox runs the inbox conformance suite: outbox.Inbox over the harness's
// table applies each message's effect exactly once; and, when the harness
// has Parked, parked messages are kept, retried once and forgotten as
// outbox.ParkStore says. newHarness is called
// once per subtest.
func RunInbox[TTx any](t *testing.T, newHarness func(t *testing.T) InboxHarness[TTx]) {
	t.Helper()
	cases := []struct {
		name string
		run  func(t *testing.T, h InboxHarness[TTx])
	}{
		{"a message is applied once however often it is handled", testInboxOnce[TTx]},
		{"a failing handler records nothing and the message is applied on its next delivery", testInboxFailingHandler[TTx]},
		{"concurrent deliveries of one message apply it once", testInboxConcurrentDuplicates[TTx]},
		{"a delivery that arrives while the first fails applies the message", testInboxDuplicateAfterFailedFirst[TTx]},
		{"each consumer applies a message once", testInboxConsumers[TTx]},
		{"purge deletes old records in bounded batches", testInboxPurge[TTx]},
		{"outgoing messages are published before Handle returns, and a duplicate publishes those left pending", testInboxPublishesOutgoingAtOnce[TTx]},
		{"purge keeps a record until the messages its handler wrote are published, then counts from then", testInboxPurgeWaitsForOutgoing[TTx]},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.run(t, newHarness(t))
		})
	}
	for _, c := range parkedCases() {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t)
			if h.Parked == nil {
				t.Skip("the inbox table keeps no parked messages")
			}
			c.run(t, h.Parked)
		})
	}
}

func newInbox[TTx any](t *testing.T, h InboxHarness[TTx], consumer string) *outbox.Inbox[TTx] {
	t.Helper()
	in, err := outbox.NewInbox(h.Table, consumer)
	if err != nil {
		t.Fatalf("new inbox: %v", err)
	}
	return in
}

// handle delivers id to in and applies the harness's effect.
func handle[TTx any](t *testing.T, h InboxHarness[TTx], in *outbox.Inbox[TTx], id uuid.UUID) bool {
	t.Helper()
	applied, err := in.Handle(t.Context(), id, func(ctx context.Context, tx TTx) error { return h.Effect(ctx, tx, id) })
	if err != nil {
		t.Fatalf("handle message %s: %v", id, err)
	}
	return applied
}

func wantEffects[TTx any](t *testing.T, h InboxHarness[TTx], id uuid.UUID, want int) {
	t.Helper()
	got, err := h.Effects(t.Context(), id)
	if err != nil {
		t.Fatalf("count effects of message %s: %v", id, err)
	}
	if got != want {
		t.Fatalf("message %s was applied %d times; want %d", id, got, want)
	}
}

func testInboxOnce[TTx any](t *testing.T, h InboxHarness[TTx]) {
	in := newInbox(t, h, "billing")
	id := uuid.Must(uuid.NewV7())
	if !handle(t, h, in, id) {
		t.Fatalf("first delivery of message %s: not applied; want applied", id)
	}
	for range 3 {
		if handle(t, h, in, id) {
			t.Fatalf("redelivery of message %s: applied again; want skipped", id)
		}
	}
	wantEffects(t, h, id, 1)
}

func testInboxFailingHandler[TTx any](t *testing.T, h InboxHarness[TTx]) {
	in := newInbox(t, h, "billing")
	id := uuid.Must(uuid.NewV7())
	errHandler := errors.New("handler failed after its effect")
	applied, err := in.Handle(t.Context(), id, func(ctx context.Context, tx TTx) error {
		if err := h.Effect(ctx, tx, id); err != nil {
			return err
		}
		return errHandler
	})
	if !errors.Is(err, errHandler) || applied {
		t.Fatalf("handle with a failing handler: %v, %v; want false and the handler's error", applied, err)
	}
	wantEffects(t, h, id, 0)
	if !handle(t, h, in, id) {
		t.Fatalf("delivery of message %s after a failed one: not applied; want applied", id)
	}
	wantEffects(t, h, id, 1)
}

func testInboxConcurrentDuplicates[TTx any](t *testing.T, h InboxHarness[TTx]) {
	const (
		messages   = 10
		deliveries = 6
	)
	in := newInbox(t, h, "billing")
	for range messages {
		id := uuid.Must(uuid.NewV7())
		var (
			applied atomic.Int32
			wg      sync.WaitGroup
			errs    = make(chan error, deliveries)
			start   = make(chan struct{})
			arrived atomic.Int32
			all     = make(chan struct{}) // every delivery has called Handle
		)
		for range deliveries {
			wg.Go(func() {
				<-start
				if arrived.Add(1) == deliveries {
					close(all)
				}
				ok, err := in.Handle(t.Context(), id, func(ctx context.Context, tx TTx) error {
					// Hold the transaction open until every delivery has
					// arrived, however slowly the machine schedules them,
					// so they run together and not one after the other.
					select {
					case <-all:
					case <-ctx.Done():
						return ctx.Err()
					}
					return h.Effect(ctx, tx, id)
				})
				if err != nil {
					errs <- err
				}
				if ok {
					applied.Add(1)
				}
			})
		}
		close(start)
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatalf("concurrent delivery of message %s: %v", id, err)
		}
		if n := applied.Load(); n != 1 {
			t.Fatalf("%d concurrent deliveries of message %s: %d reported applied; want 1", deliveries, id, n)
		}
		wantEffects(t, h, id, 1)
	}
}

func testInboxDuplicateAfterFailedFirst[TTx any](t *testing.T, h InboxHarness[TTx]) {
	in := newInbox(t, h, "billing")
	id := uuid.Must(uuid.NewV7())
	errFirst := errors.New("first delivery fails")
	started, fail := make(chan struct{}), make(chan struct{})
	first := make(chan error, 1)
	go func() {
		_, err := in.Handle(t.Context(), id, func(ctx context.Context, tx TTx) error {
			if err := h.Effect(ctx, tx, id); err != nil {
				return err
			}
			close(started)
			<-fail
			return errFirst
		})
		first <- err
	}()
	<-started
	type result struct {
		applied bool
		err     error
	}
	second := make(chan result, 1)
	calling := make(chan struct{})
	go func() {
		close(calling)
		applied, err := in.Handle(t.Context(), id, func(ctx context.Context, tx TTx) error { return h.Effect(ctx, tx, id) })
		second <- result{applied, err}
	}()
	// The second delivery is under way before the first fails, however
	// slow the machine: it reaches the record the first one holds and
	// waits there, or gets there after the rollback; the outcome must be
	// the same either way.
	<-calling
	select {
	case r := <-second:
		t.Fatalf("second delivery of message %s returned (applied %v, %v) while the first still held it; want it to wait", id, r.applied, r.err)
	case <-time.After(20 * time.Millisecond): // a moment to reach the record; not needed for the outcome
	}
	close(fail)
	if err := <-first; !errors.Is(err, errFirst) {
		t.Fatalf("first delivery: %v; want its handler's error", err)
	}
	if r := <-second; r.err != nil || !r.applied {
		t.Fatalf("second delivery of message %s after the first failed: applied %v, %v; want applied", id, r.applied, r.err)
	}
	wantEffects(t, h, id, 1)
}

func testInboxConsumers[TTx any](t *testing.T, h InboxHarness[TTx]) {
	billing, shipping := newInbox(t, h, "billing"), newInbox(t, h, "shipping")
	id := uuid.Must(uuid.NewV7())
	for i, in := range []*outbox.Inbox[TTx]{billing, shipping, billing, shipping} {
		if got, want := handle(t, h, in, id), i < 2; got != want {
			t.Fatalf("delivery %d of message %s: applied %v; want %v", i+1, id, got, want)
		}
	}
	wantEffects(t, h, id, 2)
}

func testInboxPurge[TTx any](t *testing.T, h InboxHarness[TTx]) {
	in := newInbox(t, h, "billing")
	var ids []uuid.UUID
	for range 5 {
		id := uuid.Must(uuid.NewV7())
		handle(t, h, in, id)
		ids = append(ids, id)
	}
	purge := func(olderThan time.Duration, limit int) int {
		t.Helper()
		n, err := h.Purge(t.Context(), olderThan, limit)
		if err != nil {
			t.Fatalf("purge: %v", err)
		}
		return n
	}
	if n := purge(time.Hour, 10); n != 0 {
		t.Fatalf("purge of records older than an hour deleted %d; want 0", n)
	}
	var got []int
	for range 4 {
		got = append(got, purge(0, 2))
	}
	if fmt.Sprint(got) != "[2 2 1 0]" {
		t.Fatalf("purges of 5 records in batches of 2 deleted %v; want [2 2 1 0]", got)
	}
	// A message whose record is gone is applied again.
	if !handle(t, h, in, ids[0]) {
		t.Fatalf("delivery of message %s after its record was purged: skipped; want applied", ids[0])
	}
	wantEffects(t, h, ids[0], 2)
}

// testInboxPurgeWaitsForOutgoing is seed 004's rule: a record whose handler
// wrote messages to the outbox stays while any of them is pending, and its
// retention counts from when the last was published.
func testInboxPurgeWaitsForOutgoing[TTx any](t *testing.T, h InboxHarness[TTx]) {
	in := newInbox(t, h, "billing")
	quiet, busy := uuid.Must(uuid.NewV7()), uuid.Must(uuid.NewV7())
	handle(t, h, in, quiet)
	var outgoing outbox.Message
	applied, err := in.Handle(t.Context(), busy, func(ctx context.Context, tx TTx) error {
		outgoing = outbox.Message{Topic: "invoices.sent", Payload: []byte("{}")}
		return h.Writer.Write(ctx, tx, &outgoing)
	})
	if err != nil || !applied {
		t.Fatalf("handle message %s writing an outgoing message: applied %v, %v", busy, applied, err)
	}
	// Long enough that the purge right after the publication below comes
	// within it on a loaded machine; the waits for it to pass are polls.
	const retention = time.Second
	purge := func() int {
		t.Helper()
		n, err := PurgeAll(t.Context(), h.Purge, retention)
		if err != nil {
			t.Fatalf("purge: %v", err)
		}
		return n
	}
	// purgeOnce polls until a purge deletes something and returns how many.
	purgeOnce := func(what string) int {
		t.Helper()
		deadline := time.Now().Add(retention + 30*time.Second)
		for {
			if n := purge(); n > 0 {
				return n
			}
			if time.Now().After(deadline) {
				t.Fatalf("no purge deleted anything within %v: %s", retention+30*time.Second, what)
			}
			time.Sleep(20 * time.Millisecond) // polling: the retention is the database's clock
		}
	}
	// Once both records are older than the retention, only the one without
	// a pending outgoing message goes.
	if n := purgeOnce("want " + quiet.String() + "'s record purged"); n != 1 {
		t.Fatalf("purge while %s's outgoing message is pending deleted %d records; want 1 (%s's)", busy, n, quiet)
	}
	if handle(t, h, in, busy) {
		t.Fatalf("message %s applied again after the purge; its record must stay while its outgoing message is pending", busy)
	}

	token := uuid.Must(uuid.NewV7())
	claimed, err := h.Outbox.SettleAndClaim(t.Context(), outboxdriver.Settlement{}, outboxdriver.Claim{Limit: 10, Lease: time.Minute, Token: token})
	if err != nil || len(claimed) != 1 || claimed[0].ID != outgoing.ID {
		t.Fatalf("claim the outgoing message %s: %v, %v", outgoing.ID, claimed, err)
	}
	if _, err := h.Outbox.SettleAndClaim(t.Context(), outboxdriver.Settlement{Token: token, Published: []uuid.UUID{outgoing.ID}}, outboxdriver.Claim{}); err != nil {
		t.Fatalf("settle the outgoing message as published: %v", err)
	}
	// Published now: the countdown starts, so the record is still young.
	if n := purge(); n != 0 {
		t.Fatalf("purge right after the outgoing message was published deleted %d records; want 0 (the retention counts from the publication)", n)
	}
	if n := purgeOnce("want " + busy.String() + "'s record purged a retention after its outgoing message was published"); n != 1 {
		t.Fatalf("purge a retention after the publication deleted %d records; want 1", n)
	}
}

// PurgeAll calls purge in batches of 100 until it deletes fewer, and returns
// how many it deleted in all.
func PurgeAll(ctx context.Context, purge func(ctx context.Context, olderThan time.Duration, limit int) (int, error), olderThan time.Duration) (int, error) {
	total := 0
	for {
		n, err := purge(ctx, olderThan, 100)
		total += n
		if err != nil || n < 100 {
			return total, err
		}
	}
}

// idPublisher records the ids it is asked to publish, and confirms them.
type idPublisher struct {
	mu  sync.Mutex
	ids []uuid.UUID
}

func (p *idPublisher) Publish(_ context.Context, batch []outbox.Message) []error {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, m := range batch {
		p.ids = append(p.ids, m.ID)
	}
	return make([]error, len(batch))
}

func (p *idPublisher) Close() error { return nil }

func (p *idPublisher) published() []uuid.UUID {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.ids)
}

// testInboxPublishesOutgoingAtOnce is seed 004's "incoming message" way
// (and Writer.TransactAndPublish its "control message" way):
// with PublishOutgoing, the messages a handler writes are published before
// Handle returns, with no relay running; and a duplicate delivery of a
// message whose first handling stopped after its commit publishes what that
// handling left pending.
func testInboxPublishesOutgoingAtOnce[TTx any](t *testing.T, h InboxHarness[TTx]) {
	pub := &idPublisher{}
	relay, err := outbox.NewRelay(h.Outbox, pub, outbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	in := newInbox(t, h, "billing")
	in.PublishOutgoing(relay)
	write := func(out *outbox.Message) func(ctx context.Context, tx TTx) error {
		return func(ctx context.Context, tx TTx) error { return h.Writer.Write(ctx, tx, out) }
	}

	first := &outbox.Message{Topic: "invoices.sent", Payload: []byte("{}")}
	if applied, err := in.Handle(t.Context(), uuid.Must(uuid.NewV7()), write(first)); err != nil || !applied {
		t.Fatalf("handle: applied %v, %v", applied, err)
	}
	if got := pub.published(); !slices.Equal(got, []uuid.UUID{first.ID}) {
		t.Fatalf("published when Handle returned: %v; want the outgoing message %s", got, first.ID)
	}

	// The first handling of a second message commits, and its process
	// stops before publishing (an inbox without the relay stands for it).
	crashed := newInbox(t, h, "billing")
	id := uuid.Must(uuid.NewV7())
	second := &outbox.Message{Topic: "invoices.sent", Payload: []byte("{}")}
	if applied, err := crashed.Handle(t.Context(), id, write(second)); err != nil || !applied {
		t.Fatalf("first handling of %s: applied %v, %v", id, applied, err)
	}
	if applied, err := in.Handle(t.Context(), id, write(&outbox.Message{Topic: "invoices.sent"})); err != nil || applied {
		t.Fatalf("duplicate delivery of %s: applied %v, %v; want skipped", id, applied, err)
	}
	if got := pub.published(); !slices.Equal(got, []uuid.UUID{first.ID, second.ID}) {
		t.Fatalf("published after the duplicate delivery: %v; want also %s, left pending by the first handling", got, second.ID)
	}
	st, err := h.Outbox.(outboxdriver.Admin).Stats(t.Context())
	if err != nil || st.Pending != 0 {
		t.Fatalf("outbox after both: %+v, %v; want nothing pending (both recorded as published)", st, err)
	}

	// A write that does not come from a message: the transaction's own
	// messages go out before TransactAndPublish returns.
	third := &outbox.Message{Topic: "orders.placed", Payload: []byte("{}")}
	if err := h.Writer.TransactAndPublish(t.Context(), relay, func(ctx context.Context, tx TTx) error { return h.Writer.Write(ctx, tx, third) }); err != nil {
		t.Fatal(err)
	}
	if got := pub.published(); !slices.Contains(got, third.ID) {
		t.Fatalf("published when TransactAndPublish returned: %v; want %s", got, third.ID)
	}
}
