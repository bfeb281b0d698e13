package outboxs3_test

import (
	"context"
	"log"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/outboxs3"
)

// The relay's side and the consumer's side share one bucket: the relay's
// publisher puts the payloads over the threshold there, the consumer's
// handler gets them back. For MinIO or another S3-compatible service, set
// Config.Endpoint (and PathStyle).
func Example() {
	ctx := context.Background()
	blobs, err := outboxs3.Open(ctx, "orders-claim-checks", outboxs3.Config{Endpoint: "http://localhost:9000", PathStyle: true})
	if err != nil {
		log.Fatal(err)
	}
	if err := blobs.Check(ctx); err != nil {
		log.Fatal(err)
	}
	var broker outbox.Publisher = &outbox.JSONLines{} // a broker's publisher: outboxaws, outboxnats...
	pub, err := outbox.ClaimCheck(broker, blobs, outbox.ClaimCheckConfig{})
	if err != nil {
		log.Fatal(err)
	}
	_ = pub // outbox.NewRelay(store, pub, outbox.Config{})

	handle := outbox.ResolveClaimChecks(blobs, func(ctx context.Context, m outbox.Message) error {
		// m.Payload is the whole payload again.
		return nil
	})
	_ = handle // outboxaws.ConsumeSQS(ctx, ..., handle), outboxnats.Consume(ctx, js, cfg, handle)...
}
