package relaytest

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/outboxdriver"
)

// pauser returns the harness's store as a TopicPauser, or skips the test.
func pauser(t *testing.T, h Harness) outboxdriver.TopicPauser {
	t.Helper()
	p, ok := h.Store.(outboxdriver.TopicPauser)
	if !ok {
		t.Skip("the store cannot pause topics (outboxdriver.TopicPauser)")
	}
	return p
}

// pausedCount is how many messages of topic are out of the due range.
func pausedCount(ctx context.Context, p outboxdriver.TopicPauser, topic string) int64 {
	list, err := p.PausedTopics(ctx)
	if err != nil {
		return -1
	}
	for _, pt := range list {
		if pt.Topic == topic {
			return pt.Messages
		}
	}
	return 0
}

// testPausedTopic pauses a topic with messages pending, runs a relay, writes
// more of the topic after the pause, and checks that none of the topic is
// published while the other topics flow (in key order, a key whose message
// of the paused topic comes first waits behind it), and that the resume
// publishes them all, in each key's order.
func testPausedTopic(t *testing.T, h Harness, store outboxdriver.Store, keyOrder bool) {
	ctx := context.Background()
	p := pauser(t, h)
	first := &outbox.Message{Topic: "mail", Key: "k", Payload: []byte("mail k")}
	behind := &outbox.Message{Topic: "orders", Key: "k", Payload: []byte("orders k")}
	other := &outbox.Message{Topic: "orders", Key: "j", Payload: []byte("orders j")}
	if err := h.Write(ctx, true, first, behind, other); err != nil {
		t.Fatal(err)
	}
	if n, err := p.PauseTopic(ctx, "mail", "relaytest", "testing"); err != nil || n != 1 {
		t.Fatalf("PauseTopic(mail) = %d, %v; want 1 moved", n, err)
	}
	rec := NewRecorder()
	StartRelay(t, store, rec, outbox.Config{PauseCheckInterval: 10 * time.Millisecond})
	// Written after the pause: the store hands it to the relay, which
	// postpones it; a message of another topic written after it shows
	// that the relay went past it.
	late := &outbox.Message{Topic: "mail", Key: "z", Payload: []byte("mail z")}
	after := &outbox.Message{Topic: "orders", Key: "y", Payload: []byte("orders y")}
	if err := h.Write(ctx, true, late); err != nil {
		t.Fatal(err)
	}
	h.Notify()
	rec.WaitFor(t, 10*time.Second, "the message written after the pause postponed by the relay", func() bool {
		return pausedCount(ctx, p, "mail") == 2
	})
	if err := h.Write(ctx, true, after); err != nil {
		t.Fatal(err)
	}
	h.Notify()
	want := []*outbox.Message{other, after}
	if !keyOrder {
		want = append(want, behind)
	}
	rec.WaitFor(t, 10*time.Second, "the other topics published", func() bool {
		for _, m := range want {
			if rec.Count(m.ID) == 0 {
				return false
			}
		}
		return true
	})
	for _, m := range []*outbox.Message{first, late} {
		if rec.Count(m.ID) != 0 {
			t.Fatalf("message %s of the paused topic was published", m.ID)
		}
	}
	if keyOrder && rec.Count(behind.ID) != 0 {
		t.Fatalf("in key order, message %s overtook the paused message before it in key k", behind.ID)
	}

	if n, err := p.ResumeTopic(ctx, "mail"); err != nil || n < 2 {
		t.Fatalf("ResumeTopic(mail) = %d, %v; want its 2 messages (and what waits behind them) moved back", n, err)
	}
	h.Notify()
	rec.WaitFor(t, 10*time.Second, "the paused messages published after the resume", func() bool {
		return rec.Count(first.ID) == 1 && rec.Count(late.ID) == 1 && rec.Count(behind.ID) == 1
	})
	if keyOrder {
		order := rec.Order()
		if slices.Index(order, first.ID) > slices.Index(order, behind.ID) {
			t.Fatalf("key k published out of order after the resume: %v; want %s before %s", order, first.ID, behind.ID)
		}
	}
	if n := pausedCount(ctx, p, "mail"); n != 0 {
		t.Fatalf("after the resume %d messages of mail are still out of the due range", n)
	}
}

