package outboxpg_test

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/pgtest"
	"github.com/go-outbox/outbox/outboxpg"
	"github.com/go-outbox/outbox/relaytest"
)

// A TablesRelay on outboxpg.Tables wakes a table's relay from the source's
// one listener: with a poll interval of a minute, a message written by
// another process (a NOTIFY, no in-process wake-up) to any tenant's table
// is published within seconds, including in a tenant schema migrated while
// the relay runs.
func TestTablesRelayWakesEachTenantFromTheSourcesListener(t *testing.T) {
	t.Parallel()
	prefix := tenantPrefix(t)
	tenantSchema(t, prefix+"_a", "outbox")
	tenantSchema(t, prefix+"_b", "outbox")
	pool := pgtest.Pool(t)
	src := newTables(t, pool, prefix+"_*", outboxpg.Options{})
	rec := relaytest.NewRecorder()
	tr := relaytest.StartTablesRelay(t, src, rec, outbox.TablesConfig{
		RescanInterval: 100 * time.Millisecond,
		// No poll within the test: only a wake-up can publish what is
		// written after a relay's first look.
		Relay: outbox.Config{PollInterval: time.Minute, ActivePollInterval: time.Minute},
	})
	// insert writes through a store of its own with Notify, as a writer in
	// another process does: only the NOTIFY can wake the relays.
	insert := func(schema string) uuid.UUID {
		t.Helper()
		s, err := outboxpg.New(pool, outboxpg.Options{Schema: schema, Notify: true})
		if err != nil {
			t.Fatal(err)
		}
		m := &outbox.Message{ID: uuid.Must(uuid.NewV7()), Topic: "orders.created", Payload: []byte("{}")}
		if err := s.RunInTx(t.Context(), func(tx pgx.Tx) error { return s.InsertTx(t.Context(), tx, []*outbox.Message{m}) }); err != nil {
			t.Fatalf("insert into %s: %v", schema, err)
		}
		return m.ID
	}
	serving := func(names ...string) func() bool {
		return func() bool {
			served := tr.Tables()
			for _, n := range names {
				if !slices.Contains(served, n) {
					return false
				}
			}
			return true
		}
	}
	// published waits for a message of each schema written in turn: the
	// first may go out at its relay's first look, the second only on a
	// wake-up.
	published := func(what string, schemas ...string) {
		t.Helper()
		for range 2 {
			var ids []uuid.UUID
			for _, schema := range schemas {
				ids = append(ids, insert(schema))
			}
			rec.WaitFor(t, 10*time.Second, what, func() bool {
				for _, id := range ids {
					if rec.Count(id) != 1 {
						return false
					}
				}
				return true
			})
		}
	}
	waitFor(t, "both tenants served", serving(prefix+"_a.outbox", prefix+"_b.outbox"))
	published("the tenants' messages, woken by NOTIFY", prefix+"_a", prefix+"_b")

	tenantSchema(t, prefix+"_c", "outbox")
	waitFor(t, "the tenant migrated later served", serving(prefix+"_c.outbox"))
	published("the messages of the tenant migrated later, woken by NOTIFY", prefix+"_c")
	// Stop before the schemas are dropped: a relay whose table is gone
	// retries recording its last outcomes until their lease ends.
	stopCtx, stop := context.WithTimeout(context.Background(), 10*time.Second)
	defer stop()
	if err := tr.Shutdown(stopCtx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
}

// waitFor polls cond every 10 ms for up to 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after 10s waiting for %s", what)
		}
	}
}

