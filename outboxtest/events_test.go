package outboxtest_test

import (
	"strings"
	"testing"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/faketb"
	"github.com/go-outbox/outbox/outboxevents"
	"github.com/go-outbox/outbox/outboxtest"
)

type orderPlaced struct {
	ID string `json:"id"`
}

type orderPaid struct {
	ID    string `json:"id"`
	Cents int    `json:"cents"`
}

func eventsTable(t *testing.T) (table, *outboxevents.Registry) {
	reg := outboxevents.NewRegistry(outboxevents.Options{Source: "/test"})
	outboxevents.MustRegister[orderPlaced](reg, "orders.placed")
	outboxevents.MustRegister[orderPaid](reg, "orders.paid")
	var tb table
	for _, e := range []any{orderPlaced{ID: "o-1"}, orderPaid{ID: "o-1", Cents: 4200}} {
		m, err := reg.Message(e, "o-1")
		if err != nil {
			t.Fatal(err)
		}
		tb = append(tb, *m)
	}
	tb = append(tb, outbox.Message{ID: tb[0].ID, Topic: "not.an.event", Payload: []byte("x")})
	return tb, reg
}

func TestRequireEventReturnsTheFirstEventOfItsTypeThatMatches(t *testing.T) {
	t.Parallel()
	pending, reg := eventsTable(t)
	var (
		got orderPaid
		msg outbox.Message
	)
	f := faketb.Run(t, func(tb testing.TB) {
		got, msg = outboxtest.RequireEvent(tb, pending, reg, func(e orderPaid) bool { return e.Cents == 4200 })
	})
	if f.Failures() != "" {
		t.Fatalf("RequireEvent failed on a matching event:\n%s", f.Failures())
	}
	if got != (orderPaid{ID: "o-1", Cents: 4200}) || msg.ID != pending[1].ID {
		t.Fatalf("RequireEvent returned %+v in %s, want the paid event in %s", got, msg.ID, pending[1].ID)
	}
}

func TestRequireEventFailsNamingTheTypeAndListingTheEventsPending(t *testing.T) {
	t.Parallel()
	pending, reg := eventsTable(t)
	f := faketb.Run(t, func(tb testing.TB) {
		outboxtest.RequireEvent(tb, pending, reg, func(e orderPaid) bool { return e.Cents == 1 })
	})
	msg := f.Failures()
	for _, want := range []string{"type outboxtest_test.orderPaid", "orders.placed", "{ID:o-1 Cents:4200}", `topic="not.an.event"`, "unknown"} {
		if !strings.Contains(msg, want) {
			t.Errorf("failure does not show %q:\n%s", want, msg)
		}
	}
}
