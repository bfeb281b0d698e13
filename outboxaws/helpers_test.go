package outboxaws_test

import (
	"context"
	"encoding/base64"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/go-outbox/outbox/internal/awstest"
	"github.com/go-outbox/outbox/outboxaws"
	"github.com/go-outbox/outbox/publishertest"
)

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// newSQS returns a publisher on srv's client for queue, closed when the test
// ends.
func newSQS(t *testing.T, srv *awstest.Server, queue string, cfg outboxaws.Config) *outboxaws.SQSPublisher {
	t.Helper()
	p, err := outboxaws.NewSQS(srv.SQSClient(), queue, cfg)
	if err != nil {
		t.Fatalf("NewSQS: %v", err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// received turns an SQS message back into what the outbox sent.
func received(m types.Message) publishertest.Received {
	attr := func(name string) string { return aws.ToString(m.MessageAttributes[name].StringValue) }
	r := publishertest.Received{
		ID: attr(outboxaws.AttrID), Topic: attr(outboxaws.AttrTopic), Key: attr(outboxaws.AttrKey),
		Payload: []byte(aws.ToString(m.Body)), Headers: map[string]string{},
	}
	switch attr(outboxaws.AttrEncoding) {
	case outboxaws.EncodingBase64:
		r.Payload, _ = base64.StdEncoding.DecodeString(aws.ToString(m.Body))
	case outboxaws.EncodingEmpty:
		r.Payload = nil
	}
	for name, v := range m.MessageAttributes {
		switch name {
		case outboxaws.AttrID, outboxaws.AttrTopic, outboxaws.AttrKey, outboxaws.AttrEncoding:
		default:
			r.Headers[name] = aws.ToString(v.StringValue)
		}
	}
	return r
}

// receiver reads queue on srv, deleting what it read.
func receiver(srv *awstest.Server, queue string) func(ctx context.Context, n int) ([]publishertest.Received, error) {
	c := srv.SQSClient()
	return func(ctx context.Context, n int) ([]publishertest.Received, error) {
		ms, err := awstest.Receive(ctx, c, queue, n)
		got := make([]publishertest.Received, len(ms))
		for i, m := range ms {
			got[i] = received(m)
		}
		return got, err
	}
}
