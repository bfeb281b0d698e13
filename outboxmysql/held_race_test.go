package outboxmysql_test

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/outboxdriver"
	"github.com/go-outbox/outbox/outboxmysql"
)

// TestHeldClaimsAmongLeasedClaimsProbesAndWritersDoNotDeadlock runs, on one
// table, writers, workers whose claims are held in transactions, workers
// whose claims are leased by their columns (a fleet with a pool too small to
// hold them all), and the idle probe. A held claim that loses a deadlock is
// rolled back and its published messages are claimed again: every exchange
// must succeed and every message must be claimed once. Before the claims and
// probes read by the indexes they name, about one run in five of the
// relay suite's concurrent test lost a held settlement so; this test loses
// one in most runs.
func TestHeldClaimsAmongLeasedClaimsProbesAndWritersDoNotDeadlock(t *testing.T) {
	t.Parallel()
	held := newStore(t, outboxmysql.Options{TransactionLeases: true})
	leased, err := outboxmysql.New(held.DB(), outboxmysql.Options{Table: held.Name()})
	if err != nil {
		t.Fatal(err)
	}
	w := newWriter(t, held)
	const writers, perWriter, perTx = 4, 2500, 10
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()

	var (
		mu      sync.Mutex
		claimed = map[uuid.UUID]int{}
		errs    []error
	)
	fail := func(err error) {
		mu.Lock()
		errs = append(errs, err)
		mu.Unlock()
		cancel()
	}
	var written sync.WaitGroup
	for n := range writers {
		written.Go(func() {
			for i := 0; i < perWriter; i += perTx {
				msgs := make([]*outbox.Message, perTx)
				for j := range msgs {
					msgs[j] = &outbox.Message{Topic: "orders.race", Key: fmt.Sprint("k", n, j), Payload: []byte("x")}
				}
				if err := w.Transact(ctx, func(ctx context.Context, tx *sql.Tx) error { return w.Write(ctx, tx, msgs...) }); err != nil {
					fail(fmt.Errorf("writer %d: %w", n, err))
					return
				}
			}
		})
	}
	writing := make(chan struct{})
	go func() { written.Wait(); close(writing) }()

	worker := func(name string, store *outboxmysql.Store) {
		token := uuid.New()
		var published []uuid.UUID
		for {
			msgs, err := store.SettleAndClaim(ctx, outboxdriver.Settlement{Token: token, Published: published},
				outboxdriver.Claim{Limit: 50, Lease: time.Minute, Token: token})
			if err != nil {
				if ctx.Err() == nil {
					fail(fmt.Errorf("%s: exchange settling %d: %w", name, len(published), err))
				}
				return
			}
			published = published[:0]
			mu.Lock()
			for _, m := range msgs {
				claimed[m.ID]++
				published = append(published, m.ID)
			}
			mu.Unlock()
			if len(msgs) == 0 {
				select {
				case <-writing:
					if st, err := store.Stats(ctx); err == nil && st.Pending == 0 {
						return
					}
				default:
				}
				time.Sleep(time.Millisecond)
			}
		}
	}
	var workers sync.WaitGroup
	for i := range 3 {
		workers.Go(func() { worker(fmt.Sprint("held worker ", i), held) })
		workers.Go(func() { worker(fmt.Sprint("leased worker ", i), leased) })
	}
	var probes sync.WaitGroup
	for range 3 {
		probes.Go(func() {
			for ctx.Err() == nil {
				if _, _, err := held.NextDue(ctx); err != nil && ctx.Err() == nil {
					fail(fmt.Errorf("next due: %w", err))
					return
				}
			}
		})
	}
	workers.Wait()
	cancel()
	probes.Wait()

	for _, err := range errs {
		t.Error(err)
	}
	if len(claimed) != writers*perWriter {
		t.Errorf("%d distinct messages claimed; want %d", len(claimed), writers*perWriter)
	}
	for id, n := range claimed {
		if n != 1 {
			t.Errorf("message %s claimed %d times; want once", id, n)
		}
	}
}
