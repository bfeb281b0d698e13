package outboxaws_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/awstest"
	"github.com/go-outbox/outbox/outboxaws"
	"github.com/go-outbox/outbox/publishertest"
)

// A message over the claim check's threshold, with a key and as many
// headers as a text payload may have but one (the claim check's header takes
// that slot), reaches SQS: its empty body spends no attribute of the ten,
// and the consumer's side restores the payload.
func TestAClaimCheckedMessageWithAKeyAndSixHeadersReachesSQSAndIsRestored(t *testing.T) {
	t.Parallel()
	srv := awstest.Start(t)
	queue := srv.Queue(t, "outboxaws-cc-", nil)
	blobs := outbox.DirBlobStore(t.TempDir())
	pub, err := outbox.ClaimCheck(newSQS(t, srv, queue, outboxaws.Config{}), blobs, outbox.ClaimCheckConfig{Threshold: 16})
	if err != nil {
		t.Fatal(err)
	}
	m := publishertest.Messages("orders.created", 1)[0]
	m.Key = "order-1"
	m.Payload = []byte("a payload longer than the threshold of sixteen bytes")
	m.Headers = map[string]string{}
	for i := range 6 {
		m.Headers[fmt.Sprint("h", i)] = fmt.Sprint("v", i)
	}
	for _, err := range pub.Publish(ctxFor(t, 10*time.Second), []outbox.Message{m}) {
		if err != nil {
			t.Fatalf("publish a claim-checked message with a key and 6 headers: %v", err)
		}
	}
	ms, err := awstest.Receive(ctxFor(t, 10*time.Second), srv.SQSClient(), queue, 1)
	if err != nil {
		t.Fatal(err)
	}
	got, err := outboxaws.FromSQSMessage(ms[0])
	if err != nil {
		t.Fatal(err)
	}
	var restored outbox.Message
	err = outbox.ResolveClaimChecks(blobs, func(_ context.Context, m outbox.Message) error { restored = m; return nil })(t.Context(), got)
	if err != nil || string(restored.Payload) != string(m.Payload) || len(restored.Headers) != 6 {
		t.Fatalf("restored %q with %d headers, %v; want the payload and the 6 headers", restored.Payload, len(restored.Headers), err)
	}
}
