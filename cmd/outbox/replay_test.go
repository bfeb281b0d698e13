package main

import (
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/go-outbox/outbox"
)

func TestReplayPublishesKeptMessagesAgainAfterADryRun(t *testing.T) {
	t.Parallel()
	testReplay(t, postgresDB(t))
}

func TestSQLiteReplayPublishesKeptMessagesAgainAfterADryRun(t *testing.T) {
	t.Parallel()
	testReplay(t, sqliteProcessDB(t))
}

// testReplay publishes three messages and keeps them, as relays with
// --retention do, then replays two of them by topic: a dry run first, a
// refusal over --limit, then the replay.
func testReplay(t *testing.T, db processDB) {
	ctx := t.Context()
	msgs := []*outbox.Message{{Topic: "orders", Payload: []byte("1")}, {Topic: "orders", Payload: []byte("2")}, {Topic: "invoices", Payload: []byte("3")}}
	publishKeepingAll(t, db, msgs)
	with := func(args ...string) []string { return append(append(args, "--database-url", db.url), db.args...) }

	if code, _, errOut := cli(t, with("replay")...); code != 2 || !strings.Contains(errOut, "--all") {
		t.Fatalf("replay without a choice: exit %d, %q; want a usage error naming --all", code, errOut)
	}
	if out := mustCLI(t, with("replay", "--topic", "orders", "--since", "1h", "--dry-run")...); !strings.Contains(out, "2 published message(s) match") {
		t.Fatalf("replay --dry-run printed %q; want 2 matching", out)
	}
	if st, _ := db.stats(ctx); st.Published != 3 || st.Pending != 0 {
		t.Fatalf("after the dry run: %+v; want nothing changed", st)
	}
	if code, _, errOut := cli(t, with("replay", "--topic", "orders", "--limit", "1")...); code != 1 || !strings.Contains(errOut, "2 published messages match, more than --limit 1") {
		t.Fatalf("replay --limit 1 of 2: exit %d, %q; want a refusal naming both counts", code, errOut)
	}
	if st, _ := db.stats(ctx); st.Published != 3 {
		t.Fatalf("after the refusal: %+v; want nothing replayed", st)
	}
	if out := mustCLI(t, with("replay", "--topic", "orders")...); !strings.Contains(out, "2 message(s) pending again") {
		t.Fatalf("replay printed %q; want both", out)
	}
	for _, m := range msgs[:2] {
		if got, err := db.store.Get(ctx, m.ID); err != nil || got.Status != outbox.StatusPending {
			t.Fatalf("replayed %s: %+v, %v; want pending with its id", m.ID, got, err)
		}
	}
	if out := mustCLI(t, with("replay", "--topic", "orders")...); !strings.Contains(out, "0 published messages match") {
		t.Fatalf("a replay with nothing kept printed %q; want it to say so and why", out)
	}
	if code, _, errOut := cli(t, with("replay", "--all", "--since", "yesterday")...); code != 2 || !strings.Contains(errOut, `--since "yesterday"`) {
		t.Fatalf("replay --since yesterday: exit %d, %q; want a usage error naming the flag and value", code, errOut)
	}
}

func TestSendExpiresInStampsTheExpiryHeader(t *testing.T) {
	t.Parallel()
	db := sqliteProcessDB(t)
	before := time.Now()
	out := mustCLI(t, "send", "--database-url", db.url, "--topic", "quotes", "--payload", "{}", "--expires-in", "1h")
	id, err := uuid.Parse(strings.TrimSpace(out))
	if err != nil {
		t.Fatalf("send printed %q; want an id", out)
	}
	m, err := db.store.Get(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	at, ok := outbox.ExpiresAt(&m)
	if !ok || at.Before(before.Add(time.Hour)) || at.After(time.Now().Add(time.Hour)) {
		t.Fatalf("the sent message expires at %v (%v, header %q); want an hour after the send", at, ok, m.Headers[outbox.HeaderExpiresAt])
	}
	if code, _, errOut := cli(t, "send", "--database-url", db.url, "--topic", "q", "--payload", "{}", "--expires-in", "-1s"); code != 2 || !strings.Contains(errOut, "--expires-in -1s") {
		t.Fatalf("send --expires-in -1s: exit %d, %q; want a usage error", code, errOut)
	}
}
