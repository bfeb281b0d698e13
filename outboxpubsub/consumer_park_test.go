package outboxpubsub_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/outboxpubsub"
	"github.com/go-outbox/outbox/publishertest"
)

// A message whose handler keeps failing is parked after MaxDeliver
// attempts: published to the park topic with its data, its attributes and
// why, where from and by whom, logged at ERROR with its id, and
// acknowledged; the other messages go on. A consumer of the park topic's
// subscription reads it back as the same outbox message.
func TestAMessageThatKeepsFailingIsParkedOnTheParkTopicAfterMaxDeliverAttempts(t *testing.T) {
	t.Parallel()
	srv := server(t, nil)
	createTopic(t, srv, "orders")
	createTopic(t, srv, "orders.parked")
	createSubscription(t, srv, "billing", "orders", subOptions{})
	createSubscription(t, srv, "billing.parked", "orders.parked", subOptions{})
	batch := publishertest.Messages("orders.created", 3)
	batch[0].Key = "order-7"
	publishTo(t, srv, "orders", false, batch...)
	c := newClient(t, srv)
	r := startConsume(t, c, fastRetries(outboxpubsub.ConsumerConfig{Subscription: "billing", MaxDeliver: 3, ParkTopic: "orders.parked"}),
		func(_ context.Context, m outbox.Message, _ int) error {
			if m.ID == batch[0].ID {
				return errors.New("no such customer (injected)")
			}
			return nil
		})
	r.WaitHandled(t, batch[1], batch[2])
	parked := startConsume(t, c, outboxpubsub.ConsumerConfig{Subscription: "billing.parked"}, nil)
	parked.WaitHandled(t, batch[0])
	r.WaitFor(t, "the parked message acknowledged", func() bool { return acks(srv, batch[0].ID) >= 1 })
	if n := r.TriesOf(batch[0].ID); n != 3 {
		t.Errorf("the failing message was tried %d times, want MaxDeliver = 3", n)
	}
	got := parked.HandledMessage(batch[0].ID)
	if got.Topic != batch[0].Topic || got.Key != "order-7" || string(got.Payload) != string(batch[0].Payload) || got.Headers["x-seq"] != batch[0].Headers["x-seq"] {
		t.Errorf("parked message read back as %+v; want the fields of message %s", got, batch[0].ID)
	}
	for attr, want := range map[string]string{
		outboxpubsub.AttrParkedBy:     "billing",
		outboxpubsub.AttrParkedReason: "parked after 3 attempt(s): no such customer (injected)",
	} {
		if got.Headers[attr] != want {
			t.Errorf("parked message: attribute %s = %q, want %q", attr, got.Headers[attr], want)
		}
	}
	if from := got.Headers[outboxpubsub.AttrParkedFrom]; !strings.HasPrefix(from, subName("billing")+"/") {
		t.Errorf("parked message: attribute %s = %q, want the subscription and the Pub/Sub message id", outboxpubsub.AttrParkedFrom, from)
	}
	if !r.Logs.Has(slog.LevelError, "parked", batch[0].ID.String(), "no such customer") {
		t.Errorf("no ERROR log naming the parked message; logs:\n%s", r.Logs)
	}
}

// A missing park topic refuses the copy: the message stays unacknowledged
// (never acknowledged without its copy), an ERROR log names the park topic
// and the fix, and once the topic exists the message is parked.
func TestAMissingParkTopicLeavesTheMessageUnacknowledgedUntilItIsCreated(t *testing.T) {
	t.Parallel()
	srv := server(t, nil)
	createTopic(t, srv, "orders")
	createSubscription(t, srv, "billing", "orders", subOptions{})
	m := publishertest.Messages("orders.created", 1)[0]
	publishTo(t, srv, "orders", false, m)
	r := startConsume(t, newClient(t, srv), fastRetries(outboxpubsub.ConsumerConfig{Subscription: "billing", MaxDeliver: 2, ParkTopic: "orders.parked"}),
		func(context.Context, outbox.Message, int) error { return errors.New("no such customer (injected)") })
	r.WaitFor(t, "an ERROR log naming the park topic and the fix", func() bool {
		return r.Logs.Has(slog.LevelError, "park", "orders.parked", "gcloud pubsub topics create orders.parked")
	})
	// The client sends acknowledgements every 100ms: one sent with the
	// park failing would reach the fake while the park keeps failing.
	failingSince := time.Now()
	r.WaitFor(t, "the park failing for 500ms", func() bool {
		return time.Since(failingSince) > 500*time.Millisecond && r.CountLogs(slog.LevelDebug, "still cannot park") >= 2
	})
	if n := acks(srv, m.ID); n != 0 {
		t.Fatalf("message acknowledged %d times while its park failed; want 0", n)
	}
	createTopic(t, srv, "orders.parked")
	r.WaitFor(t, "the message parked once the topic exists", func() bool { return len(stored(srv, "orders.parked")) == 1 })
	r.WaitFor(t, "the message acknowledged", func() bool { return acks(srv, m.ID) == 1 })
	if n := r.CountLogs(slog.LevelError, "gcloud pubsub topics create"); n != 1 {
		t.Errorf("%d ERROR logs of the missing park topic; want 1 within ConfigErrorLogInterval", n)
	}
}

