package outboxtest_test

import (
	"bytes"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/faketb"
	"github.com/go-outbox/outbox/outboxtest"
)

func pendingOrders() table {
	return table{
		{ID: uuid.Must(uuid.NewV7()), Topic: "orders.created", Key: "o-1", Payload: []byte(`{"id":"o-1"}`), Headers: map[string]string{"content-type": "application/json"}},
		{ID: uuid.Must(uuid.NewV7()), Topic: "orders.paid", Key: "o-1", Payload: []byte(`{"id":"o-1","cents":4200}`)},
	}
}

func TestRequireWrittenPassesAndReturnsTheMatchedMessagesInTheOrderOfTheMatches(t *testing.T) {
	t.Parallel()
	pending := pendingOrders()
	var got []outbox.Message
	f := faketb.Run(t, func(tb testing.TB) {
		got = outboxtest.RequireWritten(tb, pending,
			outboxtest.Match{Topic: "orders.paid", Payload: func(p []byte) bool { return bytes.Contains(p, []byte("4200")) }},
			outboxtest.Match{Key: "o-1", Headers: map[string]string{"content-type": "application/json"}},
		)
	})
	if f.Failures() != "" {
		t.Fatalf("RequireWritten failed on messages that match:\n%s", f.Failures())
	}
	if len(got) != 2 || got[0].ID != pending[1].ID || got[1].ID != pending[0].ID {
		t.Fatalf("RequireWritten returned %v, want the paid then the created message", got)
	}
}

func TestRequireWrittenOnAMissingMessageFailsNamingTheMatchAndListingWhatIsPending(t *testing.T) {
	t.Parallel()
	pending := pendingOrders()
	f := faketb.Run(t, func(tb testing.TB) {
		outboxtest.RequireWritten(tb, pending, outboxtest.Match{Topic: "orders.shipped", Key: "o-1"})
		tb.Errorf("RequireWritten returned after its failure")
	})
	msg := f.Failures()
	for _, want := range []string{`Topic: "orders.shipped"`, `Key: "o-1"`, "have 2 message(s)", pending[0].ID.String(), `topic="orders.paid"`, `{\"id\":\"o-1\"}`} {
		if !strings.Contains(msg, want) {
			t.Errorf("failure does not name %s:\n%s", want, msg)
		}
	}
	if strings.Contains(msg, "returned after") {
		t.Errorf("RequireWritten did not stop the test: %s", msg)
	}
}

func TestRequireWrittenWantsAMessageOfItsOwnForEachMatch(t *testing.T) {
	t.Parallel()
	pending := pendingOrders()
	f := faketb.Run(t, func(tb testing.TB) {
		outboxtest.RequireWritten(tb, pending, outboxtest.Match{Topic: "orders.paid"}, outboxtest.Match{Topic: "orders.paid"})
	})
	if !strings.Contains(f.Failures(), `no message matches Match{Topic: "orders.paid"}`) {
		t.Fatalf("two matches for one message did not fail:\n%s", f.Failures())
	}

	// A broad match given first must not take the only message a narrow
	// one can have.
	f = faketb.Run(t, func(tb testing.TB) {
		outboxtest.RequireWritten(tb, pending, outboxtest.Match{Key: "o-1"}, outboxtest.Match{Topic: "orders.created"})
	})
	if f.Failures() != "" {
		t.Fatalf("a broad match took the narrow one's message:\n%s", f.Failures())
	}
}

func TestRequireWrittenFailsWhenTheTableCannotBeRead(t *testing.T) {
	t.Parallel()
	f := faketb.Run(t, func(tb testing.TB) { outboxtest.RequireWritten(tb, brokenTable{}, outboxtest.Match{}) })
	if !strings.Contains(f.Failures(), "connection refused") {
		t.Fatalf("failure does not say why the read failed:\n%s", f.Failures())
	}
}

func TestRequireNothingWrittenFailsListingThePendingMessages(t *testing.T) {
	t.Parallel()
	pending := pendingOrders()
	f := faketb.Run(t, func(tb testing.TB) { outboxtest.RequireNothingWritten(tb, pending) })
	if msg := f.Failures(); !strings.Contains(msg, "want no pending message, have 2") || !strings.Contains(msg, `topic="orders.created"`) {
		t.Fatalf("failure does not list what is pending:\n%s", msg)
	}
	if f := faketb.Run(t, func(tb testing.TB) { outboxtest.RequireNothingWritten(tb, table{}) }); f.Failures() != "" {
		t.Fatalf("RequireNothingWritten failed on an empty table:\n%s", f.Failures())
	}
}

func TestRequireMessagesChecksMessagesAtHand(t *testing.T) {
	t.Parallel()
	f := faketb.Run(t, func(tb testing.TB) {
		outboxtest.RequireMessages(tb, pendingOrders(), outboxtest.Match{Topic: "orders.refunded"})
	})
	if !strings.Contains(f.Failures(), `no message matches Match{Topic: "orders.refunded"}`) {
		t.Fatalf("failure does not name the match:\n%s", f.Failures())
	}
}
