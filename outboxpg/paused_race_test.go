package outboxpg_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/pgtest"
	"github.com/go-outbox/outbox/outboxdriver"
	"github.com/go-outbox/outbox/outboxpg"
)

// waitForLockWait waits until some backend waits on a lock running a query
// that contains substr.
func waitForLockWait(t *testing.T, ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, substr string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		var n int
		if err := q.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%'||$1||'%'`, substr).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("the statement never waited on the lock")
}

// A relay postpones a message for a pause while a resume of its topic is
// under way (held here by a lock on the paused row, as a resume of a large
// backlog holds it for seconds): the relay's check after its settlement
// (PausedAmong) waits for the resume, sees the topic resumed, and moves the
// message back, or the resume's own move back sees it. Either way it is not
// left in the paused range.
func TestAPostponementRacingAResumeIsNotLeftInThePausedRange(t *testing.T) {
	pool := pgtest.Pool(t)
	opts := outboxpg.Options{Schema: pgtest.Schema(t)}
	store := newStore(t, pool, opts)
	ctx := t.Context()
	paused := pgx.Identifier{opts.Schema, "outbox_paused"}.Sanitize()
	if _, err := store.PauseTopic(ctx, "mail", "t", ""); err != nil {
		t.Fatal(err)
	}
	w := newWriter(t, store)
	m := &outbox.Message{Topic: "mail", Payload: []byte("x")}
	if err := w.Transact(ctx, func(ctx context.Context, tx pgx.Tx) error { return w.Write(ctx, tx, m) }); err != nil {
		t.Fatal(err)
	}
	token := uuid.New()
	got, err := store.SettleAndClaim(ctx, outboxdriver.Settlement{}, outboxdriver.Claim{Limit: 10, Lease: time.Minute, Token: token})
	if err != nil || len(got) != 1 {
		t.Fatalf("claim: %v %v", got, err)
	}
	// Stall the resume after its snapshot.
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `SELECT 1 FROM `+paused+` WHERE topic = 'mail' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	done := make(chan int)
	go func() {
		n, err := store.ResumeTopic(context.Background(), "mail")
		if err != nil {
			t.Error(err)
		}
		done <- n
	}()
	waitForLockWait(t, ctx, pool, "DELETE FROM")
	// The relay settles its postponement (it saw mail paused) ...
	if _, err := store.SettleAndClaim(ctx, outboxdriver.Settlement{Token: token, Retry: []outboxdriver.Retry{{ID: m.ID, Delay: outboxdriver.PauseShift, Error: "paused", Unsent: true}}}, outboxdriver.Claim{}); err != nil {
		t.Fatal(err)
	}
	// ... and checks, as afterPauseSettled does, which waits for the resume.
	checked := make(chan []string, 1)
	go func() {
		still, err := store.PausedAmong(context.Background(), []string{"mail"})
		if err != nil {
			t.Error(err)
		}
		checked <- still
	}()
	waitForLockWait(t, ctx, pool, "FOR SHARE")
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	<-done
	if still := <-checked; len(still) != 0 {
		t.Fatalf("PausedAmong(mail) after the resume = %v; want none", still)
	}
	if _, err := store.MoveBackUnpaused(ctx); err != nil {
		t.Fatal(err)
	}
	list, err := store.PausedTopics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("PausedTopics after: %+v", list)
	batch, err := store.SettleAndClaim(ctx, outboxdriver.Settlement{}, outboxdriver.Claim{Limit: 10, Lease: time.Minute, Token: uuid.New()})
	if err != nil {
		t.Fatal(err)
	}
	if len(batch) == 0 {
		t.Fatalf("message %s of the resumed topic is stuck in the paused range: %+v", m.ID, list)
	}
}

// Two resumes of two topics that share a key, at once: they take turns, so
// the second sees the first's delete, and the message of one held behind a
// message of the other is moved back.
func TestTwoResumesOfTopicsSharingAKeyLeaveNothingInThePausedRange(t *testing.T) {
	pool := pgtest.Pool(t)
	opts := outboxpg.Options{Schema: pgtest.Schema(t)}
	store := newStore(t, pool, opts)
	ctx := t.Context()
	paused := pgx.Identifier{opts.Schema, "outbox_paused"}.Sanitize()
	w := newWriter(t, store)
	first := &outbox.Message{Topic: "orders", Key: "k", Payload: []byte("1")}
	second := &outbox.Message{Topic: "mail", Key: "k", Payload: []byte("2")}
	if err := w.Transact(ctx, func(ctx context.Context, tx pgx.Tx) error { return w.Write(ctx, tx, first, second) }); err != nil {
		t.Fatal(err)
	}
	for _, topic := range []string{"orders", "mail"} {
		if _, err := store.PauseTopic(ctx, topic, "t", ""); err != nil {
			t.Fatal(err)
		}
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `SELECT 1 FROM `+paused+` WHERE topic = 'orders' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	done := make(chan int)
	go func() {
		n, err := store.ResumeTopic(context.Background(), "orders")
		if err != nil {
			t.Error(err)
		}
		done <- n
	}()
	waitForLockWait(t, ctx, pool, "DELETE FROM")
	mailDone := make(chan struct{})
	go func() {
		defer close(mailDone)
		if _, err := store.ResumeTopic(context.Background(), "mail"); err != nil {
			t.Error(err)
		}
	}()
	// Resumes take turns: the second waits for the first. (Without the
	// turns it would finish at once, and leave the held message behind.)
	for waiting := 0; waiting == 0; {
		select {
		case <-mailDone:
			waiting = 1
		case <-time.After(10 * time.Millisecond):
			if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE 'LOCK TABLE%'`).Scan(&waiting); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	<-done
	<-mailDone
	list, err := store.PausedTopics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 0 {
		t.Fatalf("no topic is paused, yet messages are left in the paused range: %+v", list)
	}
}
