package outbox

import (
	"errors"
	"strings"
	"testing"

	"github.com/go-outbox/outbox/outboxdriver"
)

func TestMessageValidationRejectsEachInvalidFieldByName(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		msg   Message
		field string
	}{
		{"empty topic", Message{}, "Topic"},
		{"topic too long", Message{Topic: strings.Repeat("t", MaxTopicLength+1)}, "Topic"},
		{"topic with newline", Message{Topic: "a\nb"}, "Topic"},
		{"topic not UTF-8", Message{Topic: "a\xffb"}, "Topic"},
		{"key too long", Message{Topic: "t", Key: strings.Repeat("k", MaxKeyLength+1)}, "Key"},
		{"key with NUL", Message{Topic: "t", Key: "a\x00"}, "Key"},
		{"payload over limit", Message{Topic: "t", Payload: make([]byte, 11)}, "Payload"},
		{"empty header name", Message{Topic: "t", Headers: map[string]string{"": "v"}}, "Headers"},
		{"header name with space", Message{Topic: "t", Headers: map[string]string{"a b": "v"}}, "Headers"},
		{"header name with colon", Message{Topic: "t", Headers: map[string]string{"a:b": "v"}}, "Headers"},
		{"header value with NUL", Message{Topic: "t", Headers: map[string]string{"a": "\x00"}}, "Headers[a]"},
		{"due among paused messages", Message{Topic: "t", AvailableAt: outboxdriver.PausedFrom}, "AvailableAt"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := validateMessage(&tt.msg, payloadLimit(10))
			var me *MessageError
			if !errors.As(err, &me) {
				t.Fatalf("validate() = %v, want a *MessageError for field %s", err, tt.field)
			}
			if me.Field != tt.field {
				t.Fatalf("MessageError.Field = %q, want %q (error: %v)", me.Field, tt.field, err)
			}
			if !errors.Is(err, ErrInvalidMessage) {
				t.Fatalf("errors.Is(%v, ErrInvalidMessage) = false", err)
			}
		})
	}
}

func TestMessageValidationAcceptsLimitsExactly(t *testing.T) {
	t.Parallel()
	m := Message{
		Topic:   strings.Repeat("t", MaxTopicLength),
		Key:     strings.Repeat("k", MaxKeyLength),
		Payload: make([]byte, 10),
		Headers: map[string]string{"Content-Type": "application/json", "traceparent": "00-x", "x_!#$%&'*+-.^_`|~": ""},
	}
	if err := validateMessage(&m, payloadLimit(10)); err != nil {
		t.Fatalf("validate() of a message at every limit = %v, want nil", err)
	}
	big := Message{Topic: "t", Payload: make([]byte, 5<<20)}
	if err := validateMessage(&big, payloadLimit(0)); err != nil {
		t.Fatalf("validate() with no payload limit = %v, want nil", err)
	}
}

func TestMessageErrorNamesTheValueAndTheFix(t *testing.T) {
	t.Parallel()
	err := validateMessage(&Message{Topic: "orders", Payload: make([]byte, 20)}, payloadLimit(10))
	for _, want := range []string{"Payload", "20 bytes", "limit of 10 bytes", "MaxPayloadBytes", `topic "orders"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
}

// payloadLimit returns the default limits with a payload limit of n bytes
// (none for n <= 0).
func payloadLimit(n int) messageLimits {
	lim := defaultLimits
	lim.payloadBytes = n
	return lim
}
