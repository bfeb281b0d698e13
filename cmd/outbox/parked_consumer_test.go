package main

import (
	"strings"
	"testing"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/consume"
	"github.com/go-outbox/outbox/publishertest"
)

func TestInboxParkedRetryAndDiscardByIDFindTheirConsumerAsShowDoesOnSQLite(t *testing.T) {
	t.Parallel()
	onSQLite(t, testParkedConsumerFound)
}

func TestInboxParkedRetryAndDiscardByIDFindTheirConsumerAsShowDoesOnPostgreSQL(t *testing.T) {
	t.Parallel()
	onPostgreSQL(t, testParkedConsumerFound)
}

// testParkedConsumerFound: `parked retry ID` and `parked discard ID` need
// --consumer only where `parked show ID` does (when several consumers
// parked the message), and the command a consumer logs when it parks a
// message runs as it is.
func testParkedConsumerFound(t *testing.T, db []string, table func(t *testing.T) inboxTable) {
	with := func(args ...string) []string { return append(append([]string{}, args...), db...) }
	mustCLI(t, with("inbox", "migrate")...)
	ps := table(t).(outbox.ParkStore)
	msgs := publishertest.Messages("orders.paid", 3)
	for _, m := range msgs {
		if err := ps.Park(t.Context(), "billing", m, 5, "no such customer"); err != nil {
			t.Fatal(err)
		}
	}
	if err := ps.Park(t.Context(), "shipping", msgs[2], 5, "no address"); err != nil {
		t.Fatal(err)
	}

	// The very command the consumer logged.
	logged := strings.Fields(consume.RetryCommand("billing", msgs[0].ID))[1:]
	if out := mustCLI(t, with(logged...)...); !strings.Contains(out, "1 parked message(s) of billing marked for a retry") {
		t.Fatalf("%v printed %q; want billing's message marked", logged, out)
	}
	if out := mustCLI(t, with("inbox", "parked", "retry", msgs[1].ID.String())...); !strings.Contains(out, "1 parked message(s) of billing marked for a retry") {
		t.Fatalf("parked retry ID without --consumer printed %q; want the one consumer that parked it found", out)
	}
	if code, _, errOut := cli(t, with("inbox", "parked", "retry", msgs[2].ID.String())...); code == 0 || !strings.Contains(errOut, "--consumer") {
		t.Fatalf("parked retry of a message two consumers parked, without --consumer: exit %d, %q; want an error asking for --consumer", code, errOut)
	}
	if code, _, errOut := cli(t, with("inbox", "parked", "retry", "--all")...); code != 2 || !strings.Contains(errOut, "--consumer is required") {
		t.Fatalf("parked retry --all without --consumer: exit %d, %q; want a usage error", code, errOut)
	}
	if out := mustCLI(t, with("inbox", "parked", "discard", "--consumer", "shipping", msgs[2].ID.String())...); !strings.Contains(out, "1 parked message(s) of shipping discarded") {
		t.Fatalf("parked discard --consumer shipping printed %q", out)
	}
	if out := mustCLI(t, with("inbox", "parked", "discard", msgs[2].ID.String())...); !strings.Contains(out, "1 parked message(s) of billing discarded") {
		t.Fatalf("parked discard ID without --consumer, once one consumer parks it, printed %q; want billing's discarded", out)
	}
}
