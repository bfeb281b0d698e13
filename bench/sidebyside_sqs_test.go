package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/awstest"
	"github.com/go-outbox/outbox/outboxaws"
)

// BenchmarkSideBySideSQS publishes batches of 100 messages to a standard
// SQS queue of goaws, in process (internal/awstest), through
// outboxaws.SQSPublisher and through bare SendMessageBatch requests of 10
// entries with the same body and attributes (outbox-id, outbox-topic,
// outbox-key), sent at once as the publisher sends them, both on one client
// and both counting a message sent only when the reply lists it Successful.
// goaws serves one request at a time, so the requests of a batch queue up
// there either way. The queue is purged every 20 batches, untimed.
func BenchmarkSideBySideSQS(b *testing.B) {
	srv := awstest.Start(b)
	c := srv.SQSClient()
	queue := srv.Queue(b, "outbox-bench-", nil)
	pub, err := outboxaws.NewSQS(c, queue, outboxaws.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = pub.Close() })
	sideBySide{
		publisher: func(ctx context.Context, msgs []outbox.Message) error {
			return firstError(msgs, pub.Publish(ctx, msgs))
		},
		bare: func(ctx context.Context, msgs []outbox.Message) error {
			return bareSendMessageBatch(ctx, c, queue, msgs)
		},
		clear: func(ctx context.Context) error {
			_, err := c.PurgeQueue(ctx, &sqs.PurgeQueueInput{QueueUrl: aws.String(queue)})
			return err
		},
		clearEvery: 20,
	}.run(b)
}

// bareSendMessageBatch is what an application would write without the
// publisher: SendMessageBatch requests of outboxaws.BatchMax entries, sent
// at once, each entry checked in the reply.
func bareSendMessageBatch(ctx context.Context, c *sqs.Client, queue string, msgs []outbox.Message) error {
	var wg sync.WaitGroup
	errs := make([]error, (len(msgs)+outboxaws.BatchMax-1)/outboxaws.BatchMax)
	for n := range errs {
		start := n * outboxaws.BatchMax
		chunk := msgs[start:min(start+outboxaws.BatchMax, len(msgs))]
		wg.Go(func() {
			entries := make([]types.SendMessageBatchRequestEntry, len(chunk))
			for i, m := range chunk {
				entries[i] = types.SendMessageBatchRequestEntry{
					Id: aws.String(strconv.Itoa(i)), MessageBody: aws.String(string(m.Payload)),
					MessageAttributes: map[string]types.MessageAttributeValue{
						outboxaws.AttrID:    {DataType: aws.String("String"), StringValue: aws.String(m.ID.String())},
						outboxaws.AttrTopic: {DataType: aws.String("String"), StringValue: aws.String(m.Topic)},
						outboxaws.AttrKey:   {DataType: aws.String("String"), StringValue: aws.String(m.Key)},
					},
				}
			}
			out, err := c.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: aws.String(queue), Entries: entries})
			switch {
			case err != nil:
				errs[n] = err
			case len(out.Failed) > 0:
				errs[n] = fmt.Errorf("entry %s failed: %s", aws.ToString(out.Failed[0].Id), aws.ToString(out.Failed[0].Code))
			case len(out.Successful) != len(entries):
				errs[n] = fmt.Errorf("%d of %d entries listed successful", len(out.Successful), len(entries))
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}
