package outboxs3_test

import (
	"bytes"
	"context"
	"testing"

	"github.com/google/uuid"

	"github.com/go-outbox/outbox"
)

// The whole trip through S3: the relay's publisher puts a large payload in
// the bucket and sends a reference; the consumer's handler gets it back.
func TestALargePayloadGoesThroughS3AndComesBackByteForByte(t *testing.T) {
	blobs := open(t, fakeS3(t, "blobs"), "blobs")
	var wire []outbox.Message
	broker := outbox.PublisherFunc(func(_ context.Context, batch []outbox.Message) []error {
		wire = append(wire, batch...)
		return make([]error, len(batch))
	})
	pub, err := outbox.ClaimCheck(broker, blobs, outbox.ClaimCheckConfig{Threshold: 256 << 10})
	if err != nil {
		t.Fatal(err)
	}
	large := outbox.Message{ID: uuid.Must(uuid.NewV7()), Topic: "reports.ready", Payload: bytes.Repeat([]byte("0123456789abcdef"), 1<<16)}
	if errs := pub.Publish(t.Context(), []outbox.Message{large}); errs[0] != nil {
		t.Fatalf("Publish: %v", errs[0])
	}
	if len(wire) != 1 || len(wire[0].Payload) != 0 {
		t.Fatalf("the broker got %d messages, the first with %d payload bytes; want one without payload", len(wire), len(wire[0].Payload))
	}
	var got []byte
	handle := outbox.ResolveClaimChecks(blobs, func(_ context.Context, m outbox.Message) error {
		got = m.Payload
		return nil
	})
	if err := handle(t.Context(), wire[0]); err != nil {
		t.Fatalf("the consumer's handler: %v", err)
	}
	if !bytes.Equal(got, large.Payload) {
		t.Fatalf("the handler got %d bytes; want the %d written", len(got), len(large.Payload))
	}
}
