package storetest

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/go-outbox/outbox"
)

// ParkedTable is what an inbox table offers for the messages consumers
// park: outbox.KeyParkStore for the consumers, and the operator's side that
// `outbox inbox parked` uses.
type ParkedTable interface {
	outbox.KeyParkStore
	ListParked(ctx context.Context, consumer string, after uuid.UUID, limit int) ([]outbox.ParkedMessage, error)
	GetParked(ctx context.Context, consumer string, id uuid.UUID) (outbox.ParkedMessage, error)
	RequestRetry(ctx context.Context, consumer string, ids ...uuid.UUID) (int, error)
	DiscardParked(ctx context.Context, consumer string, ids ...uuid.UUID) (int, error)
	ParkedCounts(ctx context.Context) (map[string]int64, error)
	WaitingCounts(ctx context.Context) (map[string]int64, error)

	// A consumer process's end of a retry, and the operator's view of
	// the messages processes took.
	TakeRetry(ctx context.Context, consumer string) (outbox.ParkedMessage, bool, error)
	TakeNext(ctx context.Context, consumer, key string) (outbox.ParkedMessage, bool, error)
	UnparkRetried(ctx context.Context, consumer string, id uuid.UUID, taken time.Time) (bool, error)
	ParkRetried(ctx context.Context, consumer string, m outbox.Message, taken time.Time, attempts int, reason string) (bool, error)
	ReturnTaken(ctx context.Context, consumer string, id uuid.UUID, taken time.Time) error
	ForgetTaken(ctx context.Context, consumer string, ids ...uuid.UUID) (int, error)
	StalledCounts(ctx context.Context) (map[string]int64, error)
	TakenCounts(ctx context.Context) (map[string]int64, error)
}

// parkedCases are the cases of RunInbox for InboxHarness.Parked.
func parkedCases() []struct {
	name string
	run  func(t *testing.T, p ParkedTable)
} {
	return []struct {
		name string
		run  func(t *testing.T, p ParkedTable)
	}{
		{"a parked message is kept whole with its error and attempts, and parking it again replaces them", testParkKeepsTheMessage},
		{"a requested retry is taken by one taker only, and parking again clears it", testParkedRetryTakenOnce},
		{"unpark and discard forget parked messages, and the list pages in id order", testParkedUnparkDiscardList},
		{"a parked message holds the later messages of its key, which wait and are taken in arrival order once it is unparked", testParkedHoldsItsKey},
		{"a discarded head passes its key on to the first message waiting behind it", testParkedDiscardPassesTheKeyOn},
		{"messages of a key applied past its parked messages are counted on them", testParkedCountsOvertaken},
		{"a message parked behind a key as its last parked message is unparked is either not held or seen by the unparker", testParkedBehindRacesTheLastUnpark},
		{"unparking a key's first message requests the retry of the next, so a consumer that stops before taking it does not stall the key", testParkedUnparkPassesTheKeyOn},
		{"the next waiting message is handed out once, by TakeNextWaiting or as the retry its unpark requested", testParkedNextWaitingTakenOnce},
		{"unparking a later message of a key does not request its first again", testParkedUnparkOfALaterMessageKeepsTheFirst},
		{"discarding a message waiting behind its key's first does not request that first again", testParkedDiscardOfALaterMessageKeepsTheFirst},
		{"a message taken for a retry is neither discarded nor handed out again until its process unparks or parks it", testParkedTakenIsLeftAlone},
		{"a retry of all a consumer's messages while a key's chain runs does not hand out again the message the chain took", testParkedRetryOfAllLeavesTheChainAlone},
		{"a retried message that fails again is parked again as its key's first", testParkedRetriedAndParkedAgainKeepsItsPlace},
		{"a message a stopped process took is taken back by forgetting it was taken, and a key nobody will go on with is counted stalled", testParkedForgetTakenAndStalled},
		{"a retry's end tells whether the message was still parked, and parks nothing that was discarded", testParkedRetryEndSeesADiscard},
		{"a message a stopping process hands back is requested again, taken by the next process", testParkedReturnTaken},
		{"the end of a retry by a process whose take an operator took back leaves the take of the next process alone", testParkedRetryEndOfAnOldTakerLeavesTheNewOne},
		{"a taken message, head or next waiting, is not taken again until its taker ends or hands it back", testParkedTakenNextIsTakenOnce},
		{"a parked message's error with any bytes in it is stored, readable, when it is parked and parked again", testParkedReasonWithAnyBytesIsStored},
	}
}

