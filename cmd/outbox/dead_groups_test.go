package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/outboxdriver"
)

func TestMaskErrorKeepsWhatIsAlikeAndMasksWhatDiffers(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"dial tcp 10.0.0.5:5672: connection refused":                                    "dial tcp <addr>: connection refused",
		"amqp: 312 NO_ROUTE for 0190f1e2-7c3a-7d40-8a1b-2c3d4e5f6a7b":                   "amqp: <n> NO_ROUTE for <id>",
		"deadbeef checksum 9f86d081884c7d65 after 1.5s":                                 "deadbeef checksum <hex> after <n>s",
		"webhook answered 503 Service Unavailable from [2001:db8::1]:443 (try 3 of 12)": "webhook answered <n> Service Unavailable from <addr> (try <n> of <n>)",
	} {
		if got := maskError(in); got != want {
			t.Errorf("maskError(%q) = %q; want %q", in, got, want)
		}
	}
}

func TestDeadGroupsGroupFailuresAndRetryOrDiscardAGroup(t *testing.T) {
	t.Parallel()
	testDeadGroups(t, postgresDB(t))
}

func TestSQLiteDeadGroupsGroupFailuresAndRetryOrDiscardAGroup(t *testing.T) {
	t.Parallel()
	testDeadGroups(t, sqliteProcessDB(t))
}

// testDeadGroups dead-letters messages failing in two ways (one with many
// addresses, one with many ids), records a history for one, and runs the
// dead commands: two groups, a history in `dead show`, and a group retried
// and another discarded whole.
func testDeadGroups(t *testing.T, db processDB) {
	ctx := t.Context()
	var unreachable, unroutable []*outbox.Message
	for i := range 3 {
		unreachable = append(unreachable, &outbox.Message{Topic: "orders", Key: fmt.Sprint("o", i), Payload: []byte("{}")})
	}
	for i := range 2 {
		unroutable = append(unroutable, &outbox.Message{Topic: "invoices", Key: fmt.Sprint("i", i), Payload: []byte("{}")})
	}
	deadLetterAll(t, db, append(append([]*outbox.Message{}, unreachable...), unroutable...), func(i int, m *outbox.Message) string {
		if m.Topic == "orders" {
			return fmt.Sprintf("attempt 12 of 12: dial tcp 10.0.0.%d:5672: connection refused", i+1)
		}
		return "permanent failure: 312 NO_ROUTE for " + m.ID.String()
	})
	if err := db.store.RecordAttempts(ctx, []outboxdriver.Attempt{
		{MessageID: unreachable[0].ID, Number: 1, Outcome: outboxdriver.AttemptRetried, Class: outboxdriver.ClassRetryable, Error: "dial tcp 10.0.0.1:5672: i/o timeout"},
		{MessageID: unreachable[0].ID, Number: 2, Outcome: outboxdriver.AttemptDead, Class: outboxdriver.ClassExhausted, Error: "dial tcp 10.0.0.1:5672: connection refused"},
	}); err != nil {
		t.Fatal(err)
	}
	with := func(args ...string) []string { return append(append(args, "--database-url", db.url), db.args...) }

	var got struct {
		Groups []struct {
			Group   string `json:"group"`
			Topic   string `json:"topic"`
			Class   string `json:"class"`
			Pattern string `json:"pattern"`
			Example string `json:"example"`
			Count   int    `json:"count"`
		} `json:"groups"`
	}
	if err := json.Unmarshal([]byte(mustCLI(t, with("dead", "groups", "--json")...)), &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Groups) != 2 || got.Groups[0].Count != 3 || got.Groups[1].Count != 2 {
		t.Fatalf("dead groups: %+v; want a group of 3 then one of 2", got.Groups)
	}
	orders, invoices := got.Groups[0], got.Groups[1]
	if orders.Topic != "orders" || orders.Class != "exhausted" || orders.Pattern != "dial tcp <addr>: connection refused" || !strings.HasPrefix(orders.Example, "attempt 12 of 12: dial tcp 10.0.0.") {
		t.Fatalf("the orders group: %+v; want exhausted, the addresses masked, one whole error as the example", orders)
	}
	if invoices.Topic != "invoices" || invoices.Class != "permanent" || invoices.Pattern != "permanent failure: <n> NO_ROUTE for <id>" {
		t.Fatalf("the invoices group: %+v; want permanent, ids and numbers masked", invoices)
	}
	text := mustCLI(t, with("dead", "groups")...)
	if !strings.Contains(text, orders.Group) || !strings.Contains(text, "312 NO_ROUTE for ") {
		t.Fatalf("dead groups printed:\n%s\nwant each group with a whole error", text)
	}

	var shown struct {
		History []struct {
			Attempt int    `json:"attempt"`
			Outcome string `json:"outcome"`
			Error   string `json:"error"`
		} `json:"history"`
	}
	if err := json.Unmarshal([]byte(mustCLI(t, with("dead", "show", unreachable[0].ID.String())...)), &shown); err != nil {
		t.Fatal(err)
	}
	if len(shown.History) != 2 || shown.History[0].Error != "dial tcp 10.0.0.1:5672: i/o timeout" || shown.History[1].Outcome != "dead" {
		t.Fatalf("dead show history: %+v; want both attempts, the first timed out, the second dead", shown.History)
	}

	if out := mustCLI(t, with("dead", "retry", "--group", orders.Group)...); !strings.Contains(out, "3 message(s) pending again") {
		t.Fatalf("dead retry --group printed %q; want 3 retried", out)
	}
	if out := mustCLI(t, with("dead", "discard", "--group", invoices.Group)...); !strings.Contains(out, "2 message(s) discarded") {
		t.Fatalf("dead discard --group printed %q; want 2 discarded", out)
	}
	st, err := db.stats(ctx)
	if err != nil || st.Dead != 0 || st.Pending != 3 {
		t.Fatalf("after the group retry and discard: %+v, %v; want 3 pending, none dead", st, err)
	}
	if code, _, errOut := cli(t, with("dead", "retry", "--group", "nosuchgr")...); code != 1 || !strings.Contains(errOut, "outbox dead groups") {
		t.Fatalf("retry of an unknown group: exit %d, %q; want 1, pointing at dead groups", code, errOut)
	}
}
