package outboxtest

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/go-outbox/outbox"
)

// Table is what the assertions read: the messages of one outbox table that
// wait to be published. outboxpgtest and outboxsqlitetest provide one for
// their stores.
type Table interface {
	// Pending returns the pending messages (in flight included), oldest
	// first.
	Pending(ctx context.Context) ([]outbox.Message, error)
}

// Match describes a message an assertion looks for. Every field that is set
// must hold; a zero Match matches any message.
type Match struct {
	// Topic, if set, must equal the message's topic.
	Topic string
	// Key, if set, must equal the message's key.
	Key string
	// Headers lists headers the message must have with these values; it
	// may have others.
	Headers map[string]string
	// Payload, if set, must accept the message's payload.
	Payload func(payload []byte) bool
}

// Matches reports whether m describes msg.
func (m Match) Matches(msg outbox.Message) bool {
	if m.Topic != "" && m.Topic != msg.Topic {
		return false
	}
	if m.Key != "" && m.Key != msg.Key {
		return false
	}
	for name, want := range m.Headers {
		if got, ok := msg.Headers[name]; !ok || got != want {
			return false
		}
	}
	return m.Payload == nil || m.Payload(msg.Payload)
}

// String shows the fields that are set, for failure messages.
func (m Match) String() string {
	var parts []string
	if m.Topic != "" {
		parts = append(parts, fmt.Sprintf("Topic: %q", m.Topic))
	}
	if m.Key != "" {
		parts = append(parts, fmt.Sprintf("Key: %q", m.Key))
	}
	if len(m.Headers) > 0 {
		parts = append(parts, "Headers: "+formatHeaders(m.Headers))
	}
	if m.Payload != nil {
		parts = append(parts, "Payload: func")
	}
	return "Match{" + strings.Join(parts, ", ") + "}"
}

// RequireWritten fails the test unless the table's pending messages include
// a different one for each match, and returns them in the order of matches.
// The failure names the matches left over and lists what is pending.
func RequireWritten(t testing.TB, table Table, matches ...Match) []outbox.Message {
	t.Helper()
	return RequireMessages(t, readPending(t, table), matches...)
}

// RequireNothingWritten fails the test if the table has pending messages,
// and lists them.
func RequireNothingWritten(t testing.TB, table Table) {
	t.Helper()
	if pending := readPending(t, table); len(pending) > 0 {
		t.Fatalf("outboxtest: want no pending message, have %d:\n%s", len(pending), list(pending))
	}
}

// RequireMessages is RequireWritten on messages at hand, such as those Drain
// returns or a Recorder holds: it fails the test unless msgs include a
// different message for each match, and returns them in the order of
// matches.
func RequireMessages(t testing.TB, msgs []outbox.Message, matches ...Match) []outbox.Message {
	t.Helper()
	picked, missing := assign(msgs, matches)
	if len(missing) > 0 {
		var b strings.Builder
		for _, i := range missing {
			fmt.Fprintf(&b, "outboxtest: no message matches %v\n", matches[i])
		}
		fmt.Fprintf(&b, "have %d message(s):\n%s", len(msgs), list(msgs))
		t.Fatalf("%s", b.String())
	}
	out := make([]outbox.Message, len(matches))
	for i, j := range picked {
		out[i] = msgs[j]
	}
	return out
}

// assign gives each match a message of its own (a bipartite matching by
// augmenting paths), so that a broad match does not take the only message a
// narrow one could have, and returns the message index per match and the
// matches left without one.
func assign(msgs []outbox.Message, matches []Match) (picked []int, missing []int) {
	owner := make([]int, len(msgs)) // message index -> match index, or -1
	for i := range owner {
		owner[i] = -1
	}
	var try func(mi int, seen []bool) bool
	try = func(mi int, seen []bool) bool {
		for j := range msgs {
			if seen[j] || !matches[mi].Matches(msgs[j]) {
				continue
			}
			seen[j] = true
			if owner[j] < 0 || try(owner[j], seen) {
				owner[j] = mi
				return true
			}
		}
		return false
	}
	for mi := range matches {
		if !try(mi, make([]bool, len(msgs))) {
			missing = append(missing, mi)
		}
	}
	picked = make([]int, len(matches))
	for j, mi := range owner {
		if mi >= 0 {
			picked[mi] = j
		}
	}
	return picked, missing
}

func readPending(t testing.TB, table Table) []outbox.Message {
	t.Helper()
	pending, err := table.Pending(t.Context())
	if err != nil {
		t.Fatalf("outboxtest: read the pending messages: %v", err)
	}
	return pending
}

// list shows messages one a line, payloads cut short, for failure messages.
func list(msgs []outbox.Message) string {
	if len(msgs) == 0 {
		return "  (none)"
	}
	var b strings.Builder
	for i, m := range msgs {
		if i > 0 {
			b.WriteByte('\n')
		}
		fmt.Fprintf(&b, "  %s topic=%q key=%q headers=%s payload=%s", m.ID, m.Topic, m.Key, formatHeaders(m.Headers), shortPayload(m.Payload))
	}
	return b.String()
}

func formatHeaders(h map[string]string) string {
	var parts []string
	for _, name := range slices.Sorted(maps.Keys(h)) {
		parts = append(parts, fmt.Sprintf("%s=%q", name, h[name]))
	}
	return "{" + strings.Join(parts, " ") + "}"
}

// shortPayload keeps failure messages readable for large payloads.
func shortPayload(p []byte) string {
	const most = 120
	if len(p) <= most {
		return fmt.Sprintf("%q", p)
	}
	return fmt.Sprintf("%q... (%d bytes)", p[:most], len(p))
}