func parkBehind(t *testing.T, p ParkedTable, consumer string, m outbox.Message) uuid.UUID {
	t.Helper()
	head, err := p.ParkBehind(t.Context(), consumer, m)
	if err != nil {
		t.Fatalf("park message %s of %s behind its key %q: %v", m.ID, consumer, m.Key, err)
	}
	return head
}

func takeNextWaiting(t *testing.T, p ParkedTable, consumer, key string) (uuid.UUID, bool) {
	t.Helper()
	m, ok, err := p.TakeNextWaiting(t.Context(), consumer, key)
	if err != nil {
		t.Fatalf("take the next waiting message of key %q of %s: %v", key, consumer, err)
	}
	return m.ID, ok
}

func unpark(t *testing.T, p ParkedTable, consumer string, id uuid.UUID) {
	t.Helper()
	if err := p.Unpark(t.Context(), consumer, id); err != nil {
		t.Fatalf("unpark %s of %s: %v", id, consumer, err)
	}
}

func testParkedHoldsItsKey(t *testing.T, p ParkedTable) {
	m1, m2, m3, m4 := parkedMessage("order-1"), parkedMessage("order-1"), parkedMessage("order-2"), parkedMessage("order-1")
	park(t, p, "billing", m1, 5, "no such customer")
	if head := parkBehind(t, p, "billing", m2); head != m1.ID {
		t.Fatalf("message %s of key order-1 delivered while %s of that key is parked: held behind %s; want behind %s", m2.ID, m1.ID, head, m1.ID)
	}
	got := getParked(t, p, "billing", m2.ID)
	sameMessage(t, got.Message, m2)
	if !got.Waiting || got.Behind != m1.ID || got.Attempts != 0 || !strings.Contains(got.Error, "waiting behind parked message "+m1.ID.String()+" of key order-1") {
		t.Fatalf("message %s held behind %s: waiting %v, behind %s, %d attempts, error %q; want waiting behind %s, 0 attempts, a reason naming it",
			m2.ID, m1.ID, got.Waiting, got.Behind, got.Attempts, got.Error, m1.ID)
	}
	if head := getParked(t, p, "billing", m1.ID); head.Waiting || head.Behind != uuid.Nil {
		t.Fatalf("the key's head %s: waiting %v behind %s; want a parked message that waits for nobody", m1.ID, head.Waiting, head.Behind)
	}
	if head := parkBehind(t, p, "billing", m3); head != uuid.Nil {
		t.Fatalf("message %s of key order-2, which has no parked message: held behind %s; want it not held", m3.ID, head)
	}
	if _, err := p.GetParked(t.Context(), "billing", m3.ID); !errors.Is(err, outbox.ErrNotFound) {
		t.Fatalf("message %s not held: get parked: %v; want ErrNotFound", m3.ID, err)
	}
	if head := parkBehind(t, p, "shipping", m4); head != uuid.Nil {
		t.Fatalf("message %s of key order-1 for shipping, which parked nothing: held behind %s; want a key held for its consumer only", m4.ID, head)
	}
	if head := parkBehind(t, p, "billing", parkedMessage("")); head != uuid.Nil {
		t.Fatalf("message with no key: held behind %s; want never held", head)
	}
	parkBehind(t, p, "billing", m4)
	if head := parkBehind(t, p, "billing", m1); head != m1.ID || getParked(t, p, "billing", m1.ID).Waiting {
		t.Fatalf("the head %s delivered again: held behind %s; want its own id, and it still the head", m1.ID, head)
	}
	if head := parkBehind(t, p, "billing", m2); head != m1.ID {
		t.Fatalf("waiting message %s delivered again: held behind %s; want %s", m2.ID, head, m1.ID)
	}
	if w, err := p.WaitingCounts(t.Context()); err != nil || !maps.Equal(w, map[string]int64{"billing": 2}) {
		t.Fatalf("waiting counts: %v, %v; want billing 2", w, err)
	}
	if id, ok := takeNextWaiting(t, p, "billing", "order-1"); ok {
		t.Fatalf("next waiting message of order-1 while its head %s is parked: %s; want none", m1.ID, id)
	}

	// Only the head can be retried: a waiting message would jump it.
	requestRetry(t, p, "billing", 0, m2.ID)
	requestRetry(t, p, "billing", 1)
	if got := takeRetries(t, p, "billing", 10); !slices.Equal(got, []uuid.UUID{m1.ID}) {
		t.Fatalf("retries taken after a retry of all of billing's messages: %v; want the head %s only", got, m1.ID)
	}
	// The head succeeded: the waiting ones come in arrival order.
	unpark(t, p, "billing", m1.ID)
	if id, ok := takeNextWaiting(t, p, "billing", "order-1"); !ok || id != m2.ID {
		t.Fatalf("next waiting message of order-1 once %s is unparked: %s, %v; want %s", m1.ID, id, ok, m2.ID)
	}
	if got := getParked(t, p, "billing", m4.ID); got.Behind != m2.ID {
		t.Fatalf("message %s once %s is unparked: behind %s; want behind %s, now the key's first", m4.ID, m1.ID, got.Behind, m2.ID)
	}
	unpark(t, p, "billing", m2.ID)
	if id, ok := takeNextWaiting(t, p, "billing", "order-1"); !ok || id != m4.ID {
		t.Fatalf("next waiting message of order-1 once %s is unparked: %s, %v; want %s", m2.ID, id, ok, m4.ID)
	}
	// It fails: it is the key's new head.
	park(t, p, "billing", m4, 5, "still failing")
	if got := getParked(t, p, "billing", m4.ID); got.Waiting || got.Error != "still failing" {
		t.Fatalf("waiting message %s parked after its handler failed: waiting %v, error %q; want the key's head with the error", m4.ID, got.Waiting, got.Error)
	}
	if id, ok := takeNextWaiting(t, p, "billing", "order-1"); ok {
		t.Fatalf("next waiting message of order-1 after its new head failed: %s; want none", id)
	}
	if w, err := p.WaitingCounts(t.Context()); err != nil || len(w) != 0 {
		t.Fatalf("waiting counts with none waiting: %v, %v; want none", w, err)
	}
}