// A message without an outbox id (published by something else than the
// Publisher) cannot be handled: it is parked on the park topic at once,
// with why, and acknowledged, and the messages behind it go on.
func TestAMessageThatIsNoOutboxMessageIsParkedAtOnce(t *testing.T) {
	t.Parallel()
	srv := server(t, nil)
	createTopic(t, srv, "orders")
	createTopic(t, srv, "orders.parked")
	createSubscription(t, srv, "billing", "orders", subOptions{})
	foreign := srv.Publish(fullName("orders"), []byte(`{"order":42}`), map[string]string{"status": "paid"})
	m := publishertest.Messages("orders.created", 1)[0]
	publishTo(t, srv, "orders", false, m)
	r := startConsume(t, newClient(t, srv), outboxpubsub.ConsumerConfig{Subscription: "billing", ParkTopic: "orders.parked"}, nil)
	r.WaitHandled(t, m)
	r.WaitFor(t, "the foreign message parked", func() bool { return len(stored(srv, "orders.parked")) == 1 })
	r.WaitFor(t, "the foreign message acknowledged", func() bool { return srv.Message(foreign).Acks == 1 })
	p := stored(srv, "orders.parked")[0]
	if p.Attributes["status"] != "paid" || string(p.Data) != `{"order":42}` || !strings.Contains(p.Attributes[outboxpubsub.AttrParkedReason], "not an outbox message") {
		t.Errorf("parked as data %q attributes %v; want the message with a reason saying it is no outbox message", p.Data, p.Attributes)
	}
	if !r.Logs.Has(slog.LevelError, "not an outbox message", foreign) {
		t.Errorf("no ERROR log naming Pub/Sub message %s; logs:\n%s", foreign, r.Logs)
	}
	if n := len(r.HandledIDs()); n != 1 {
		t.Errorf("the handler was given %d messages, want only the outbox one", n)
	}
}

// Without a park topic, a store or a dead-letter policy, a parked message
// has nowhere to go: it is acknowledged, and an ERROR log names it and
// what to set.
func TestWithNowhereToParkAMessageIsHandedBackNotDroppedWithAnErrorNamingIt(t *testing.T) {
	t.Parallel()
	srv := server(t, nil)
	createTopic(t, srv, "orders")
	createSubscription(t, srv, "billing", "orders", subOptions{})
	m := publishertest.Messages("orders.created", 1)[0]
	publishTo(t, srv, "orders", false, m)
	r := startConsume(t, newClient(t, srv), fastRetries(outboxpubsub.ConsumerConfig{Subscription: "billing", MaxDeliver: 2}),
		func(context.Context, outbox.Message, int) error { return errors.New("no such customer (injected)") })
	r.WaitFor(t, "the message delivered again after it had nowhere to park", func() bool { return r.TriesOf(m.ID) > 2 })
	if n := acks(srv, m.ID); n != 0 {
		t.Errorf("message acknowledged %d times with nowhere to keep it; want none (handed back, not dropped)", n)
	}
	if !r.Logs.Has(slog.LevelError, "handed back", m.ID.String(), "ParkTopic") {
		t.Errorf("no ERROR log naming the message %s and ParkTopic; logs:\n%s", m.ID, r.Logs)
	}
}

// On a subscription with a dead-letter policy and no park topic, a parked
// message is handed back, and Pub/Sub moves it to the dead-letter topic
// after its delivery attempts; the attempts count Pub/Sub's deliveries.
func TestWithADeadLetterPolicyAndNoParkTopicPubSubDeadLettersAParkedMessage(t *testing.T) {
	t.Parallel()
	srv := server(t, nil)
	createTopic(t, srv, "orders")
	createTopic(t, srv, "orders.dead")
	createSubscription(t, srv, "billing", "orders", subOptions{deadLetter: "orders.dead"})
	createSubscription(t, srv, "billing.dead", "orders.dead", subOptions{})
	m := publishertest.Messages("orders.created", 1)[0]
	publishTo(t, srv, "orders", false, m)
	c := newClient(t, srv)
	r := startConsume(t, c, fastRetries(outboxpubsub.ConsumerConfig{Subscription: "billing", MaxDeliver: 2}),
		func(context.Context, outbox.Message, int) error { return errors.New("no such customer (injected)") })
	dead := startConsume(t, c, outboxpubsub.ConsumerConfig{Subscription: "billing.dead"}, nil)
	dead.WaitHandled(t, m)
	if n := acks(srv, m.ID); n != 0 {
		t.Errorf("message acknowledged %d times; want none, Pub/Sub dead-letters it", n)
	}
	// The first delivery takes two attempts in place (MaxDeliver 2); the
	// next ones, up to the policy's 5, one each, parked again at once.
	if n := r.TriesOf(m.ID); n != 6 {
		t.Errorf("the handler was given the message %d times; want 6 (2 on the first delivery, then one on each of the 4 others)", n)
	}
}

