package e2e_test

import (
	"context"
	"testing"
	"time"

	"github.com/go-outbox/outbox/internal/awstest"
	"github.com/go-outbox/outbox/outboxaws"
	"github.com/go-outbox/outbox/publishertest"
	"github.com/go-outbox/outbox/relaytest"
)

// From a PostgreSQL outbox through the relay to an SNS topic (goaws, in
// process), fanned out to an SQS queue subscribed without raw delivery, then
// ConsumeSQS with a PostgreSQL inbox: every message arrives with its fields,
// out of SNS's envelope, and is applied once. (Raw delivery, the other
// shape, is outboxaws's TestConsumeSQSReadsAnSNSTopicsMessagesWithOrWithoutRawDelivery;
// a second, raw-delivery queue here received 190 of the 200 messages in 2
// runs of 15 under -race: goaws's fan-out, the wrapped queue had them all.)
func TestEndToEndFromPostgreSQLThroughTheRelayToSNSAndConsumeSQSWithAnInbox(t *testing.T) {
	t.Parallel()
	o := newPGOutbox(t)
	in := newPGInbox(t, o)
	srv := awstest.Start(t)
	topic := srv.Topic(t, "e2e-orders-")
	wrapped := srv.Queue(t, "e2e-billing-", nil)
	srv.Subscribe(t, topic, wrapped, false)
	p, err := outboxaws.NewSNS(srv.SNSClient(), topic, outboxaws.Config{Logger: relaytest.TestLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })

	applied := newAppliedLog(in)
	apply := applied.handler()
	ctx, stop := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		done <- outboxaws.ConsumeSQS(ctx, srv.SQSConsumerClient(t), outboxaws.ConsumerSQSConfig{
			Queue: wrapped, Name: "billing", ParkQueue: wrapped + "-parked", WaitTime: time.Second, Logger: relaytest.TestLogger(t),
		}, apply)
	}()
	h := publishertest.Harness{
		Publisher: p,
		Topic:     "orders.created",
		Receive:   applied.receive,
	}
	publishertest.EndToEnd(t, h, o.store, o.write)
	stop()
	if err := <-done; err != nil {
		t.Fatalf("ConsumeSQS: %v", err)
	}
	applied.requireOnce(t)
}
