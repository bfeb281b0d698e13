package main

import (
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/outboxdriver"
)

// settleAll writes msgs to db, claims them all and records the outcomes
// settle gives for the claim's token, as a relay would.
func settleAll(t *testing.T, db processDB, msgs []*outbox.Message, settle func(token uuid.UUID) outboxdriver.Settlement) {
	t.Helper()
	ctx := t.Context()
	if err := db.write(ctx, msgs); err != nil {
		t.Fatal(err)
	}
	token := uuid.New()
	if got, err := db.store.SettleAndClaim(ctx, outboxdriver.Settlement{}, outboxdriver.Claim{Limit: 100, Lease: time.Minute, Token: token}); err != nil || len(got) != len(msgs) {
		t.Fatalf("claim: %d, %v; want %d", len(got), err, len(msgs))
	}
	if _, err := db.store.SettleAndClaim(ctx, settle(token), outboxdriver.Claim{}); err != nil {
		t.Fatal(err)
	}
}

// deadLetterAll writes msgs and dead-letters them, each with the error errs
// gives it.
func deadLetterAll(t *testing.T, db processDB, msgs []*outbox.Message, errs func(i int, m *outbox.Message) string) {
	t.Helper()
	settleAll(t, db, msgs, func(token uuid.UUID) outboxdriver.Settlement {
		settle := outboxdriver.Settlement{Token: token}
		for i, m := range msgs {
			settle.Dead = append(settle.Dead, outboxdriver.Failure{ID: m.ID, Error: errs(i, m)})
		}
		return settle
	})
}

// publishKeepingAll writes msgs and publishes them, kept as retention keeps
// them.
func publishKeepingAll(t *testing.T, db processDB, msgs []*outbox.Message) {
	t.Helper()
	settleAll(t, db, msgs, func(token uuid.UUID) outboxdriver.Settlement {
		settle := outboxdriver.Settlement{Token: token, KeepPublished: true}
		for _, m := range msgs {
			settle.Published = append(settle.Published, m.ID)
		}
		return settle
	})
}
