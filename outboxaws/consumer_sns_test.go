package outboxaws_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/google/uuid"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/awstest"
	"github.com/go-outbox/outbox/outboxaws"
	"github.com/go-outbox/outbox/publishertest"
)

// An SNS topic's messages reach a subscribed queue's consumer whole, with or
// without raw message delivery: without it, SNS wraps each one in its JSON
// envelope, and ConsumeSQS reads the payload and attributes from there.
func TestConsumeSQSReadsAnSNSTopicsMessagesWithOrWithoutRawDelivery(t *testing.T) {
	t.Parallel()
	for _, raw := range []bool{true, false} {
		t.Run(fmt.Sprintf("raw delivery %v", raw), func(t *testing.T) {
			t.Parallel()
			srv := awstest.Start(t)
			topic := srv.Topic(t, "outboxaws-snsconsume-")
			queue := srv.Queue(t, "outboxaws-snsconsume-", nil)
			srv.Subscribe(t, topic, queue, raw)
			batch := publishertest.Messages("orders.created", 3)
			batch[0].Payload = []byte(`{"text":"payload"}`)
			batch[1].Payload = []byte{0, 1, 0xff, 'b'} // not text: base64 on the wire
			batch[2].Key, batch[2].Headers = "order-7", map[string]string{"traceparent": "00-abc-01"}
			p := newSNS(t, srv, topic, outboxaws.Config{})
			for i, err := range p.Publish(ctxFor(t, 10*time.Second), batch) {
				if err != nil {
					t.Fatalf("publish %s: %v", batch[i].ID, err)
				}
			}
			r := startConsume(t, srv.SQSConsumerClient(t), outboxaws.ConsumerSQSConfig{Queue: queue, Name: "billing", ParkQueue: queue + "-parked"}, nil)
			r.WaitHandled(t, batch...)
			if err := r.Stop(t); err != nil {
				t.Fatalf("ConsumeSQS: %v", err)
			}
			seen := map[uuid.UUID]outbox.Message{}
			for _, m := range r.Handled() {
				seen[m.ID] = m
			}
			got := make([]publishertest.Received, 0, len(batch))
			for _, m := range batch {
				s := seen[m.ID]
				got = append(got, publishertest.Received{ID: s.ID.String(), Topic: s.Topic, Key: s.Key, Payload: s.Payload, Headers: s.Headers})
				if s.Topic != m.Topic {
					t.Errorf("message %s: topic %q, want %q", m.ID, s.Topic, m.Topic)
				}
			}
			publishertest.RequireReceived(t, publishertest.Harness{Receive: func(context.Context, int) ([]publishertest.Received, error) { return got, nil }}, batch)
		})
	}
}

// A message that carries its outbox attributes is read as it is, even when
// its payload happens to look like an SNS envelope.
func TestAPayloadThatLooksLikeAnSNSEnvelopeIsKeptWhenTheMessageHasItsAttributes(t *testing.T) {
	t.Parallel()
	id := uuid.Must(uuid.NewV7())
	body := `{"Type":"Notification","TopicArn":"arn:aws:sns:eu-west-1:1:t","Message":"inner","MessageAttributes":{"outbox-id":{"Type":"String","Value":"` + uuid.NewString() + `"}}}`
	m, err := outboxaws.FromSQSMessage(types.Message{Body: aws.String(body), MessageId: aws.String("m-1"),
		MessageAttributes: map[string]types.MessageAttributeValue{outboxaws.AttrID: {DataType: aws.String("String"), StringValue: aws.String(id.String())}}})
	if err != nil || m.ID != id || string(m.Payload) != body {
		t.Fatalf("FromSQSMessage = %s %q, %v; want %s with the body as its payload", m.ID, m.Payload, err, id)
	}
}

// A message SNS wrapped that a consumer parked keeps the parking attributes
// the park queue holds beside the envelope: read back, they are headers,
// with the envelope's payload, id and key.
func TestAParkedSNSWrappedMessageReadBackKeepsItsParkingAttributes(t *testing.T) {
	t.Parallel()
	id := uuid.Must(uuid.NewV7())
	body := `{"Type":"Notification","MessageId":"sns-1","TopicArn":"arn:aws:sns:eu-west-1:1:t","Message":"{\"total\":12}",` +
		`"MessageAttributes":{"outbox-id":{"Type":"String","Value":"` + id.String() + `"},"outbox-key":{"Type":"String","Value":"order-7"}}}`
	m, err := outboxaws.FromSQSMessage(types.Message{Body: aws.String(body), MessageId: aws.String("m-2"),
		MessageAttributes: map[string]types.MessageAttributeValue{outboxaws.AttrParkedReason: {DataType: aws.String("String"), StringValue: aws.String("3 attempts: no such customer")}}})
	if err != nil || m.ID != id || m.Key != "order-7" || string(m.Payload) != `{"total":12}` || m.Headers[outboxaws.AttrParkedReason] != "3 attempts: no such customer" {
		t.Fatalf("FromSQSMessage = %+v, %v; want %s of order-7 with its payload and the parking reason as a header", m, err, id)
	}
}

// A message SNS delivered in its JSON envelope (raw delivery off) carries
// its key inside the envelope, not as an attribute of the queue's message:
// parked on a FIFO park queue it still goes to its key's group (the key
// itself, or its SHA-256 where SQS would refuse the key as a group id), so
// that the parked messages of a key stay in order.
func TestAnSNSWrappedMessageIsParkedOnAFIFOParkQueueInItsKeysGroup(t *testing.T) {
	t.Parallel()
	srv := awstest.Start(t)
	queue := srv.Queue(t, "outboxaws-snspark-", nil)
	park := srv.Queue(t, "outboxaws-snspark-parked-.fifo", map[string]string{"FifoQueue": "true"})
	c := srv.SQSConsumerClient(t)
	hashed := sha256.Sum256([]byte("order 8"))
	want := map[string]string{} // body: group
	for key, group := range map[string]string{"order-7": "order-7", "order 8": "sha256:" + hex.EncodeToString(hashed[:])} {
		id := uuid.Must(uuid.NewV7())
		body := `{"Type":"Notification","MessageId":"sns-` + id.String() + `","TopicArn":"arn:aws:sns:eu-west-1:1:t","Message":"{\"total\":12}",` +
			`"MessageAttributes":{"outbox-id":{"Type":"String","Value":"` + id.String() + `"},"outbox-key":{"Type":"String","Value":"` + key + `"}}}`
		want[body] = group
		if _, err := c.SendMessage(ctxFor(t, 10*time.Second), &sqs.SendMessageInput{QueueUrl: aws.String(queue), MessageBody: aws.String(body)}); err != nil {
			t.Fatal(err)
		}
	}
	var (
		mu  sync.Mutex
		got = map[string]string{} // parked message's body: its group
	)
	srv.WatchSends(func(queueURL string, e awstest.Entry) {
		if queueURL == park {
			mu.Lock()
			got[e.Body] = e.GroupID
			mu.Unlock()
		}
	})
	r := startConsume(t, c, outboxaws.ConsumerSQSConfig{Queue: queue, Name: "billing", ParkQueue: park, MaxDeliver: 1},
		func(outbox.Message, int) error { return errors.New("no such customer (injected)") })
	r.WaitFor(t, "both messages parked and deleted from the queue", func() bool { return queueLength(t, c, queue) == 0 })
	mu.Lock()
	defer mu.Unlock()
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("parked messages and their groups %v; want each in its envelope's key's group %v", got, want)
	}
}
