package storetest

import (
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/outboxdriver"
)

func init() {
	cases = append(cases,
		testCase{"a paused topic's messages are not claimed, keep their schedule, and are claimed again once it is resumed; a message the relay postpones for the pause, or left by a relay late to see a resume, is listed and moved back", testPausedTopic},
	)
	keyOrderCases = append(keyOrderCases,
		testCase{"in key order, a paused topic's message holds the rest of its key, other topics' keys flow on, and resuming moves back the rest of the key that a relay's postponement moved with it", testPausedTopicKeyOrder},
	)
}

// pauser returns the store's TopicPauser, or skips the case.
func (s *suite) pauser(t *testing.T) outboxdriver.TopicPauser {
	t.Helper()
	p, ok := s.h.Store.(outboxdriver.TopicPauser)
	if !ok {
		t.Skip("the store cannot pause topics (outboxdriver.TopicPauser)")
	}
	return p
}

// pausedTopics lists the paused topics by name.
func pausedTopics(t *testing.T, p outboxdriver.TopicPauser) map[string]outboxdriver.PausedTopic {
	t.Helper()
	list, err := p.PausedTopics(t.Context())
	if err != nil {
		t.Fatalf("PausedTopics: %v", err)
	}
	byTopic := map[string]outboxdriver.PausedTopic{}
	for _, pt := range list {
		byTopic[pt.Topic] = pt
	}
	return byTopic
}

// postponeForPause settles claimed as a relay does a message of a paused
// topic: a retry of PauseShift that counts no attempt; through the
// key-ordered store if ordered.
func (s *suite) postponeForPause(t *testing.T, ordered bool, token uuid.UUID, claimed ...outbox.Message) {
	t.Helper()
	settle := outboxdriver.Settlement{Token: token}
	for _, m := range claimed {
		settle.Retry = append(settle.Retry, outboxdriver.Retry{ID: m.ID, Delay: outboxdriver.PauseShift, Error: "topic paused", Unsent: true})
	}
	if ordered {
		s.settleOrdered(t, settle)
	} else {
		s.exchange(t, settle, outboxdriver.Claim{})
	}
	if s.held() {
		s.waitNoneInFlight(t)
	}
}