func testParkedDiscardPassesTheKeyOn(t *testing.T, p ParkedTable) {
	m1, m2, m3, m4 := parkedMessage("order-1"), parkedMessage("order-1"), parkedMessage("order-1"), parkedMessage("order-1")
	park(t, p, "billing", m1, 5, "no such customer")
	for _, m := range []outbox.Message{m2, m3, m4} {
		parkBehind(t, p, "billing", m)
	}
	// A waiting message discarded: the key stays held by its head.
	if n, err := p.DiscardParked(t.Context(), "billing", m3.ID); err != nil || n != 1 {
		t.Fatalf("discard waiting message %s: %d, %v; want 1", m3.ID, n, err)
	}
	if got := takeRetries(t, p, "billing", 10); len(got) != 0 {
		t.Fatalf("retries taken after a waiting message was discarded: %v; want none (the head %s still holds the key)", got, m1.ID)
	}
	if n, err := p.DiscardParked(t.Context(), "billing", m1.ID); err != nil || n != 1 {
		t.Fatalf("discard the head %s: %d, %v; want 1", m1.ID, n, err)
	}
	if got := getParked(t, p, "billing", m2.ID); !got.RetryRequested || !got.Waiting || got.Behind != uuid.Nil {
		t.Fatalf("message %s once the head before it was discarded: retry %v, waiting %v behind %s; want its retry requested, first of its key",
			m2.ID, got.RetryRequested, got.Waiting, got.Behind)
	}
	if got := takeRetries(t, p, "billing", 10); !slices.Equal(got, []uuid.UUID{m2.ID}) {
		t.Fatalf("retries taken once the head was discarded: %v; want %s only, the key's next", got, m2.ID)
	}
	unpark(t, p, "billing", m2.ID)
	if id, ok := takeNextWaiting(t, p, "billing", "order-1"); !ok || id != m4.ID {
		t.Fatalf("next waiting message of order-1 once %s is applied: %s, %v; want %s", m2.ID, id, ok, m4.ID)
	}
}

