package outboxpubsub

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"unicode/utf8"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"github.com/google/uuid"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/go-outbox/outbox"
)

// The attributes every Pub/Sub message carries besides its headers. Their
// names are the ones an outbox Writer refuses as header names, so no header
// can pose as them.
const (
	// AttrID carries Message.ID as text; consumers drop a message whose id
	// they have seen (the inbox does).
	AttrID = "outbox-message-id"
	// AttrKey carries Message.Key; it is absent when the key is empty.
	AttrKey = "outbox-key"
	// AttrTopic carries Message.Topic, which the Pub/Sub topic may not show
	// (Config.Topic, TopicPrefix or TopicFor).
	AttrTopic = "outbox-topic"
)

// Pub/Sub's limits on a message (see its quotas page). A message over one
// of them fails permanently before it is sent: sent, it would fail its whole
// publish request, other messages included.
const (
	// MaxAttributes is the most attributes a message may have: the
	// headers and the two or three above (two when the key is empty).
	MaxAttributes = 100
	// MaxAttributeKeyBytes is the longest attribute name, in bytes.
	MaxAttributeKeyBytes = 256
	// MaxAttributeValueBytes is the longest attribute value, in bytes.
	MaxAttributeValueBytes = 1024
	// MaxMessageBytes is the largest message, counting its data, attributes
	// and ordering key.
	MaxMessageBytes = 10_000_000
	// MaxOrderingKeyBytes is the longest ordering key, in bytes.
	MaxOrderingKeyBytes = 1024
)

// ErrHeaderRefused means a message has a header Pub/Sub would refuse as an
// attribute (a value over MaxAttributeValueBytes, a name starting with
// "goog", too many headers). It is permanent: the error names the header.
var ErrHeaderRefused = errors.New("header Pub/Sub refuses as an attribute")

// ErrTooLarge means a message is over MaxMessageBytes. It is permanent.
var ErrTooLarge = errors.New("message over Pub/Sub's limit of 10 MB")

// errNoID is the cause for a message without id: consumers could not tell
// it from the others.
var errNoID = errors.New("message has no id; write messages through an outbox Writer")

// message builds the Pub/Sub message of m, or returns why Pub/Sub would
// refuse it.
func (p *Publisher) message(m *outbox.Message, topic string) (*pubsub.Message, error) {
	if m.ID == uuid.Nil {
		return nil, errNoID
	}
	if err := topicIDError(topicID(topic)); err != nil {
		return nil, fmt.Errorf("topic %q: %w", topic, err)
	}
	if !utf8.ValidString(m.Topic) || !utf8.ValidString(m.Key) {
		return nil, errors.New("topic and key must be valid UTF-8 (Pub/Sub attributes are text)")
	}
	own := 2 // id and topic; an empty key spends no attribute
	if m.Key != "" {
		own++
	}
	if n := len(m.Headers) + own; n > MaxAttributes {
		return nil, fmt.Errorf("%w: %d headers, and Pub/Sub takes at most %d attributes, %d of them the outbox's; move data into the payload",
			ErrHeaderRefused, len(m.Headers), MaxAttributes, own)
	}
	switch {
	case p.cfg.OrderingKeys && len(m.Key) > MaxOrderingKeyBytes:
		return nil, fmt.Errorf("key of %d bytes: Pub/Sub's limit on an ordering key is %d; use shorter keys", len(m.Key), MaxOrderingKeyBytes)
	case len(m.Key) > MaxAttributeValueBytes:
		return nil, fmt.Errorf("key of %d bytes: Pub/Sub's limit on the %s attribute's value is %d; use shorter keys", len(m.Key), AttrKey, MaxAttributeValueBytes)
	case len(m.Topic) > MaxAttributeValueBytes:
		return nil, fmt.Errorf("topic of %d bytes: Pub/Sub's limit on the %s attribute's value is %d", len(m.Topic), AttrTopic, MaxAttributeValueBytes)
	}
	attrs := make(map[string]string, len(m.Headers)+own)
	// In name order, so that a message with several bad headers always
	// gets the same error.
	for _, name := range slices.Sorted(maps.Keys(m.Headers)) {
		value := m.Headers[name]
		if why := attributeError(name, value); why != "" {
			return nil, fmt.Errorf("%w: header %q %s", ErrHeaderRefused, name, why)
		}
		attrs[name] = value
	}
	attrs[AttrID], attrs[AttrTopic] = m.ID.String(), m.Topic
	if m.Key != "" {
		attrs[AttrKey] = m.Key
	}
	msg := &pubsub.Message{Data: m.Payload, Attributes: attrs}
	if p.cfg.OrderingKeys {
		msg.OrderingKey = m.Key
	}
	// As the client counts it: encoded, framing included, against what a
	// request to the topic leaves for one message. A rougher sum lets a
	// message just under 10 MB through, and the client then refuses it.
	limit := maxEncodedBytes(p.fullName(topic))
	size := encodedSizeAtMost(msg)
	if size > limit {
		// Near the limit only: the exact size, as the client counts it.
		size = proto.Size(&pubsubpb.PubsubMessage{Data: msg.Data, Attributes: msg.Attributes, OrderingKey: msg.OrderingKey})
	}
	if size > limit {
		return nil, fmt.Errorf("%w: %d bytes encoded, over the %d a request to the topic holds; store large bodies elsewhere and send a reference", ErrTooLarge, size, limit)
	}
	return msg, nil
}