func testPausedTopic(t *testing.T, s *suite) {
	p := s.pauser(t)
	ctx := t.Context()
	p1 := &outbox.Message{Topic: "mail", Key: "p1", Payload: []byte("1")}
	p2 := &outbox.Message{Topic: "mail", Key: "p2", Payload: []byte("2")}
	later := &outbox.Message{Topic: "mail", Key: "p3", Payload: []byte("3"), AvailableAt: s.now(t).Add(time.Hour)}
	other := &outbox.Message{Topic: "orders", Key: "o1", Payload: []byte("o")}
	s.write(t, p1, p2, later, other)
	scheduled := s.get(t, later.ID).AvailableAt

	moved, err := p.PauseTopic(ctx, "mail", "alice", "the mail gateway is down")
	if err != nil || moved != 3 {
		t.Fatalf("PauseTopic(mail) = %d, %v; want its 3 pending messages moved", moved, err)
	}
	token, _ := s.claimIDs(t, 10, longLease, other.ID)
	s.exchange(t, outboxdriver.Settlement{Token: token, Published: []uuid.UUID{other.ID}}, outboxdriver.Claim{})
	if wait, ok := s.nextDue(t); !ok || wait < time.Until(time.Now().AddDate(100, 0, 0)) {
		t.Fatalf("NextDue with only paused messages left = %v, %v; want pending, due in centuries", wait, ok)
	}
	if names, err := p.PausedTopicNames(ctx); err != nil || len(names) != 1 || names[0] != "mail" {
		t.Fatalf("PausedTopicNames = %v, %v; want [mail]", names, err)
	}
	got := pausedTopics(t, p)
	if pt := got["mail"]; len(got) != 1 || pt.Resumed || pt.Messages != 3 || pt.By != "alice" || pt.Reason != "the mail gateway is down" || pt.At.IsZero() {
		t.Fatalf("PausedTopics = %+v; want mail, paused by alice for the reason given, with 3 messages", got)
	}

	// Written after the pause: the store claims it; the relay, which knows
	// the topic is paused, postpones it by PauseShift.
	p4 := &outbox.Message{Topic: "mail", Key: "p4", Payload: []byte("4")}
	s.write(t, p4)
	token, claimed := s.claimIDs(t, 10, longLease, p4.ID)
	s.postponeForPause(t, false, token, claimed...)
	if n := pausedTopics(t, p)["mail"].Messages; n != 4 {
		t.Fatalf("after the relay postponed a new message of the paused topic, it lists %d messages; want 4", n)
	}
	if again, err := p.PauseTopic(ctx, "mail", "bob", "still down"); err != nil || again != 0 {
		t.Fatalf("PauseTopic(mail) again = %d, %v; want nothing more to move", again, err)
	}

	back, err := p.ResumeTopic(ctx, "mail")
	if err != nil || back != 4 {
		t.Fatalf("ResumeTopic(mail) = %d, %v; want its 4 messages moved back", back, err)
	}
	if got := pausedTopics(t, p); len(got) != 0 {
		t.Fatalf("after the resume PausedTopics = %+v; want none", got)
	}
	if names, err := p.PausedTopicNames(ctx); err != nil || len(names) != 0 {
		t.Fatalf("after the resume PausedTopicNames = %v, %v; want none", names, err)
	}
	if at := s.get(t, later.ID).AvailableAt; !at.Equal(scheduled) {
		t.Fatalf("the scheduled message is due at %v after pause and resume; want its schedule kept, %v", at, scheduled)
	}
	token, claimed = s.claim(t, 10, longLease)
	if !sameIDs(ids(claimed), []uuid.UUID{p1.ID, p2.ID, p4.ID}) {
		t.Fatalf("after the resume the claim returned %v; want the due messages of mail %v", ids(claimed), []uuid.UUID{p1.ID, p2.ID, p4.ID})
	}
	s.exchange(t, outboxdriver.Settlement{Token: token, Published: ids(claimed)}, outboxdriver.Claim{})

	// A relay that had not yet seen the resume postpones a message after
	// it: the topic is listed as resumed with a message left, and moving
	// back what no pause holds sets it free.
	p5 := &outbox.Message{Topic: "mail", Key: "p5", Payload: []byte("5")}
	s.write(t, p5)
	token, claimed = s.claimIDs(t, 10, longLease, p5.ID)
	s.postponeForPause(t, false, token, claimed...)
	if pt := pausedTopics(t, p)["mail"]; !pt.Resumed || pt.Messages != 1 {
		t.Fatalf("a message postponed after the resume is listed as %+v; want mail, resumed, 1 message", pt)
	}
	if n, err := p.MoveBackUnpaused(ctx); err != nil || n != 1 {
		t.Fatalf("MoveBackUnpaused = %d, %v; want the 1 message moved back", n, err)
	}
	s.claimIDs(t, 10, longLease, p5.ID)
}