func testParkedCountsOvertaken(t *testing.T, p ParkedTable) {
	m1, other := parkedMessage("order-1"), parkedMessage("order-2")
	park(t, p, "billing", m1, 5, "no such customer")
	park(t, p, "billing", other, 5, "no such customer")
	park(t, p, "shipping", m1, 5, "no address")
	for range 2 {
		if err := p.CountOvertaken(t.Context(), "billing", "order-1"); err != nil {
			t.Fatalf("count a message of order-1 applied past %s: %v", m1.ID, err)
		}
	}
	if err := p.CountOvertaken(t.Context(), "billing", "order-3"); err != nil {
		t.Fatalf("count a message of a key with nothing parked: %v", err)
	}
	if got := getParked(t, p, "billing", m1.ID); got.Overtaken != 2 {
		t.Fatalf("message %s after 2 later messages of its key were applied: overtaken %d; want 2", m1.ID, got.Overtaken)
	}
	if got := getParked(t, p, "billing", other.ID); got.Overtaken != 0 {
		t.Fatalf("message %s of another key: overtaken %d; want 0", other.ID, got.Overtaken)
	}
	if got := getParked(t, p, "shipping", m1.ID); got.Overtaken != 0 {
		t.Fatalf("message %s as another consumer parked it: overtaken %d; want 0", m1.ID, got.Overtaken)
	}
}

// testParkedBehindRacesTheLastUnpark runs the end of a retried key (unpark
// its last message, then look for the next) against a delivery of the key:
// the delivery is either not held (it comes after) or taken by the unparker,
// never left waiting behind nobody.
func testParkedBehindRacesTheLastUnpark(t *testing.T, p ParkedTable) {
	for i := range 30 {
		head, late := parkedMessage("order-1"), parkedMessage("order-1")
		park(t, p, "billing", head, 5, "failed")
		var (
			wg                   sync.WaitGroup
			heldBy               uuid.UUID
			taken                []uuid.UUID
			behindErr, unparkErr error
		)
		start := make(chan struct{})
		ctx := context.WithoutCancel(t.Context())
		wg.Go(func() {
			<-start
			heldBy, behindErr = p.ParkBehind(ctx, "billing", late)
		})
		wg.Go(func() {
			<-start
			id := head.ID
			for {
				if unparkErr = p.Unpark(ctx, "billing", id); unparkErr != nil {
					return
				}
				var (
					m  outbox.Message
					ok bool
				)
				if m, ok, unparkErr = p.TakeNextWaiting(ctx, "billing", "order-1"); unparkErr != nil || !ok {
					return
				}
				taken = append(taken, m.ID)
				id = m.ID
			}
		})
		close(start)
		wg.Wait()
		if behindErr != nil || unparkErr != nil {
			t.Fatalf("round %d: park behind: %v; unpark: %v", i, behindErr, unparkErr)
		}
		switch heldBy {
		case uuid.Nil:
			if len(taken) != 0 {
				t.Fatalf("round %d: message %s not held, yet the unparker took %v", i, late.ID, taken)
			}
		case head.ID:
			if !slices.Equal(taken, []uuid.UUID{late.ID}) {
				t.Fatalf("round %d: message %s held behind %s, and the unparker took %v; want it taken", i, late.ID, head.ID, taken)
			}
		default:
			t.Fatalf("round %d: message %s held behind %s; want %s or none", i, late.ID, heldBy, head.ID)
		}
		if _, err := p.GetParked(t.Context(), "billing", late.ID); !errors.Is(err, outbox.ErrNotFound) {
			t.Fatalf("round %d: message %s left parked after the race (held behind %s): %v", i, late.ID, heldBy, err)
		}
	}
}

