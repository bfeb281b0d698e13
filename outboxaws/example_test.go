package outboxaws_test

import (
	"context"
	"log"

	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/outboxaws"
	"github.com/go-outbox/outbox/outboxdriver"
)

// A relay sending every message to one SQS queue, with the region and
// credentials of the SDK's chain (AWS_REGION, AWS_PROFILE, the task's
// role); Check tells at start whether the queue exists.
func ExampleOpenSQS() {
	ctx := context.Background()
	pub, err := outboxaws.OpenSQS(ctx, "https://sqs.eu-west-1.amazonaws.com/123456789012/orders", outboxaws.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer pub.Close()
	if err := pub.Check(ctx); err != nil {
		log.Printf("not publishing yet: %v", err) // the relay retries meanwhile
	}
	var store outboxdriver.Store // e.g. outboxpg.New(pool, outboxpg.Options{})
	relay, err := outbox.NewRelay(store, pub, outbox.Config{})
	if err != nil {
		log.Fatal(err)
	}
	_ = relay.Run(ctx)
}

// A service that already has an SQS client shares it; a FIFO queue gets
// each key's messages in one message group, in order.
func ExampleNewSQS() {
	awsCfg, err := config.LoadDefaultConfig(context.Background())
	if err != nil {
		log.Fatal(err)
	}
	pub, err := outboxaws.NewSQS(sqs.NewFromConfig(awsCfg), "orders.fifo", outboxaws.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer pub.Close()
}

// A relay publishing every message to one SNS topic, which fans it out to
// its subscribed queues (subscribe them with RawMessageDelivery=true); the
// client is made in the ARN's region.
func ExampleOpenSNS() {
	ctx := context.Background()
	pub, err := outboxaws.OpenSNS(ctx, "arn:aws:sns:eu-west-1:123456789012:orders", outboxaws.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer pub.Close()
	if err := pub.Check(ctx); err != nil {
		log.Printf("not publishing yet: %v", err) // a missing topic: the error names the fix
	}
}
