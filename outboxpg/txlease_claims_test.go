package outboxpg_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/pgtest"
	"github.com/go-outbox/outbox/outboxpg"
)

// With transaction leases, the rows a claim holds stay pending to every
// other transaction until it commits: other claims must pass over them to
// the free ones, so that every worker finds work while work is free. Each
// case holds several claims open at once, as the workers of one or more
// relays do, and each claim must come back full while enough is free.
func TestConcurrentTransactionLeaseClaimsEachFindFreeWork(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name          string
		orderByKey    bool
		keys, perKey  int // keys 0: messages without a key
		claims, limit int
		want          int // each claim's size
	}{
		{name: "unordered, 1000 messages without a key", keys: 0, perKey: 1000, claims: 5, limit: 100, want: 100},
		{name: "key order, 1000 messages without a key", orderByKey: true, keys: 0, perKey: 1000, claims: 5, limit: 100, want: 100},
		{name: "key order, 300 keys of one message", orderByKey: true, keys: 300, perKey: 1, claims: 3, limit: 100, want: 100},
		// Runs of 7 (a head and 100/16 followers): about 14 keys a claim,
		// so 15 claims hold about 215 of the 300 keys.
		{name: "key order, 300 keys of 40 messages", orderByKey: true, keys: 300, perKey: 40, claims: 15, limit: 100, want: 100},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			// A pool of its own, with a place for every claim to hold
			// (half its connections, see openClaimPlaces).
			cfg := pgtest.Config(t)
			cfg.MaxConns = int32(2*c.claims + 2)
			pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(pool.Close)
			store := newStore(t, pool, outboxpg.Options{OrderByKey: c.orderByKey, TransactionLeases: true})
			t.Cleanup(func() { outboxpg.RollBackOpenClaims(store) })
			if c.keys == 0 {
				writeUnkeyed(t, store, c.perKey)
			} else {
				writeRoundRobin(t, store, c.keys, c.perKey)
			}
			holder := map[string]int{} // key -> the claim that holds it
			var sizes []int
			for i := range c.claims {
				got, runs := claimByKey(t, store, c.limit)
				sizes = append(sizes, len(got))
				for k := range runs {
					if j, ok := holder[k]; ok && k != "" {
						t.Fatalf("key %s is held by claims %d and %d at once", k, j, i)
					}
					holder[k] = i
				}
			}
			for i, n := range sizes {
				if n != c.want {
					t.Fatalf("claims held open at once came back with %v messages; claim %d got %d, want %d each while free work is left", sizes, i, n, c.want)
				}
			}
		})
	}
}

// With transaction leases, messages that open claims hold are not due to
// anyone else: with all of them held, NextDue does not answer "due now"
// (which sends every idle worker to claim, and come back empty, at every
// poll); when one is free again, it does.
func TestNextDueWithTransactionLeasesIgnoresMessagesHeldByOpenClaims(t *testing.T) {
	t.Parallel()
	for _, orderByKey := range []bool{false, true} {
		t.Run(fmt.Sprintf("orderByKey=%v", orderByKey), func(t *testing.T) {
			t.Parallel()
			pool := pgtest.Pool(t)
			store := newStore(t, pool, outboxpg.Options{OrderByKey: orderByKey, TransactionLeases: true})
			t.Cleanup(func() { outboxpg.RollBackOpenClaims(store) })
			writeRoundRobin(t, store, 10, 2)
			if got, _ := claimByKey(t, store, 100); len(got) == 0 {
				t.Fatal("claim: got nothing; want the due messages")
			}
			wait, ok, err := store.NextDue(t.Context())
			if err != nil {
				t.Fatalf("NextDue: %v", err)
			}
			if ok && wait <= 0 {
				t.Fatalf("NextDue with every message held by an open claim = due now; want nothing due until the claim ends")
			}
			outboxpg.RollBackOpenClaims(store)
			deadline := time.Now().Add(10 * time.Second)
			for {
				wait, ok, err := store.NextDue(t.Context())
				if err != nil {
					t.Fatalf("NextDue: %v", err)
				}
				if ok && wait <= 0 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("NextDue after the open claim was rolled back = %v, %v; want due now", wait, ok)
				}
				time.Sleep(5 * time.Millisecond)
			}
		})
	}
}

// writeUnkeyed writes n messages without a key in one transaction.
func writeUnkeyed(t *testing.T, store *outboxpg.Store, n int) {
	t.Helper()
	w := newWriter(t, store)
	msgs := make([]*outbox.Message, n)
	for i := range msgs {
		msgs[i] = &outbox.Message{Topic: "orders"}
	}
	ctx := t.Context()
	if err := w.Transact(ctx, func(ctx context.Context, tx pgx.Tx) error { return w.Write(ctx, tx, msgs...) }); err != nil {
		t.Fatalf("write: %v", err)
	}
}
