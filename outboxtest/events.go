package outboxtest

import (
	"fmt"
	"strings"
	"testing"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/outboxevents"
)

// RequireEvent fails the test unless a pending message of the table decodes
// with reg to an event of type E that match accepts (nil accepts any), and
// returns the first such event and its message. The failure lists what is
// pending, with each message's event type or why it does not decode.
func RequireEvent[E any](t testing.TB, table Table, reg *outboxevents.Registry, match func(E) bool) (E, outbox.Message) {
	t.Helper()
	pending := readPending(t, table)
	for _, m := range pending {
		if e, ok := decodeAs[E](reg, m); ok && (match == nil || match(e)) {
			return e, m
		}
	}
	var zero E
	var b strings.Builder
	fmt.Fprintf(&b, "outboxtest: no pending event of type %T matches; have %d message(s):", zero, len(pending))
	for _, m := range pending {
		event, name, err := reg.Decode(m)
		if err != nil {
			fmt.Fprintf(&b, "\n  %s topic=%q: %v", m.ID, m.Topic, err)
			continue
		}
		fmt.Fprintf(&b, "\n  %s %s key=%q: %+v", m.ID, name, m.Key, event)
	}
	t.Fatalf("%s", b.String())
	return zero, outbox.Message{}
}

// decodeAs decodes m with reg and reports whether it carries an E.
func decodeAs[E any](reg *outboxevents.Registry, m outbox.Message) (E, bool) {
	event, _, err := reg.Decode(m)
	if err != nil {
		var zero E
		return zero, false
	}
	e, ok := event.(E)
	return e, ok
}