// timedPublisher records when each message was published.
type timedPublisher struct {
	*Recorder
	mu sync.Mutex
	at map[uuid.UUID]time.Time
}

func (p *timedPublisher) Publish(ctx context.Context, batch []outbox.Message) []error {
	errs := p.Recorder.Publish(ctx, batch)
	now := time.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, m := range batch {
		if errs[i] == nil {
			p.at[m.ID] = now
		}
	}
	return errs
}

// testTopicRateLimit runs a relay whose config limits one topic and checks
// that the topic never went faster than its limit (a second's worth at
// once, then the rate), measured from the relay's start, that the other
// topic was not held up, and that every message went out in the end.
func testTopicRateLimit(t *testing.T, h Harness) {
	ctx := context.Background()
	const rate = 40.0
	slow := make([]*outbox.Message, 100)
	for i := range slow {
		slow[i] = newMessage("slow", i)
	}
	fast := make([]*outbox.Message, 20)
	for i := range fast {
		fast[i] = newMessage("fast", i)
	}
	if err := h.Write(ctx, true, append(slow, fast...)...); err != nil {
		t.Fatal(err)
	}
	pub := &timedPublisher{Recorder: NewRecorder(), at: map[uuid.UUID]time.Time{}}
	start := time.Now()
	StartRelay(t, h.Store, pub, outbox.Config{TopicRateLimits: map[string]float64{"slow": rate}})
	// Counted by the times recorded, which come after the Recorder's own
	// count: waiting on that, the last batch's times could be missing.
	pub.WaitFor(t, 20*time.Second, "every message published", func() bool {
		pub.mu.Lock()
		defer pub.mu.Unlock()
		return len(pub.at) == len(slow)+len(fast)
	})

	pub.mu.Lock()
	defer pub.mu.Unlock()
	var times []time.Time
	for _, m := range slow {
		times = append(times, pub.at[m.ID])
	}
	slices.SortFunc(times, func(a, b time.Time) int { return a.Compare(b) })
	// By the time the n-th message of the topic went out, the limit
	// allowed at most rate (the burst) plus rate a second since the start.
	for n, at := range times {
		if allowed := rate + rate*at.Sub(start).Seconds(); float64(n+1) > allowed+1 {
			t.Fatalf("message %d of the limited topic went out %v after the start; at %g a second (a second's burst) at most %.1f could have", n+1, at.Sub(start), rate, allowed)
		}
	}
	lastFast := time.Time{}
	for _, m := range fast {
		if at := pub.at[m.ID]; at.After(lastFast) {
			lastFast = at
		}
	}
	if !lastFast.Before(times[len(times)-1]) {
		t.Fatalf("the unlimited topic's last message went out at %v, after the limited topic's last at %v: it was held up", lastFast.Sub(start), times[len(times)-1].Sub(start))
	}
}

// testLateSeenResume runs a relay that reads the paused topics once an
// hour, resumes the topic it saw paused, and writes a message of it: the
// relay postpones it for a pause that has ended, and must then see the
// resume and move it back, so that it is published.
func testLateSeenResume(t *testing.T, h Harness) {
	ctx := context.Background()
	p := pauser(t, h)
	if _, err := p.PauseTopic(ctx, "mail", "relaytest", ""); err != nil {
		t.Fatal(err)
	}
	seen := &outbox.Message{Topic: "orders", Payload: []byte("seen")}
	if err := h.Write(ctx, true, seen); err != nil {
		t.Fatal(err)
	}
	rec := NewRecorder()
	StartRelay(t, h.Store, rec, outbox.Config{PauseCheckInterval: time.Hour})
	// Once it published a message, the relay has read the paused topics.
	rec.WaitFor(t, 10*time.Second, "a first message published", func() bool { return rec.Count(seen.ID) == 1 })
	if _, err := p.ResumeTopic(ctx, "mail"); err != nil {
		t.Fatal(err)
	}
	late := &outbox.Message{Topic: "mail", Payload: []byte("late")}
	if err := h.Write(ctx, true, late); err != nil {
		t.Fatal(err)
	}
	h.Notify()
	rec.WaitFor(t, 10*time.Second, "the message of the resumed topic published", func() bool { return rec.Count(late.ID) == 1 })
}