// memParked is a ParkStore in memory, as the inbox tables keep parked
// messages, for Consume's Parked.
type memParked struct {
	mu     sync.Mutex
	parked map[uuid.UUID]*parkedEntry
	parks  atomic.Int32
}

type parkedEntry struct {
	consumer, reason string
	m                outbox.Message
	attempts         int
	retry            bool
}

func (p *memParked) Park(_ context.Context, consumer string, m outbox.Message, attempts int, reason string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.parked == nil {
		p.parked = map[uuid.UUID]*parkedEntry{}
	}
	p.parked[m.ID] = &parkedEntry{consumer: consumer, m: m, attempts: attempts, reason: reason}
	p.parks.Add(1)
	return nil
}

func (p *memParked) TakeRetries(_ context.Context, consumer string, limit int) ([]outbox.Message, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []outbox.Message
	for _, e := range p.parked {
		if e.consumer == consumer && e.retry && len(out) < limit {
			e.retry = false
			out = append(out, e.m)
		}
	}
	return out, nil
}

func (p *memParked) Unpark(_ context.Context, consumer string, id uuid.UUID) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if e := p.parked[id]; e != nil && e.consumer == consumer {
		delete(p.parked, id)
	}
	return nil
}

// get returns a copy of the parked message id, if any.
func (p *memParked) get(id uuid.UUID) (parkedEntry, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	e := p.parked[id]
	if e == nil {
		return parkedEntry{}, false
	}
	return *e, true
}

// requestRetry is what `outbox inbox parked retry` does.
func (p *memParked) requestRetry(id uuid.UUID) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.parked[id].retry = true
}

// With Parked set, a message that keeps failing goes to the consumer's
// database under Name (the subscription's id by default) instead of the
// park topic, is acknowledged, and comes back to the handler when an
// operator asks for its retry.
func TestAMessageThatKeepsFailingGoesToParkedWhenSetAndIsRetriedFromThere(t *testing.T) {
	t.Parallel()
	srv := server(t, nil)
	createTopic(t, srv, "orders")
	createTopic(t, srv, "orders.parked")
	createSubscription(t, srv, "billing", "orders", subOptions{})
	m := publishertest.Messages("orders.created", 1)[0]
	publishTo(t, srv, "orders", false, m)
	store := &memParked{}
	var fixed atomic.Bool
	r := startConsume(t, newClient(t, srv), fastRetries(outboxpubsub.ConsumerConfig{Subscription: "billing", MaxDeliver: 2, Parked: store, ParkTopic: "orders.parked"}),
		func(context.Context, outbox.Message, int) error {
			if !fixed.Load() {
				return errors.New("no such customer (injected)")
			}
			return nil
		})
	r.WaitFor(t, "the message parked in the store", func() bool { _, ok := store.get(m.ID); return ok })
	r.WaitFor(t, "the message acknowledged", func() bool { return acks(srv, m.ID) == 1 })
	e, _ := store.get(m.ID)
	if e.consumer != "billing" || e.attempts != 2 || !strings.Contains(e.reason, "no such customer") {
		t.Errorf("parked as %q after %d attempts (%q); want under the name billing after MaxDeliver 2 attempts with the handler's error", e.consumer, e.attempts, e.reason)
	}
	if n := len(stored(srv, "orders.parked")); n != 0 {
		t.Errorf("%d messages on the park topic; want none when Parked is set", n)
	}
	if r.HandledCount(m.ID) != 0 {
		t.Fatalf("the handler succeeded with the message before its retry")
	}

	fixed.Store(true)
	store.requestRetry(m.ID)
	r.WaitHandled(t, m)
	r.WaitFor(t, "the message unparked", func() bool { _, ok := store.get(m.ID); return !ok })
	if n := store.parks.Load(); n != 1 {
		t.Errorf("the message was parked %d times, want once", n)
	}
}
