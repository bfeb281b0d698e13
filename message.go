package outbox

import (
	"fmt"
	"maps"
	"slices"
	"time"
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
	// MaxHeaderValueBytesDefault is the limit on each header value, in
	// bytes, that a Writer applies unless WriterConfig.MaxHeaderValueBytes
	// says otherwise: 8 KiB, what HTTP servers commonly accept per header.
	MaxHeaderValueBytesDefault = 8 << 10
	// MaxHeadersDefault is the most headers a message may have unless
	// WriterConfig.MaxHeaders says otherwise.
	MaxHeadersDefault = 64
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
// Payload and Headers; the writer fills a zero ID and the store a zero CreatedAt;
// the relay owns the remaining fields. It is defined in outboxdriver, the
// contract stores implement, so that applications, the relay and every store
// share one type; see outboxdriver.Message for the fields.
type Message = outboxdriver.Message

// messageLimits are the limits a Writer applies to the messages it writes.
// A value <= 0 means no limit.
type messageLimits struct {
	headerValueBytes int
	headers          int
	payloadBytes     int
}

// defaultLimits are the limits of a Writer made with a zero WriterConfig.
var defaultLimits = messageLimits{
	headerValueBytes: MaxHeaderValueBytesDefault,
	headers:          MaxHeadersDefault,
	payloadBytes:     MaxPayloadBytesDefault,
}

// validateMessage checks the fields application code fills, within lim.
// Writer.Write runs it on every message before any reaches the store, so
// what it refuses is never stored.
func validateMessage(m *Message, lim messageLimits) error {
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
	case lim.payloadBytes > 0 && len(m.Payload) > lim.payloadBytes:
		return invalidMessage(m, "Payload", fmt.Sprintf("%d bytes", len(m.Payload)),
			fmt.Sprintf("is over the limit of %d bytes; store large bodies elsewhere and send a reference, or raise WriterConfig.MaxPayloadBytes", lim.payloadBytes))
	case !m.AvailableAt.Before(outboxdriver.PausedFrom):
		return invalidMessage(m, "AvailableAt", m.AvailableAt.UTC().Format(time.RFC3339),
			"is in the years that mark the messages of paused topics (`outbox pause`), from "+outboxdriver.PausedFrom.Format("2006")+" on; schedule it earlier")
	case lim.headers > 0 && len(m.Headers) > lim.headers:
		return invalidMessage(m, "Headers", fmt.Sprintf("%d headers", len(m.Headers)),
			fmt.Sprintf("are over the limit of %d headers; move data into the payload, or raise WriterConfig.MaxHeaders", lim.headers))
	}
	// In name order, so that a message with several bad headers always
	// gets the same error.
	for _, name := range slices.Sorted(maps.Keys(m.Headers)) {
		value := m.Headers[name]
		if err := validateHeaderSyntax(name); err != nil {
			return invalidMessage(m, "Headers", shorten(name), err.Error())
		}
		if why := reservedReason(name); why != "" {
			return invalidMessage(m, "Headers", shorten(name), why)
		}
		if !utf8.ValidString(value) || hasNUL(value) {
			return invalidMessage(m, "Headers["+name+"]", shorten(value), "must be valid UTF-8 without NUL bytes")
		}
		if lim.headerValueBytes > 0 && len(value) > lim.headerValueBytes {
			return invalidMessage(m, "Headers["+name+"]", fmt.Sprintf("%d bytes", len(value)),
				fmt.Sprintf("is over the limit of %d bytes per header value; move large data into the payload, or raise WriterConfig.MaxHeaderValueBytes", lim.headerValueBytes))
		}
	}
	return nil
}

// ValidateHeaderName reports whether name can be used as a header name: 1 to
// MaxHeaderNameLength characters from the HTTP token set (letters, digits and
// !#$%&'*+-.^_`|~), so it maps onto HTTP, AMQP, Kafka and NATS headers alike,
// and not a reserved name, in any case. Reserved are the names a publisher
// sets itself (Outbox-Message-Id, Outbox-Key, Outbox-Topic,
// Idempotency-Key, the Standard Webhooks webhook-id, webhook-timestamp and
// webhook-signature) and those that would steer a transport rather than
// travel with the message: Authorization, Cookie, Proxy-Authorization, Host
// and the HTTP connection's own headers (Connection, Content-Length,
// Keep-Alive, Proxy-Connection, TE, Trailer, Transfer-Encoding, Upgrade);
// every Nats-* header (NATS JetStream acts on them); CC and BCC (RabbitMQ
// routes on them). The error says why and what to do instead.
func ValidateHeaderName(name string) error {
	if err := validateHeaderSyntax(name); err != nil {
		return err
	}
	if why := reservedReason(name); why != "" {
		return fmt.Errorf("header name %q is %s", name, why)
	}
	return nil
}

// validateHeaderSyntax checks the length and characters of a header name.
func validateHeaderSyntax(name string) error {
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