func parkedMessage(key string) outbox.Message {
	return outbox.Message{
		ID: uuid.Must(uuid.NewV7()), Topic: "orders.created", Key: key, Payload: []byte(`{"n":1}`),
		Headers:   map[string]string{"content-type": "application/json", "traceparent": "00-abc-01"},
		CreatedAt: time.Now().UTC().Truncate(time.Second),
	}
}

func park(t *testing.T, p ParkedTable, consumer string, m outbox.Message, attempts int, reason string) {
	t.Helper()
	if err := p.Park(t.Context(), consumer, m, attempts, reason); err != nil {
		t.Fatalf("park message %s of %s: %v", m.ID, consumer, err)
	}
}

func getParked(t *testing.T, p ParkedTable, consumer string, id uuid.UUID) outbox.ParkedMessage {
	t.Helper()
	got, err := p.GetParked(t.Context(), consumer, id)
	if err != nil {
		t.Fatalf("get parked message %s of %q: %v", id, consumer, err)
	}
	return got
}

func sameMessage(t *testing.T, got, want outbox.Message) {
	t.Helper()
	if got.ID != want.ID || got.Topic != want.Topic || got.Key != want.Key || string(got.Payload) != string(want.Payload) ||
		!maps.Equal(got.Headers, want.Headers) || !got.CreatedAt.Equal(want.CreatedAt) {
		t.Fatalf("parked message %s comes back as %+v; want %+v", want.ID, got, want)
	}
}

func testParkKeepsTheMessage(t *testing.T, p ParkedTable) {
	m := parkedMessage("customer-7")
	before := time.Now().Add(-time.Minute) // the database's clock may differ a little
	park(t, p, "billing", m, 3, "no such customer")
	got := getParked(t, p, "billing", m.ID)
	sameMessage(t, got.Message, m)
	if got.Consumer != "billing" || got.Attempts != 3 || got.Error != "no such customer" || got.RetryRequested || got.ParkedAt.Before(before) {
		t.Fatalf("parked message %s: consumer %q, %d attempts, error %q, retry %v, parked at %v; want billing, 3, the handler's error, no retry, now",
			m.ID, got.Consumer, got.Attempts, got.Error, got.RetryRequested, got.ParkedAt)
	}
	if same := getParked(t, p, "", m.ID); same.Consumer != "billing" {
		t.Fatalf("get parked message %s of any consumer: consumer %q; want billing", m.ID, same.Consumer)
	}
	if _, err := p.GetParked(t.Context(), "shipping", m.ID); !errors.Is(err, outbox.ErrNotFound) {
		t.Fatalf("get message %s parked by billing, as shipping's: %v; want ErrNotFound", m.ID, err)
	}
	noHeaders := outbox.Message{ID: uuid.Must(uuid.NewV7()), Topic: "orders.created"}
	park(t, p, "billing", noHeaders, 1, "permanent")
	if got := getParked(t, p, "billing", noHeaders.ID); got.Headers != nil || got.Payload == nil || len(got.Payload) != 0 || !got.CreatedAt.IsZero() {
		t.Fatalf("parked message without headers, payload or creation time comes back as %+v", got.Message)
	}

	park(t, p, "billing", m, 5, "still no such customer")
	again := getParked(t, p, "billing", m.ID)
	sameMessage(t, again.Message, m)
	if again.Attempts != 5 || again.Error != "still no such customer" || again.ParkedAt.Before(got.ParkedAt) {
		t.Fatalf("message %s parked again: %d attempts, error %q, parked at %v (first %v); want the new attempts, error and time",
			m.ID, again.Attempts, again.Error, again.ParkedAt, got.ParkedAt)
	}
	park(t, p, "shipping", m, 2, "no address")
	if _, err := p.GetParked(t.Context(), "", m.ID); err == nil || errors.Is(err, outbox.ErrNotFound) {
		t.Fatalf("get message %s parked by two consumers, naming none: %v; want an error asking to name one", m.ID, err)
	}
	counts, err := p.ParkedCounts(t.Context())
	if err != nil || !maps.Equal(counts, map[string]int64{"billing": 2, "shipping": 1}) {
		t.Fatalf("parked counts: %v, %v; want billing 2, shipping 1", counts, err)
	}
}

