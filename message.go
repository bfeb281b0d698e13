package outbox

import (
	"fmt"
	"unicode/utf8"

	"github.com/go-outbox/outbox/outboxdriver"
)

// Limits on the fields of a Message. They keep every message storable in every
// supported store and routable by every supported broker.
const (
	// MaxTopicLength is the longest topic, in bytes.
	MaxTopicLength = 255
	// MaxKeyLength is the longest key, in bytes.
	MaxKeyLength = 1024
	// MaxHeaderNameLength is the longest header name, in bytes.
	MaxHeaderNameLength = 255
	// MaxPayloadBytesDefault is the payload limit a Writer applies unless
	// WriterConfig.MaxPayloadBytes says otherwise.
	MaxPayloadBytesDefault = 1 << 20
)

// Status is where a stored message is in its life (outboxdriver.Status).
type Status = outboxdriver.Status

// The statuses a stored message can have.
const (
	// StatusPending messages wait to be published (or are being published
	// under a lease).
	StatusPending = outboxdriver.StatusPending
	// StatusPublished messages were confirmed by the broker and are kept only
	// because the relay's Retention is above zero.
	StatusPublished = outboxdriver.StatusPublished
	// StatusDead messages failed permanently or ran out of attempts. They stay
	// until an operator retries or discards them.
	StatusDead = outboxdriver.StatusDead
)

// Message is one message to publish. Application code fills Topic, Key,
// Payload and Headers; the writer fills ID and CreatedAt when they are zero;
// the relay owns the remaining fields. It is defined in outboxdriver, the
// contract stores implement, so that applications, the relay and every store
// share one type; see outboxdriver.Message for the fields.
type Message = outboxdriver.Message

// validate checks the fields application code fills. maxPayload <= 0 means no
// payload limit.
func validateMessage(m *Message, maxPayload int) error {
	switch {
	case m.Topic == "":
		return invalidMessage(m, "Topic", "", "is empty; set it to the event type or destination, e.g. \"orders.created\"")
	case len(m.Topic) > MaxTopicLength:
		return invalidMessage(m, "Topic", shorten(m.Topic), fmt.Sprintf("is %d bytes; the limit is %d", len(m.Topic), MaxTopicLength))
	case !utf8.ValidString(m.Topic) || hasControl(m.Topic):
		return invalidMessage(m, "Topic", shorten(m.Topic), "must be valid UTF-8 without control characters")
	case len(m.Key) > MaxKeyLength:
		return invalidMessage(m, "Key", shorten(m.Key), fmt.Sprintf("is %d bytes; the limit is %d", len(m.Key), MaxKeyLength))
	case !utf8.ValidString(m.Key) || hasNUL(m.Key):
		return invalidMessage(m, "Key", shorten(m.Key), "must be valid UTF-8 without NUL bytes")
	case maxPayload > 0 && len(m.Payload) > maxPayload:
		return invalidMessage(m, "Payload", fmt.Sprintf("%d bytes", len(m.Payload)),
			fmt.Sprintf("is over the limit of %d bytes; store large bodies elsewhere and send a reference, or raise WriterConfig.MaxPayloadBytes", maxPayload))
	}
	for name, value := range m.Headers {
		if err := ValidateHeaderName(name); err != nil {
			return invalidMessage(m, "Headers", shorten(name), err.Error())
		}
		if !utf8.ValidString(value) || hasNUL(value) {
			return invalidMessage(m, "Headers["+name+"]", shorten(value), "must be valid UTF-8 without NUL bytes")
		}
	}
	return nil
}

// ValidateHeaderName reports whether name can be used as a header name: 1 to
// MaxHeaderNameLength characters from the HTTP token set (letters, digits and
// !#$%&'*+-.^_`|~), so it maps onto HTTP, AMQP, Kafka and NATS headers alike.
func ValidateHeaderName(name string) error {
	if name == "" {
		return fmt.Errorf("header name is empty")
	}
	if len(name) > MaxHeaderNameLength {
		return fmt.Errorf("header name is %d bytes; the limit is %d", len(name), MaxHeaderNameLength)
	}
	for i := 0; i < len(name); i++ {
		if !isTokenChar(name[i]) {
			return fmt.Errorf("header name %q has the character %q at %d; use letters, digits and !#$%%&'*+-.^_`|~", name, name[i], i)
		}
	}
	return nil
}

func isTokenChar(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	switch c {
	case '!', '#', '$', '%', '&', '\'', '*', '+', '-', '.', '^', '_', '`', '|', '~':
		return true
	}
	return false
}

func hasControl(s string) bool {
	for _, r := range s {
		if r < 0x20 || r == 0x7f {
			return true
		}
	}
	return false
}

func hasNUL(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] == 0 {
			return true
		}
	}
	return false
}

// shorten keeps error messages readable when a field is huge.
func shorten(s string) string {
	const max = 64
	if len(s) <= max {
		return s
	}
	return s[:max] + "..."
}
