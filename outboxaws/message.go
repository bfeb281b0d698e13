package outboxaws

import (
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/go-outbox/outbox"
)

// The message attributes every message carries besides its headers.
// Consumers read the outbox id from AttrID and drop a message whose id they
// have seen (the inbox does).
const (
	// AttrEncoding is EncodingBase64 when the body is the payload in base64
	// (a payload SQS and SNS cannot carry as text), EncodingEmpty when the
	// payload is empty (SQS and SNS refuse an empty body: it is
	// emptyBody); absent otherwise.
	AttrEncoding = "outbox-encoding"
	// AttrID carries Message.ID as text.
	AttrID = "outbox-id"
	// AttrKey carries Message.Key; absent when the key is empty.
	AttrKey = "outbox-key"
	// AttrTopic carries Message.Topic.
	AttrTopic = "outbox-topic"
)

// The values of AttrEncoding.
const (
	EncodingBase64 = "base64"
	EncodingEmpty  = "empty"
)

// emptyBody is the body of a message whose payload is empty (a claim-checked
// message, say): SQS and SNS refuse an empty body, and base64 of nothing is
// nothing.
const emptyBody = "-"

// MaxAttributes is the most message attributes SQS takes on a message (and
// SNS delivers to SQS): the fixed ones above count, so a message has room
// for 7 or 8 headers.
const MaxAttributes = 10

// ErrTooLarge means a message, body and attributes, is over
// Config.MaxMessageSize. It is permanent.
var ErrTooLarge = errors.New("message over Config.MaxMessageSize")

// ErrBadHeader means a header cannot be a message attribute: too many
// headers, a name SQS refuses or one of the fixed attributes, or an empty
// value or characters SQS refuses. It is permanent.
var ErrBadHeader = errors.New("header cannot be sent as a message attribute")

var errNoID = errors.New("message has no id; write messages through an outbox Writer")

// encoded is a message as SQS and SNS take it.
type encoded struct {
	attrs map[string]string
	body  string
}

// encode builds the body and attributes of m, or says why m can never be
// sent.
func encode(m *outbox.Message, maxSize int) (encoded, error) {
	if m.ID == uuid.Nil {
		return encoded{}, errNoID
	}
	e := encoded{attrs: map[string]string{AttrID: m.ID.String(), AttrTopic: m.Topic}, body: string(m.Payload)}
	if m.Key != "" {
		e.attrs[AttrKey] = m.Key
	}
	// A body is text of the characters XML 1.0 allows; anything else goes
	// in base64, and an empty payload as a placeholder.
	switch {
	case len(m.Payload) == 0 && claimChecked(m):
		// The claim check's header says where the payload is, and
		// outbox.ResolveClaimChecks replaces the body with it: no
		// attribute spent on saying the body is empty.
		e.body = emptyBody
	case len(m.Payload) == 0:
		e.body = emptyBody
		e.attrs[AttrEncoding] = EncodingEmpty
	case !validText(e.body):
		e.body = base64.StdEncoding.EncodeToString(m.Payload)
		e.attrs[AttrEncoding] = EncodingBase64
	}
	for name, v := range map[string]string{"topic": m.Topic, "key": m.Key} {
		if !validText(v) {
			return encoded{}, fmt.Errorf("%w: the %s has characters SQS refuses", ErrBadHeader, name)
		}
	}
	if m.Topic == "" {
		return encoded{}, fmt.Errorf("%w: the topic is empty (an attribute needs a value)", ErrBadHeader)
	}
	names := make([]string, 0, len(m.Headers))
	for name := range m.Headers {
		names = append(names, name)
	}
	slices.Sort(names)
	if room := MaxAttributes - len(e.attrs); len(names) > room {
		return encoded{}, fmt.Errorf("%w: %d headers, room for %d (SQS takes %d attributes, %d are the outbox's); drop %q or more",
			ErrBadHeader, len(names), room, MaxAttributes, len(e.attrs), names[room:])
	}
	for _, name := range names {
		v := m.Headers[name]
		switch {
		case name == AttrID || name == AttrKey || name == AttrTopic || name == AttrEncoding:
			return encoded{}, fmt.Errorf("%w: header %q has the name of an attribute of the outbox's", ErrBadHeader, name)
		case !validAttrName(name):
			return encoded{}, fmt.Errorf("%w: header %q: SQS takes names of up to 256 letters, digits, '-', '_' and '.', not starting with AWS. or Amazon., nor with, ending with or doubling '.'", ErrBadHeader, name)
		case v == "" || !validText(v):
			return encoded{}, fmt.Errorf("%w: header %q: SQS takes only a non-empty value of the characters XML allows", ErrBadHeader, name)
		}
		e.attrs[name] = v
	}
	if n := e.size(); n > maxSize {
		return encoded{}, fmt.Errorf("%w: %d bytes with attributes, the limit is %d", ErrTooLarge, n, maxSize)
	}
	return e, nil
}

// size counts e as SQS does: the body, and each attribute's name, data type
// ("String") and value.
func (e encoded) size() int {
	n := len(e.body)
	for k, v := range e.attrs {
		n += len(k) + len("String") + len(v)
	}
	return n
}

// validText reports whether s is UTF-8 of the characters SQS allows in a
// body or attribute value: #x9, #xA, #xD, #x20 to #xD7FF, #xE000 to #xFFFD,
// #x10000 to #x10FFFF.
func validText(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		switch {
		case r == 0x9 || r == 0xA || r == 0xD:
		case r >= 0x20 && r <= 0xD7FF, r >= 0xE000 && r <= 0xFFFD, r >= 0x10000 && r <= 0x10FFFF:
		default:
			return false
		}
	}
	return true
}

func validAttrName(name string) bool {
	if name == "" || len(name) > 256 || name[0] == '.' || name[len(name)-1] == '.' || strings.Contains(name, "..") {
		return false
	}
	lower := strings.ToLower(name)
	if strings.HasPrefix(lower, "aws.") || strings.HasPrefix(lower, "amazon.") {
		return false
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.') {
			return false
		}
	}
	return true
}

// validDedupOrGroup reports whether s can be a MessageGroupId or
// MessageDeduplicationId: 1 to 128 characters from ASCII 33 to 126.
func validDedupOrGroup(s string) bool {
	if s == "" || len(s) > 128 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 33 || s[i] > 126 {
			return false
		}
	}
	return true
}

// claimChecked reports whether m carries outbox.HeaderClaimCheck (in any
// case): its payload is in a blob store.
func claimChecked(m *outbox.Message) bool {
	for name := range m.Headers {
		if strings.EqualFold(name, outbox.HeaderClaimCheck) {
			return true
		}
	}
	return false
}