func takeRetries(t *testing.T, p ParkedTable, consumer string, limit int) []uuid.UUID {
	t.Helper()
	msgs, err := p.TakeRetries(t.Context(), consumer, limit)
	if err != nil {
		t.Fatalf("take retries of %s: %v", consumer, err)
	}
	ids := make([]uuid.UUID, len(msgs))
	for i, m := range msgs {
		ids[i] = m.ID
	}
	slices.SortFunc(ids, func(a, b uuid.UUID) int { return slices.Compare(a[:], b[:]) })
	return ids
}

func requestRetry(t *testing.T, p ParkedTable, consumer string, want int, ids ...uuid.UUID) {
	t.Helper()
	n, err := p.RequestRetry(t.Context(), consumer, ids...)
	if err != nil || n != want {
		t.Fatalf("request retry of %s's %v: %d, %v; want %d", consumer, ids, n, err, want)
	}
}

func testParkedRetryTakenOnce(t *testing.T, p ParkedTable) {
	a, b, c, d := parkedMessage("k"), parkedMessage(""), parkedMessage(""), parkedMessage("")
	for _, m := range []outbox.Message{a, b, c} {
		park(t, p, "billing", m, 5, "failed")
	}
	park(t, p, "shipping", d, 5, "failed")
	if got := takeRetries(t, p, "billing", 10); len(got) != 0 {
		t.Fatalf("retries taken before any was requested: %v", got)
	}
	requestRetry(t, p, "billing", 1, a.ID, uuid.Must(uuid.NewV7()))
	if got := getParked(t, p, "billing", a.ID); !got.RetryRequested {
		t.Fatalf("message %s after its retry was requested: RetryRequested false", a.ID)
	}

	// Four processes of the consumer take at once: one gets the message.
	var (
		mu    sync.Mutex
		taken []uuid.UUID
		wg    sync.WaitGroup
	)
	start := make(chan struct{})
	for range 4 {
		wg.Go(func() {
			<-start
			msgs, err := p.TakeRetries(context.WithoutCancel(t.Context()), "billing", 10)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				t.Errorf("take retries: %v", err)
			}
			for _, m := range msgs {
				taken = append(taken, m.ID)
				sameMessage(t, m, a)
			}
		})
	}
	close(start)
	wg.Wait()
	if !slices.Equal(taken, []uuid.UUID{a.ID}) {
		t.Fatalf("four concurrent takers took %v; want message %s once", taken, a.ID)
	}
	if got := getParked(t, p, "billing", a.ID); got.RetryRequested {
		t.Fatalf("message %s after it was taken: RetryRequested still true; want it cleared (the message stays parked until unparked)", a.ID)
	}

	// It failed again: parked again, no process has it.
	park(t, p, "billing", a, 5, "failed again")

	// No ids: every parked message of the consumer, not another's.
	requestRetry(t, p, "billing", 3)
	first, second := takeRetries(t, p, "billing", 2), takeRetries(t, p, "billing", 2)
	if len(first) != 2 || len(second) != 1 || len(takeRetries(t, p, "billing", 2)) != 0 {
		t.Fatalf("retries of all of billing's 3 parked messages taken 2 at a time: %v then %v", first, second)
	}
	if got := getParked(t, p, "shipping", d.ID); got.RetryRequested {
		t.Fatalf("retrying billing's messages requested the retry of shipping's %s", d.ID)
	}

	// A retried message that fails again is parked again, its request
	// cleared.
	park(t, p, "billing", b, 5, "failed again")
	requestRetry(t, p, "billing", 1, b.ID)
	park(t, p, "billing", b, 5, "failed again")
	if got := takeRetries(t, p, "billing", 10); len(got) != 0 {
		t.Fatalf("retries taken after the requested message was parked again: %v; want none", got)
	}
	if _, err := p.RequestRetry(t.Context(), "", a.ID); err == nil {
		t.Fatalf("request a retry naming no consumer: no error")
	}
}