// A relay whose table is dropped while it publishes a batch stops at once
// when told to, without trying to record the batch's outcomes until their
// lease ends: there is no table to record them in.
func TestARelayWhoseTableWasDroppedStopsWithoutWaitingForTheLease(t *testing.T) {
	t.Parallel()
	prefix := tenantPrefix(t)
	schema := prefix + "_gone"
	tenantSchema(t, schema, "outbox")
	pool := pgtest.Pool(t)
	store, err := outboxpg.New(pool, outboxpg.Options{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	publishing, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	pub := outbox.PublisherFunc(func(ctx context.Context, ms []outbox.Message) []error {
		once.Do(func() { close(publishing) })
		<-release
		return make([]error, len(ms))
	})
	logs := &relaytest.LogCapture{}
	relay, err := outbox.NewRelay(store, pub, outbox.Config{LeaseDuration: 2 * time.Minute, PollInterval: 50 * time.Millisecond, Logger: slog.New(logs)})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- relay.Run(context.Background()) }()
	if err := store.RunInTx(t.Context(), func(tx pgx.Tx) error {
		return store.InsertTx(t.Context(), tx, []*outbox.Message{{ID: uuid.Must(uuid.NewV7()), Topic: "orders.created", Payload: []byte("{}")}})
	}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-publishing:
	case <-time.After(10 * time.Second):
		t.Fatal("the relay did not publish within 10s")
	}
	dropSchema(t, schema)
	stopCtx, stop := context.WithTimeout(context.Background(), 10*time.Second)
	defer stop()
	shutdown := make(chan error, 1)
	go func() { shutdown <- relay.Shutdown(stopCtx) }()
	close(release)
	if err := <-shutdown; err != nil {
		t.Fatalf("Shutdown with the table dropped: %v; want the relay stopped within 10s, not at the end of the 2-minute lease; logs:\n%s", err, logs)
	}
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	if !logs.Has(slog.LevelWarn, "without recording outcomes", "table is missing") {
		t.Fatalf("no WARN saying the outcomes were not recorded; logs:\n%s", logs)
	}
}

// A running relay whose table goes missing for a while (renamed away and
// back by an operator) keeps its outcomes and goes on once the table is
// back: only a relay that is stopping gives up on a missing table.
func TestARunningRelayGoesOnOnceItsMissingTableIsBack(t *testing.T) {
	t.Parallel()
	schema := tenantPrefix(t) + "_away"
	tenantSchema(t, schema, "outbox")
	pool := pgtest.Pool(t)
	store, err := outboxpg.New(pool, outboxpg.Options{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	publishing, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	rec := relaytest.NewRecorder()
	pub := outbox.PublisherFunc(func(ctx context.Context, ms []outbox.Message) []error {
		once.Do(func() { close(publishing); <-release })
		return rec.Publish(ctx, ms)
	})
	logs := &relaytest.LogCapture{}
	relaytest.StartRelay(t, store, pub, outbox.Config{PollInterval: 50 * time.Millisecond, BackoffBase: 10 * time.Millisecond, Logger: slog.New(logs)})
	insert := func() uuid.UUID {
		t.Helper()
		m := &outbox.Message{ID: uuid.Must(uuid.NewV7()), Topic: "orders.created", Payload: []byte("{}")}
		if err := store.RunInTx(t.Context(), func(tx pgx.Tx) error { return store.InsertTx(t.Context(), tx, []*outbox.Message{m}) }); err != nil {
			t.Fatal(err)
		}
		return m.ID
	}
	rename := func(from, to string) {
		t.Helper()
		if _, err := pool.Exec(t.Context(), `ALTER TABLE `+pgx.Identifier{schema, from}.Sanitize()+` RENAME TO `+pgx.Identifier{to}.Sanitize()); err != nil {
			t.Fatal(err)
		}
	}
	first := insert()
	select {
	case <-publishing:
	case <-time.After(10 * time.Second):
		t.Fatal("the relay did not publish within 10s")
	}
	rename("outbox", "outbox_away")
	close(release)
	for deadline := time.Now().Add(10 * time.Second); !logs.Has(slog.LevelWarn, "exchange with the store failed", "does not exist"); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the settlement did not fail on the missing table within 10s; logs:\n%s", logs)
		}
	}
	rename("outbox_away", "outbox")
	second := insert()
	rec.WaitFor(t, 10*time.Second, "a message written once the table is back", func() bool { return rec.Count(second) == 1 })
	if n := rec.Count(first); n != 1 {
		t.Fatalf("the message whose settlement met the missing table was published %d times; want once (its outcome kept and recorded once the table was back)", n)
	}
	if logs.Has(slog.LevelWarn, "without recording outcomes") {
		t.Fatalf("a running relay gave up its outcomes; logs:\n%s", logs)
	}
}
