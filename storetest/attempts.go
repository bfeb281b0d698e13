package storetest

import (
	"fmt"
	"testing"

	"github.com/google/uuid"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/outboxdriver"
)

func init() {
	cases = append(cases,
		testCase{"the attempts history keeps the last attempts of each message, a newer record of one attempt replacing the older, purges those of messages gone and forgets those asked", testAttemptsHistory},
	)
}

func testAttemptsHistory(t *testing.T, s *suite) {
	rec, ok := s.h.Store.(outboxdriver.AttemptRecorder)
	if !ok {
		t.Skip("the store keeps no history of attempts (outboxdriver.AttemptRecorder)")
	}
	ctx := t.Context()
	kept, gone := newMessage("history"), newMessage("history")
	s.write(t, kept, gone)
	attempt := func(m *outbox.Message, n int, outcome outboxdriver.AttemptOutcome, class outboxdriver.AttemptClass) outboxdriver.Attempt {
		return outboxdriver.Attempt{MessageID: m.ID, Number: n, Outcome: outcome, Class: class, Error: fmt.Sprintf("failure %d of %s", n, m.ID)}
	}
	var first, second []outboxdriver.Attempt
	for n := 1; n <= 5; n++ {
		first = append(first, attempt(kept, n, outboxdriver.AttemptRetried, outboxdriver.ClassRetryable))
	}
	first = append(first, attempt(gone, 1, outboxdriver.AttemptRetried, outboxdriver.ClassRetryable))
	for n := 6; n <= 12; n++ {
		second = append(second, attempt(kept, n, outboxdriver.AttemptRetried, outboxdriver.ClassRetryable))
	}
	// The same attempt twice in one call: the later record wins.
	second = append(second, attempt(kept, 12, outboxdriver.AttemptDead, outboxdriver.ClassExhausted))
	for _, batch := range [][]outboxdriver.Attempt{first, second} {
		if err := rec.RecordAttempts(ctx, batch); err != nil {
			t.Fatalf("RecordAttempts: %v", err)
		}
	}
	got, err := rec.Attempts(ctx, kept.ID)
	if err != nil {
		t.Fatalf("Attempts: %v", err)
	}
	if len(got) != outboxdriver.AttemptsKept || got[0].Number != 12-outboxdriver.AttemptsKept+1 {
		t.Fatalf("history of 12 attempts kept %d from number %d; want the last %d", len(got), got[0].Number, outboxdriver.AttemptsKept)
	}
	for i, a := range got {
		if a.MessageID != kept.ID || a.At.IsZero() || (i > 0 && (a.Number != got[i-1].Number+1 || a.At.Before(got[i-1].At))) {
			t.Fatalf("history %+v: want consecutive attempts of %s, oldest first, each with its time", got, kept.ID)
		}
	}
	last := got[len(got)-1]
	if last.Outcome != outboxdriver.AttemptDead || last.Class != outboxdriver.ClassExhausted || last.Error != fmt.Sprintf("failure 12 of %s", kept.ID) {
		t.Fatalf("last attempt %+v; want the later record: dead, exhausted, with its whole error", last)
	}
	failed, err := rec.LastFailures(ctx, []uuid.UUID{kept.ID, gone.ID, uuid.New()})
	if err != nil || len(failed) != 2 || !failed[kept.ID].Equal(last.At) {
		t.Fatalf("LastFailures = %v, %v; want kept at %v and gone, nothing for an unknown id", failed, err, last.At)
	}

	// gone is published and deleted: its history goes with the next purge.
	token, claimed := s.claim(t, 10, longLease)
	if len(claimed) != 2 {
		t.Fatalf("claimed %d; want both messages", len(claimed))
	}
	s.exchange(t, outboxdriver.Settlement{Token: token, Published: []uuid.UUID{gone.ID}, Release: []uuid.UUID{kept.ID}}, outboxdriver.Claim{})
	if s.held() {
		s.waitNoneInFlight(t)
	}
	s.mustBeGone(t, gone.ID)
	if n, err := rec.PurgeAttempts(ctx, 100); err != nil || n != 1 {
		t.Fatalf("PurgeAttempts = %d, %v; want the 1 record of the published message", n, err)
	}
	if h, err := rec.Attempts(ctx, kept.ID); err != nil || len(h) != outboxdriver.AttemptsKept {
		t.Fatalf("after the purge the pending message's history has %d records, %v; want %d", len(h), err, outboxdriver.AttemptsKept)
	}
	if err := rec.ForgetAttempts(ctx, []uuid.UUID{kept.ID, uuid.New()}); err != nil {
		t.Fatalf("ForgetAttempts: %v", err)
	}
	if h, err := rec.Attempts(ctx, kept.ID); err != nil || len(h) != 0 {
		t.Fatalf("after ForgetAttempts the message's history has %d records, %v; want none", len(h), err)
	}
}
