package outboxpubsub

import (
	"strings"
	"testing"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/protobuf/proto"
)

// The bound the publisher checks first is never below the exact encoded
// size, whatever the fields' lengths (empty ones included, and lengths
// whose varints take one, two or three bytes), so it never lets through a
// message the client would refuse.
func TestEncodedSizeAtMostIsNeverBelowTheExactSize(t *testing.T) {
	for _, n := range []int{0, 1, 127, 128, 16383, 16384, 200000} {
		for _, attrs := range []map[string]string{nil, {"k": ""}, {"": "v"}, {"outbox-message-id": strings.Repeat("x", n%1024), "k2": "v"}} {
			msg := &pubsub.Message{Data: []byte(strings.Repeat("d", n)), Attributes: attrs, OrderingKey: strings.Repeat("o", n%300)}
			exact := proto.Size(&pubsubpb.PubsubMessage{Data: msg.Data, Attributes: msg.Attributes, OrderingKey: msg.OrderingKey})
			if got := encodedSizeAtMost(msg); got < exact {
				t.Errorf("data %d bytes, attributes %v: bound %d below the exact %d", n, len(attrs), got, exact)
			}
		}
	}
}
