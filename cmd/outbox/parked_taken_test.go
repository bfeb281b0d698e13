package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/publishertest"
)

func TestInboxParkedTakenAndStalledOnPostgreSQL(t *testing.T) {
	t.Parallel()
	onPostgreSQL(t, testParkedTakenAndStalled)
}

func TestInboxParkedTakenAndStalledOnSQLite(t *testing.T) {
	t.Parallel()
	onSQLite(t, testParkedTakenAndStalled)
}

// testParkedTakenAndStalled: a message a consumer process took for a retry
// shows as taken, and retry and discard refuse it without --taken (it is in
// a handler); a key whose waiting first message nobody requested nor took
// shows as stalled in `parked list` and `inbox status`, with the command
// that moves it on.
func testParkedTakenAndStalled(t *testing.T, db []string, table func(t *testing.T) inboxTable) {
	with := func(args ...string) []string { return append(append([]string{}, args...), db...) }
	mustCLI(t, with("inbox", "migrate")...)
	tb := table(t)
	ks := tb.(outbox.KeyParkStore)
	msgs := publishertest.Messages("orders.paid", 2)
	paid, cancelled := msgs[0], msgs[1]
	paid.Key, cancelled.Key = "order-1", "order-1"
	if err := ks.Park(t.Context(), "billing", paid, 5, "no such customer"); err != nil {
		t.Fatal(err)
	}
	if _, err := ks.ParkBehind(t.Context(), "billing", cancelled); err != nil {
		t.Fatal(err)
	}
	mustCLI(t, with("inbox", "parked", "retry", "--consumer", "billing", paid.ID.String())...)
	if got, err := ks.TakeRetries(t.Context(), "billing", 10); err != nil || len(got) != 1 {
		t.Fatalf("take the retry of %s: %v, %v", paid.ID, got, err)
	}
	if out := mustCLI(t, with("inbox", "parked", "list")...); !strings.Contains(out, "taken ") {
		t.Fatalf("inbox parked list printed %q; want %s shown taken", out, paid.ID)
	}
	for _, verb := range []string{"retry", "discard"} {
		code, _, errOut := cli(t, with("inbox", "parked", verb, "--consumer", "billing", paid.ID.String())...)
		take := "outbox inbox parked " + verb + " --consumer billing --taken " + paid.ID.String()
		if code != 1 || !strings.Contains(errOut, "taken by a consumer process") || !strings.Contains(errOut, take) || strings.Contains(errOut, "--force") {
			t.Fatalf("inbox parked %s of a message in a handler: exit %d, %q; want exit 1 saying it is taken, naming %q and not --force", verb, code, errOut, take)
		}
	}
	if out := mustCLI(t, with("inbox", "parked", "retry", "--consumer", "billing", "--all")...); !strings.Contains(out, "0 parked message(s) of billing marked") ||
		!strings.Contains(out, "1 taken by a consumer process") {
		t.Fatalf("inbox parked retry --all with the head in a handler printed %q; want none marked, the taken one left alone", out)
	}
	// --force is for overtaken messages: it does not take one back.
	if code, _, errOut := cli(t, with("inbox", "parked", "discard", "--consumer", "billing", "--force", paid.ID.String())...); code == 0 {
		t.Fatalf("inbox parked discard --force of a taken message: exit 0, %q; want it refused (--force is not --taken)", errOut)
	}
	if code, _, errOut := cli(t, with("inbox", "parked", "retry", "--consumer", "billing", "--force", paid.ID.String())...); code != 1 || !strings.Contains(errOut, "--taken") {
		t.Fatalf("inbox parked retry --force of a taken message: exit %d, %q; want it refused, naming --taken", code, errOut)
	}
	// Its process stopped: the operator takes it back and discards it.
	if out := mustCLI(t, with("inbox", "parked", "discard", "--consumer", "billing", "--taken", paid.ID.String())...); !strings.Contains(out, "1 parked message(s) of billing discarded") {
		t.Fatalf("inbox parked discard --taken printed %q", out)
	}
	if out := mustCLI(t, with("inbox", "parked", "list")...); !strings.Contains(out, "next of its key, retry requested") {
		t.Fatalf("inbox parked list printed %q; want %s next of its key, its retry requested", out, cancelled.ID)
	}

	// A release before taken messages were marked left the key's next
	// taken by a process that stopped: nobody will go on with it.
	if got, err := ks.TakeRetries(t.Context(), "billing", 10); err != nil || len(got) != 1 {
		t.Fatalf("take the retry of %s: %v, %v", cancelled.ID, got, err)
	}
	if _, err := tb.ForgetTaken(t.Context(), "billing"); err != nil {
		t.Fatal(err)
	}
	fix := "outbox inbox parked retry --consumer billing " + cancelled.ID.String()
	if out := mustCLI(t, with("inbox", "parked", "list")...); !strings.Contains(out, "stalled") || !strings.Contains(out, fix) {
		t.Fatalf("inbox parked list printed %q; want %s shown stalled, with %q", out, cancelled.ID, fix)
	}
	if out := mustCLI(t, with("inbox", "status")...); !strings.Contains(out, "STALLED") || !strings.Contains(out, "outbox inbox parked retry --consumer billing") {
		t.Fatalf("inbox status printed %q; want a STALLED column and the command that moves the key on", out)
	}
	var st struct {
		Consumers []struct {
			Stalled int64 `json:"stalled"`
			Taken   int64 `json:"taken"`
		} `json:"consumers"`
	}
	if err := json.Unmarshal([]byte(mustCLI(t, with("inbox", "status", "--json")...)), &st); err != nil || len(st.Consumers) != 1 || st.Consumers[0].Stalled != 1 {
		t.Fatalf("inbox status --json: %+v, %v; want billing with 1 stalled", st, err)
	}
	mustCLI(t, with("inbox", "parked", "retry", "--consumer", "billing", cancelled.ID.String())...)
	if out := mustCLI(t, with("inbox", "status")...); strings.Contains(out, "outbox inbox parked retry") {
		t.Fatalf("inbox status printed %q once the stalled message's retry was requested; want no stall reported", out)
	}
}