// encodedSizeAtMost returns a bound on the encoded size of msg, never
// below what proto.Size counts: each field as protobuf frames it (a one-byte
// tag, the length as a varint, the bytes), and every attribute's key and
// value framed even when empty. It is a sum over the fields, where
// proto.Size walks the message by reflection: most of a batch's cost
// before it is sent, measured in the side-by-side benchmark.
func encodedSizeAtMost(msg *pubsub.Message) int {
	field := func(n int) int { return 1 + protowire.SizeVarint(uint64(n)) + n }
	size := field(len(msg.Data)) + field(len(msg.OrderingKey))
	for k, v := range msg.Attributes {
		size += field(field(len(k)) + field(len(v)))
	}
	return size
}

// maxEncodedBytes returns the largest encoded message the client takes for
// the topic named fullName: a publish request is at most
// pubsub.MaxPublishRequestBytes, with the topic's name and the message's
// own framing (at most 5 bytes) in it.
func maxEncodedBytes(fullName string) int {
	return pubsub.MaxPublishRequestBytes - (1 + protowire.SizeVarint(uint64(len(fullName))) + len(fullName)) - 5
}

// attributeError returns why Pub/Sub refuses name=value as an attribute, or
// "". Outbox header names are at most 255 bytes and values valid UTF-8
// when a Writer stored them; the checks hold for messages from elsewhere.
func attributeError(name, value string) string {
	switch {
	case name == "":
		return "has an empty name"
	case len(name) > MaxAttributeKeyBytes:
		return fmt.Sprintf("has a name of %d bytes; Pub/Sub's limit is %d", len(name), MaxAttributeKeyBytes)
	case strings.HasPrefix(strings.ToLower(name), "goog"):
		return "starts with \"goog\", which Pub/Sub reserves for its own attributes; use another header name"
	case len(value) > MaxAttributeValueBytes:
		return fmt.Sprintf("has a value of %d bytes; Pub/Sub's limit is %d per attribute: move large data into the payload", len(value), MaxAttributeValueBytes)
	case !utf8.ValidString(name) || !utf8.ValidString(value):
		return "is not valid UTF-8 (Pub/Sub attributes are text)"
	}
	return ""
}

// topicID returns the topic id of name, a topic id or a full name
// ("projects/p/topics/t").
func topicID(name string) string {
	if i := strings.LastIndexByte(name, '/'); i >= 0 {
		return name[i+1:]
	}
	return name
}

// topicIDError returns why Pub/Sub would refuse id as a topic id, or nil: 3
// to 255 characters, letters, digits and -_.~+%, starting with a letter, not
// with "goog".
func topicIDError(id string) error {
	switch {
	case len(id) < 3 || len(id) > 255:
		return fmt.Errorf("a Pub/Sub topic id is 3 to 255 characters, %q has %d", id, len(id))
	case !isLetter(id[0]):
		return fmt.Errorf("a Pub/Sub topic id starts with a letter, %q does not", id)
	case strings.HasPrefix(strings.ToLower(id), "goog"):
		return fmt.Errorf("a Pub/Sub topic id may not start with \"goog\", %q does", id)
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !isLetter(c) && !('0' <= c && c <= '9') && !strings.ContainsRune("-_.~+%", rune(c)) {
			return fmt.Errorf("a Pub/Sub topic id has letters, digits and -_.~+%% only, %q has %q at %d", id, c, i)
		}
	}
	return nil
}

func isLetter(c byte) bool { return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' }
