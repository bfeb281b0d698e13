package outboxpg_test

import (
	"context"
	"errors"
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

// While a resume (or pause) of a topic holds its paused row, PausedAmong
// says a change is under way at once, instead of making a relay's worker
// wait; once it ends, it reports the topic resumed, and a message the
// resume's move back passed over (a row another transaction held: a
// relay's settlement, say) is listed as resumed and moved back by
// MoveBackUnpaused, as the relay does then.
func TestAResumeUnderWayIsReportedAtOnceAndWhatItPassedOverIsMovedBackAfter(t *testing.T) {
	pool := pgtest.Pool(t)
	opts := outboxpg.Options{Schema: pgtest.Schema(t)}
	store := newStore(t, pool, opts)
	ctx := t.Context()
	paused := pgx.Identifier{opts.Schema, "outbox_paused"}.Sanitize()
	table := pgx.Identifier{opts.Schema, "outbox"}.Sanitize()
	if _, err := store.PauseTopic(ctx, "mail", "t", ""); err != nil {
		t.Fatal(err)
	}
	w := newWriter(t, store)
	m := &outbox.Message{Topic: "mail", Payload: []byte("x")}
	if err := w.Transact(ctx, func(ctx context.Context, tx pgx.Tx) error { return w.Write(ctx, tx, m) }); err != nil {
		t.Fatal(err)
	}
	token := uuid.New()
	if got, err := store.SettleAndClaim(ctx, outboxdriver.Settlement{}, outboxdriver.Claim{Limit: 10, Lease: time.Minute, Token: token}); err != nil || len(got) != 1 {
		t.Fatalf("claim: %v %v", got, err)
	}
	// The relay settles its postponement: m is in the paused range.
	if _, err := store.SettleAndClaim(ctx, outboxdriver.Settlement{Token: token, Retry: []outboxdriver.Retry{{ID: m.ID, Delay: outboxdriver.PauseShift, Error: "paused", Unsent: true}}}, outboxdriver.Claim{}); err != nil {
		t.Fatal(err)
	}

	under, err := pool.Begin(ctx) // a resume under way holds the paused row
	if err != nil {
		t.Fatal(err)
	}
	if _, err := under.Exec(ctx, `SELECT 1 FROM `+paused+` WHERE topic = 'mail' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	if still, err := store.PausedAmong(ctx, []string{"mail"}); !errors.Is(err, outboxdriver.ErrPauseChanging) {
		t.Fatalf("PausedAmong(mail) while its row is held = %v, %v; want ErrPauseChanging at once", still, err)
	}
	if err := under.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if still, err := store.PausedAmong(ctx, []string{"mail", "orders"}); err != nil || len(still) != 1 || still[0] != "mail" {
		t.Fatalf("PausedAmong(mail, orders) = %v, %v; want [mail]", still, err)
	}

	holder, err := pool.Begin(ctx) // holds m while the resume runs
	if err != nil {
		t.Fatal(err)
	}
	if _, err := holder.Exec(ctx, `SELECT 1 FROM `+table+` WHERE id = $1 FOR UPDATE`, m.ID); err != nil {
		t.Fatal(err)
	}
	if n, err := store.ResumeTopic(ctx, "mail"); err != nil || n != 0 {
		t.Fatalf("ResumeTopic(mail) with m held = %d, %v; want it passed over", n, err)
	}
	if err := holder.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if still, err := store.PausedAmong(ctx, []string{"mail"}); err != nil || len(still) != 0 {
		t.Fatalf("PausedAmong(mail) after the resume = %v, %v; want none", still, err)
	}
	list, err := store.PausedTopics(ctx)
	if err != nil || len(list) != 1 || !list[0].Resumed || list[0].Messages != 1 {
		t.Fatalf("PausedTopics after the resume passed m over = %+v, %v; want mail, resumed, 1 message held", list, err)
	}
	if n, err := store.MoveBackUnpaused(ctx); err != nil || n != 1 {
		t.Fatalf("MoveBackUnpaused = %d, %v; want m moved back", n, err)
	}
	if batch, err := store.SettleAndClaim(ctx, outboxdriver.Settlement{}, outboxdriver.Claim{Limit: 10, Lease: time.Minute, Token: uuid.New()}); err != nil || len(batch) != 1 {
		t.Fatalf("a claim after the move back = %v, %v; want m", batch, err)
	}
}

// Two resumes of two topics that share a key, one under way while the
// other runs: the message of one held behind a message of the other is
// moved back by whichever ends last, whose move back (a statement after its
// delete) sees the other's delete. (This order is not the one that needs
// the resumes to take turns, both deletes before both move backs, which a
// test cannot bring about without hooks in the store.)
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
	// The second resume waits for the first (they take turns), or ends.
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