func testParkedUnparkDiscardList(t *testing.T, p ParkedTable) {
	var msgs []outbox.Message
	for range 5 {
		m := parkedMessage("")
		park(t, p, "billing", m, 5, "failed")
		msgs = append(msgs, m)
	}
	other := parkedMessage("")
	park(t, p, "shipping", other, 5, "failed")

	var listed []uuid.UUID
	after := uuid.Nil
	for {
		page, err := p.ListParked(t.Context(), "billing", after, 2)
		if err != nil {
			t.Fatalf("list parked after %s: %v", after, err)
		}
		for _, m := range page {
			listed = append(listed, m.ID)
		}
		if len(page) < 2 {
			break
		}
		after = page[len(page)-1].ID
	}
	want := make([]uuid.UUID, len(msgs))
	for i, m := range msgs {
		want[i] = m.ID
	}
	if !slices.Equal(listed, want) {
		t.Fatalf("billing's parked messages listed 2 at a time: %v; want %v in id order", listed, want)
	}
	all, err := p.ListParked(t.Context(), "", uuid.Nil, 100)
	if err != nil || len(all) != 6 || all[5].ID != other.ID || all[5].Consumer != "shipping" {
		t.Fatalf("list of every consumer's parked messages: %d, %v; want 6, shipping's last", len(all), err)
	}

	if err := p.Unpark(t.Context(), "billing", msgs[0].ID); err != nil {
		t.Fatalf("unpark %s: %v", msgs[0].ID, err)
	}
	if _, err := p.GetParked(t.Context(), "billing", msgs[0].ID); !errors.Is(err, outbox.ErrNotFound) {
		t.Fatalf("get unparked message %s: %v; want ErrNotFound", msgs[0].ID, err)
	}
	if err := p.Unpark(t.Context(), "billing", msgs[0].ID); err != nil {
		t.Fatalf("unpark %s twice: %v; want nil", msgs[0].ID, err)
	}
	if n, err := p.DiscardParked(t.Context(), "billing", msgs[1].ID, other.ID, uuid.Must(uuid.NewV7())); err != nil || n != 1 {
		t.Fatalf("discard one of billing's parked messages, shipping's and an unknown one as billing: %d, %v; want 1", n, err)
	}
	if n, err := p.DiscardParked(t.Context(), "billing"); err != nil || n != 0 {
		t.Fatalf("discard with no ids: %d, %v; want 0: discarding needs the ids", n, err)
	}
	if _, err := p.DiscardParked(t.Context(), "", other.ID); err == nil {
		t.Fatalf("discard naming no consumer: no error")
	}
	counts, err := p.ParkedCounts(t.Context())
	if err != nil || !maps.Equal(counts, map[string]int64{"billing": 3, "shipping": 1}) {
		t.Fatalf("parked counts after an unpark and a discard: %v, %v; want billing 3, shipping 1", counts, err)
	}
}
