package outboxmysql_test

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/outboxdriver"
	"github.com/go-outbox/outbox/outboxmysql"
)

// Claimers in key order that settle each batch and claim the next in one
// transaction (retries that postpone their keys, releases, publications)
// take row locks in orders nobody chose, and InnoDB may pick one of them
// as a deadlock victim: the store must run that transaction again, so no
// claimer ever sees an error, and every key is still published in order
// with no two claimers holding it at once.
func TestConcurrentKeyOrderClaimsNeverSurfaceADeadlockAndKeepEachKeysOrder(t *testing.T) {
	t.Parallel()
	const (
		keys      = 12
		perKey    = 40
		claimers  = 8
		batch     = 10
		failEvery = 5 // every 5th message fails its first attempt
	)
	store := newStore(t, outboxmysql.Options{Table: randomTable()})
	ordered := keyOrdered(t, store, outboxmysql.Options{})
	w := newWriter(t, store)
	var all []*outbox.Message
	for i := range keys * perKey {
		all = append(all, &outbox.Message{Topic: "race", Key: fmt.Sprintf("k%02d", i%keys), Payload: []byte("x")})
	}
	if err := w.Transact(t.Context(), func(ctx context.Context, tx *sql.Tx) error { return w.Write(ctx, tx, all...) }); err != nil {
		t.Fatal(err)
	}
	order := map[string][]uuid.UUID{}
	for _, m := range all {
		order[m.Key] = append(order[m.Key], m.ID)
	}
	deadlocksBefore := innodbDeadlocks(t, store.DB())

	var (
		mu        sync.Mutex
		published = map[string][]uuid.UUID{}
		holder    = map[string]int{}
		failed    = map[uuid.UUID]bool{}
		count     int
	)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	for c := range claimers {
		wg.Go(func() {
			settle := outboxdriver.Settlement{}
			for ctx.Err() == nil {
				// The settlement below ends c's hold of its keys; no other
				// claim can take them before it commits.
				mu.Lock()
				for k, h := range holder {
					if h == c {
						delete(holder, k)
					}
				}
				mu.Unlock()
				token := uuid.New()
				got, err := ordered.SettleAndClaim(ctx, settle, outboxdriver.Claim{Limit: batch, Lease: time.Minute, Token: token})
				if err != nil {
					if ctx.Err() == nil {
						t.Errorf("claimer %d: %v", c, err)
					}
					cancel()
					return
				}
				mu.Lock()
				settle = outboxdriver.Settlement{Token: token}
				stopped := map[string]bool{}
				for _, m := range got {
					if h, ok := holder[m.Key]; ok && h != c {
						t.Errorf("claimer %d got message %s of key %s while claimer %d held the key", c, m.ID, m.Key, h)
					}
					holder[m.Key] = c
					switch {
					case stopped[m.Key]:
						settle.Release = append(settle.Release, m.ID)
					case slices.Index(order[m.Key], m.ID)%failEvery == 0 && !failed[m.ID]:
						failed[m.ID] = true
						stopped[m.Key] = true
						settle.Retry = append(settle.Retry, outboxdriver.Retry{ID: m.ID, Delay: time.Millisecond, Error: "try again"})
					default:
						published[m.Key] = append(published[m.Key], m.ID)
						settle.Published = append(settle.Published, m.ID)
						count++
					}
				}
				if count == len(all) {
					cancel()
				}
				mu.Unlock()
				if len(got) == 0 {
					time.Sleep(2 * time.Millisecond) // a poll interval: nothing was due
				}
			}
		})
	}
	wg.Wait()
	if count != len(all) {
		t.Fatalf("published %d of %d messages before the deadline", count, len(all))
	}
	for k, want := range order {
		if !slices.Equal(published[k], want) {
			t.Fatalf("key %s published as %v; want write order %v", k, published[k], want)
		}
	}
	t.Logf("InnoDB deadlocks on the server during the run (any test's): %d", innodbDeadlocks(t, store.DB())-deadlocksBefore)
}

// innodbDeadlocks reads the server's count of deadlocks it resolved.
func innodbDeadlocks(t *testing.T, db *sql.DB) int64 {
	t.Helper()
	var (
		name string
		n    int64
	)
	if err := db.QueryRowContext(t.Context(), `SHOW GLOBAL STATUS LIKE 'Innodb_deadlocks'`).Scan(&name, &n); err != nil {
		return 0 // MySQL has no such counter; the log line says 0
	}
	return n
}