func testPausedTopicKeyOrder(t *testing.T, s *suite) {
	p := s.pauser(t)
	ctx := t.Context()
	head := &outbox.Message{Topic: "mail", Key: "k", Payload: []byte("1")}
	behind := &outbox.Message{Topic: "orders", Key: "k", Payload: []byte("2")}
	free := &outbox.Message{Topic: "orders", Key: "j", Payload: []byte("3")}
	s.write(t, head, behind, free)
	if _, err := p.PauseTopic(ctx, "mail", "alice", ""); err != nil {
		t.Fatal(err)
	}
	token := s.orderedClaim(t, free)
	s.settleOrdered(t, outboxdriver.Settlement{Token: token, Published: []uuid.UUID{free.ID}})
	if n, err := p.ResumeTopic(ctx, "mail"); err != nil || n != 1 {
		t.Fatalf("ResumeTopic(mail) = %d, %v; want 1 moved back", n, err)
	}
	token = s.orderedClaim(t, head, behind)
	s.settleOrdered(t, outboxdriver.Settlement{Token: token, Published: []uuid.UUID{head.ID, behind.ID}})

	// A key's run claimed before the relay saw the pause: the relay
	// postpones the paused message and the rest of its key, which the
	// store moves with it; the resume moves both back, in order.
	a := &outbox.Message{Topic: "mail", Key: "m", Payload: []byte("a")}
	b := &outbox.Message{Topic: "orders", Key: "m", Payload: []byte("b")}
	s.write(t, a, b)
	if _, err := p.PauseTopic(ctx, "mail", "alice", ""); err != nil {
		t.Fatal(err)
	}
	// Both are due again: the pause came first here, so move a back by
	// hand to play a relay that claimed before it.
	if _, err := p.ResumeTopic(ctx, "mail"); err != nil {
		t.Fatal(err)
	}
	token = s.orderedClaim(t, a, b)
	if _, err := p.PauseTopic(ctx, "mail", "alice", ""); err != nil {
		t.Fatal(err)
	}
	s.postponeForPause(t, true, token, s.get(t, a.ID), s.get(t, b.ID))
	if got := pausedTopics(t, p); got["mail"].Messages != 1 || !got["orders"].Resumed || got["orders"].Messages != 1 {
		t.Fatalf("PausedTopics = %+v; want mail with 1 message, and orders (not paused) with the 1 held behind it", got)
	}
	if n, err := p.MoveBackUnpaused(ctx); err != nil || n != 0 {
		t.Fatalf("MoveBackUnpaused while mail is paused = %d, %v; want nothing moved: b is held behind a", n, err)
	}
	if _, claimed := s.claim(t, 10, longLease); len(claimed) != 0 {
		t.Fatalf("claimed %v while the key's head is paused; want nothing", ids(claimed))
	}
	if n, err := p.ResumeTopic(ctx, "mail"); err != nil || n != 2 {
		t.Fatalf("ResumeTopic(mail) = %d, %v; want a and b moved back", n, err)
	}
	token = s.orderedClaim(t, a, b)
	s.settleOrdered(t, outboxdriver.Settlement{Token: token, Published: []uuid.UUID{a.ID, b.ID}})

	// The relay postpones only the head it claimed: the store moves the
	// rest of the key, which it did not claim, behind it (as for any
	// retry in key order), and the resume moves them back too.
	h := &outbox.Message{Topic: "mail", Key: "n", Payload: []byte("h")}
	f1 := &outbox.Message{Topic: "orders", Key: "n", Payload: []byte("f1")}
	f2 := &outbox.Message{Topic: "invoices", Key: "n", Payload: []byte("f2")}
	s.write(t, h, f1, f2)
	token = s.orderedClaimN(t, 1, h)
	s.postponeForPause(t, true, token, s.get(t, h.ID))
	for _, f := range []*outbox.Message{f1, f2} {
		if at := s.get(t, f.ID).AvailableAt; at.Before(outboxdriver.PausedFrom) {
			t.Fatalf("message %s behind the postponed head is due at %v; want it moved behind the head, into the paused range", f.ID, at)
		}
	}
	if n, err := p.ResumeTopic(ctx, "mail"); err != nil || n != 3 {
		t.Fatalf("ResumeTopic(mail) = %d, %v; want the head and the 2 behind it moved back", n, err)
	}
	s.orderedClaim(t, h, f1, f2)
}

// sameIDs reports whether got and want hold the same ids, in any order.
func sameIDs(got, want []uuid.UUID) bool {
	if len(got) != len(want) {
		return false
	}
	seen := map[uuid.UUID]bool{}
	for _, id := range got {
		seen[id] = true
	}
	for _, id := range want {
		if !seen[id] {
			return false
		}
	}
	return len(seen) == len(want)
}
