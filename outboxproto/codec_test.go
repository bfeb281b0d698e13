package outboxproto_test

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/go-outbox/outbox/outboxevents"
	"github.com/go-outbox/outbox/outboxproto"
)

// A protobuf event goes out in the wire format with its content type and
// comes back equal.
func TestProtobufEventRoundTrip(t *testing.T) {
	reg := outboxevents.NewRegistry(outboxevents.Options{Codec: outboxproto.Codec{}})
	outboxevents.MustRegister[*wrapperspb.StringValue](reg, "greetings.sent")
	sent := wrapperspb.String("hello")
	m, err := reg.Message(sent, "")
	if err != nil {
		t.Fatal(err)
	}
	if m.Headers[outboxevents.HeaderContentType] != "application/protobuf" {
		t.Errorf("content type %q, want application/protobuf", m.Headers[outboxevents.HeaderContentType])
	}
	wire, _ := proto.Marshal(sent)
	if string(m.Payload) != string(wire) {
		t.Errorf("payload %x, want the protobuf wire format %x", m.Payload, wire)
	}
	got, name, err := reg.Decode(*m)
	if err != nil || name != "greetings.sent" || !proto.Equal(got.(*wrapperspb.StringValue), sent) {
		t.Fatalf("Decode = %v, %q, %v; want the sent message back", got, name, err)
	}
}

func TestNonProtobufEventsAreRefusedWithTheFix(t *testing.T) {
	reg := outboxevents.NewRegistry(outboxevents.Options{Codec: outboxproto.Codec{}})
	type Plain struct{ N int }
	outboxevents.MustRegister[Plain](reg, "plain")
	if _, err := reg.Message(Plain{N: 1}, ""); err == nil || !strings.Contains(err.Error(), "register the generated type as a pointer") {
		t.Fatalf("Message of a plain struct: %v; want an error naming the fix", err)
	}
}
