// Package outboxproto is a protobuf Codec for outboxevents: events are
// generated protobuf messages, registered as pointers, and their bodies are
// the protobuf wire format.
//
//	reg := outboxevents.NewRegistry(outboxevents.Options{Codec: outboxproto.Codec{}})
//	outboxevents.MustRegister[*orderspb.OrderPlaced](reg, "orders.placed")
//
// It is a module of its own so that only users of protobuf get its
// dependency.
package outboxproto

import (
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/go-outbox/outbox/outboxevents"
)

// ContentType is the content type of the bodies.
const ContentType = "application/protobuf"

// Codec encodes events with proto.Marshal and decodes them with
// proto.Unmarshal. Events must be proto.Message values: register the
// generated message types as pointers.
type Codec struct{}

var _ outboxevents.Codec = Codec{}

// ContentType returns "application/protobuf".
func (Codec) ContentType() string { return ContentType }

// Marshal encodes event, a proto.Message.
func (Codec) Marshal(event any) ([]byte, error) {
	m, ok := event.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("outboxproto: %T is not a protobuf message; register the generated type as a pointer (outboxevents.Register[*pb.T])", event)
	}
	return proto.Marshal(m)
}

// Unmarshal decodes body into target, a pointer to a generated message.
func (Codec) Unmarshal(body []byte, target any) error {
	m, ok := target.(proto.Message)
	if !ok {
		return fmt.Errorf("outboxproto: %T is not a protobuf message; register the generated type as a pointer (outboxevents.Register[*pb.T])", target)
	}
	return proto.Unmarshal(body, m)
}
