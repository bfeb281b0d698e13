package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/publishertest"
)

func TestInboxParkedTakenLongAgoIsFlaggedAndRetriedInBulkOnPostgreSQL(t *testing.T) {
	t.Parallel()
	onPostgreSQL(t, testParkedTakenLongAgo)
}

func TestInboxParkedTakenLongAgoIsFlaggedAndRetriedInBulkOnSQLite(t *testing.T) {
	t.Parallel()
	onSQLite(t, testParkedTakenLongAgo)
}

// testParkedTakenLongAgo: a message taken longer ago than --taken-older-than
// (default 15m) is flagged by `inbox status` as likely left by a dead
// process, with the command that takes such messages back; `parked retry
// --taken-older-than D` takes back and retries every one of them.
func testParkedTakenLongAgo(t *testing.T, db []string, table func(t *testing.T) inboxTable) {
	with := func(args ...string) []string { return append(append([]string{}, args...), db...) }
	mustCLI(t, with("inbox", "migrate")...)
	tb := table(t)
	ks := tb.(outbox.KeyParkStore)
	msgs := publishertest.Messages("orders.paid", 2)
	for _, m := range msgs {
		if err := ks.Park(t.Context(), "billing", m, 5, "no such customer"); err != nil {
			t.Fatal(err)
		}
	}
	mustCLI(t, with("inbox", "parked", "retry", "--consumer", "billing", "--all")...)
	if got, err := ks.TakeRetries(t.Context(), "billing", 10); err != nil || len(got) != 2 {
		t.Fatalf("take the retries of billing: %v, %v; want 2", got, err)
	}
	fix := "outbox inbox parked retry --consumer billing --taken-older-than 15m"
	if out := mustCLI(t, with("inbox", "status")...); strings.Contains(out, fix) || strings.Contains(out, "dead process") {
		t.Fatalf("inbox status printed %q with messages taken just now; want none flagged", out)
	}
	fix = "outbox inbox parked retry --consumer billing --taken-older-than 1ns"
	if out := mustCLI(t, with("inbox", "status", "--taken-older-than", "1ns")...); !strings.Contains(out, "2 message(s) taken over 1ns ago") || !strings.Contains(out, fix) {
		t.Fatalf("inbox status --taken-older-than 1ns printed %q; want the 2 taken flagged, with %q", out, fix)
	}
	var st struct {
		Consumers []struct {
			TakenOld int64 `json:"taken_older"`
		} `json:"consumers"`
	}
	if err := json.Unmarshal([]byte(mustCLI(t, with("inbox", "status", "--json", "--taken-older-than", "1ns")...)), &st); err != nil || len(st.Consumers) != 1 || st.Consumers[0].TakenOld != 2 {
		t.Fatalf("inbox status --json --taken-older-than 1ns: %+v, %v; want billing with 2 taken_older", st, err)
	}
	if code, _, errOut := cli(t, with("inbox", "parked", "retry", "--consumer", "billing", "--all", "--taken-older-than", "1ns")...); code != 2 {
		t.Fatalf("inbox parked retry --all --taken-older-than: exit %d, %q; want a usage error (exit 2)", code, errOut)
	}
	if out := mustCLI(t, with("inbox", "parked", "retry", "--consumer", "billing", "--taken-older-than", "15m")...); !strings.Contains(out, "0 parked message(s) of billing") {
		t.Fatalf("inbox parked retry --taken-older-than 15m with messages taken just now printed %q; want none taken back", out)
	}
	if out := mustCLI(t, with("inbox", "parked", "retry", "--consumer", "billing", "--taken-older-than", "1ns")...); !strings.Contains(out, "2 parked message(s) of billing marked for a retry") {
		t.Fatalf("inbox parked retry --taken-older-than 1ns printed %q; want both taken back and marked", out)
	}
	if got, err := ks.TakeRetries(t.Context(), "billing", 10); err != nil || len(got) != 2 {
		t.Fatalf("take the retries of billing once taken back: %v, %v; want 2", got, err)
	}
}
