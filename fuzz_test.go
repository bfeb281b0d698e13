package outbox

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzMessageValidation feeds arbitrary fields to the validation every write
// runs: it must never panic, and whatever it accepts must be storable and
// routable by every store and broker.
func FuzzMessageValidation(f *testing.F) {
	f.Add("orders.created", "order-1", "content-type", "application/json", []byte(`{"id":1}`))
	f.Add("", "", "", "", []byte(nil))
	f.Add("a\x00b", "k\x00", "bad name", "v", []byte{0xff})
	f.Add(strings.Repeat("t", MaxTopicLength+1), "k", "x-trace", "00-abc", []byte("x"))
	f.Add("t", "k", "h\xff", "\xff", []byte("x"))
	f.Fuzz(func(t *testing.T, topic, key, header, value string, payload []byte) {
		m := Message{Topic: topic, Key: key, Payload: payload, Headers: map[string]string{header: value}}
		err := m.validate(1 << 10)
		if err != nil {
			if _, ok := err.(*MessageError); !ok {
				t.Fatalf("validate returned %T, want *MessageError", err)
			}
			return
		}
		switch {
		case topic == "" || len(topic) > MaxTopicLength || !utf8.ValidString(topic) || hasControl(topic):
			t.Fatalf("accepted topic %q", topic)
		case len(key) > MaxKeyLength || !utf8.ValidString(key) || hasNUL(key):
			t.Fatalf("accepted key %q", key)
		case len(payload) > 1<<10:
			t.Fatalf("accepted a %d-byte payload over the 1 KiB limit", len(payload))
		case ValidateHeaderName(header) != nil || !utf8.ValidString(value) || hasNUL(value):
			t.Fatalf("accepted header %q: %q", header, value)
		}
	})
}
