package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/outboxdriver"
)

func TestDeadRetryRefusesAMessageOvertakenBetweenItsCheckAndItsRetryOnPostgreSQL(t *testing.T) {
	t.Parallel()
	db, store := skippingDeadOnPostgreSQL(t)
	testDeadRetryRefusesAMessageOvertakenMeanwhile(t, db, store, store)
}

func TestDeadRetryRefusesAMessageOvertakenBetweenItsCheckAndItsRetryOnSQLite(t *testing.T) {
	t.Parallel()
	db, store := skippingDeadOnSQLite(t)
	testDeadRetryRefusesAMessageOvertakenMeanwhile(t, db, store, store)
}

// testDeadRetryRefusesAMessageOvertakenMeanwhile: a relay that skips dead
// messages in key order may publish a later message of a dead message's
// key at any moment, also while `outbox dead retry` (by id or --all) runs.
// Here it does so just before the retry changes anything, after whatever
// the command read before: the retry must still refuse the message, now
// overtaken, and leave it dead. store claims and settles as such a relay
// does; admin is the table's Admin, which the command uses.
func testDeadRetryRefusesAMessageOvertakenMeanwhile(t *testing.T, db []string, store outboxdriver.Store, admin outboxdriver.Admin) {
	for i, all := range []bool{false, true} {
		key := "order-" + string(rune('a'+i))
		send := func() uuid.UUID {
			t.Helper()
			out := strings.TrimSpace(mustCLI(t, append([]string{"send", "--topic", "orders", "--key", key, "--payload", `{}`}, db...)...))
			id, err := uuid.Parse(out)
			if err != nil {
				t.Fatalf("send printed %q; want a message id", out)
			}
			return id
		}
		paid, shipped := send(), send()
		settleOne := func(want uuid.UUID, dead bool) {
			t.Helper()
			token := uuid.New()
			got, err := store.SettleAndClaim(t.Context(), outboxdriver.Settlement{}, outboxdriver.Claim{Limit: 1, Lease: time.Minute, Token: token})
			if err != nil || len(got) != 1 || got[0].ID != want {
				t.Fatalf("claim one message: %v, %v; want %s", got, err, want)
			}
			s := outboxdriver.Settlement{Token: token, Published: []uuid.UUID{want}}
			if dead {
				s = outboxdriver.Settlement{Token: token, Dead: []outboxdriver.Failure{{ID: want, Error: "rejected"}}}
			}
			if _, err := store.SettleAndClaim(t.Context(), s, outboxdriver.Claim{}); err != nil {
				t.Fatal(err)
			}
		}
		settleOne(paid, true)

		racing := &overtakenMeanwhile{Admin: admin, overtake: func() { settleOne(shipped, false) }}
		var ids []uuid.UUID
		if !all {
			ids = []uuid.UUID{paid}
		}
		n, err := retryDeadKeepingKeyOrder(t.Context(), racing, ids, all)
		if !racing.overtook {
			t.Fatalf("dead retry (all %v) ran without a retry, so no relay went past %s meanwhile: %d, %v", all, paid, n, err)
		}
		if err == nil || !strings.Contains(err.Error(), paid.String()) || !strings.Contains(err.Error(), "1 later message(s)") || !strings.Contains(err.Error(), "--force") {
			t.Fatalf("dead retry (all %v) of %s, overtaken by %s while it ran: %d retried, %v; want it refused, naming it, the count and --force", all, paid, shipped, n, err)
		}
		if m, err := admin.Get(t.Context(), paid); err != nil || m.Status != outbox.StatusDead || m.Overtaken != 1 {
			t.Fatalf("message %s after the refused retry: %+v, %v; want it dead, overtaken by 1", paid, m, err)
		}
	}
}

// overtakenMeanwhile is an Admin whose retries first let a relay publish a
// later message of the retried message's key (overtake), once, as if it
// did so while the retry ran.
type overtakenMeanwhile struct {
	outboxdriver.Admin
	overtake func()
	overtook bool
}

func (a *overtakenMeanwhile) first() {
	if !a.overtook {
		a.overtook = true
		a.overtake()
	}
}

func (a *overtakenMeanwhile) RetryDead(ctx context.Context, ids ...uuid.UUID) (int, error) {
	a.first()
	return a.Admin.RetryDead(ctx, ids...)
}

func (a *overtakenMeanwhile) RetryAllDead(ctx context.Context) (int, error) {
	a.first()
	return a.Admin.RetryAllDead(ctx)
}

func (a *overtakenMeanwhile) RetryDeadUnlessOvertaken(ctx context.Context, ids []uuid.UUID, all bool) (int, []outbox.Message, error) {
	a.first()
	return a.Admin.(outboxdriver.KeyOrderRetrier).RetryDeadUnlessOvertaken(ctx, ids, all)
}
