package outboxaws_test

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/awstest"
	"github.com/go-outbox/outbox/outboxaws"
	"github.com/go-outbox/outbox/publishertest"
)

// harness gives the conformance suite a fresh queue on goaws whose
// MaximumMessageSize of 16 KiB makes goaws refuse a larger body: the
// invalid message, refused as one entry of its batch.
func harness(t *testing.T) publishertest.Harness {
	srv := awstest.Start(t)
	queue := srv.Queue(t, "outboxaws-conf-", map[string]string{"MaximumMessageSize": "16384"})
	const topic = "orders.created"
	return publishertest.Harness{
		Publisher: newSQS(t, srv, queue, outboxaws.Config{}),
		Topic:     topic,
		Receive:   receiver(srv, queue),
		Unreachable: func(t *testing.T) outbox.Publisher {
			p, err := outboxaws.OpenSQS(ctxFor(t, 5*time.Second), queue, outboxaws.Config{}, awstest.SQSProtocol, func(o *sqs.Options) {
				o.BaseEndpoint = aws.String(awstest.ClosedURL(t))
				// Not the SDK's chain, which would ask the machine's
				// instance metadata service.
				o.Credentials = credentials.NewStaticCredentialsProvider("test", "test", "")
				o.Region = awstest.Region
			})
			if err != nil {
				t.Fatalf("OpenSQS with no server: %v", err)
			}
			return p
		},
		Invalid: func() outbox.Message {
			m := publishertest.Messages(topic, 1)[0]
			m.Payload = make([]byte, 20<<10)
			for i := range m.Payload {
				m.Payload[i] = 'x'
			}
			return m
		},
	}
}

func TestSQSPublisherConformance(t *testing.T) {
	t.Parallel()
	publishertest.Run(t, harness)
}

// Each message becomes one SQS message whose body is the payload and whose
// attributes carry the id, topic, key and headers under their own names.
func TestSQSMessageCarriesPayloadAsBodyAndIDTopicKeyAndHeadersAsAttributes(t *testing.T) {
	t.Parallel()
	srv := awstest.Start(t)
	queue := srv.Queue(t, "outboxaws-shape-", nil)
	p := newSQS(t, srv, queue, outboxaws.Config{})
	m := publishertest.Messages("orders.created", 1)[0]
	m.Key, m.Headers = "order-7", map[string]string{"traceparent": "00-abc-01"}
	m.Payload = []byte(`{"total":12}`)
	if err := p.Publish(ctxFor(t, 10*time.Second), []outbox.Message{m})[0]; err != nil {
		t.Fatalf("Publish %s: %v", m.ID, err)
	}
	ms, err := awstest.Receive(ctxFor(t, 10*time.Second), srv.SQSClient(), queue, 1)
	if err != nil {
		t.Fatal(err)
	}
	if body := aws.ToString(ms[0].Body); body != `{"total":12}` {
		t.Errorf("body of %s = %q, want the payload as it is", m.ID, body)
	}
	want := map[string]string{"outbox-id": m.ID.String(), "outbox-topic": "orders.created", "outbox-key": "order-7", "traceparent": "00-abc-01"}
	if len(ms[0].MessageAttributes) != len(want) {
		t.Errorf("message %s has attributes %v, want %v", m.ID, ms[0].MessageAttributes, want)
	}
	for k, v := range want {
		if got := aws.ToString(ms[0].MessageAttributes[k].StringValue); got != v {
			t.Errorf("message %s: attribute %q = %q, want %q", m.ID, k, got, v)
		}
	}
}

// SQS bodies are XML text: a payload that is not (invalid UTF-8, NUL)
// travels in base64, marked with the encoding attribute; an empty payload
// (SQS refuses an empty body) travels as a placeholder, marked too.
func TestPayloadThatIsNotTextTravelsInBase64MarkedByAnAttribute(t *testing.T) {
	t.Parallel()
	srv := awstest.Start(t)
	queue := srv.Queue(t, "outboxaws-bin-", nil)
	p := newSQS(t, srv, queue, outboxaws.Config{})
	batch := publishertest.Messages("t", 3)
	batch[0].Payload, batch[1].Payload, batch[2].Payload = []byte{0, 1, 0xff}, nil, []byte("plain text")
	for i, err := range p.Publish(ctxFor(t, 10*time.Second), batch) {
		if err != nil {
			t.Fatalf("message %s: %v", batch[i].ID, err)
		}
	}
	ms, err := awstest.Receive(ctxFor(t, 10*time.Second), srv.SQSClient(), queue, 3)
	if err != nil {
		t.Fatal(err)
	}
	wantEncoding := map[string]string{batch[0].ID.String(): outboxaws.EncodingBase64, batch[1].ID.String(): outboxaws.EncodingEmpty, batch[2].ID.String(): ""}
	for _, m := range ms {
		r := received(m)
		enc := aws.ToString(m.MessageAttributes[outboxaws.AttrEncoding].StringValue)
		if enc != wantEncoding[r.ID] {
			t.Errorf("message %s: %s = %q, want %q", r.ID, outboxaws.AttrEncoding, enc, wantEncoding[r.ID])
		}
		if aws.ToString(m.Body) == "" {
			t.Errorf("message %s: an empty body, which SQS refuses", r.ID)
		}
		if got, err := outboxaws.FromSQSMessage(m); err != nil || string(got.Payload) != string(r.Payload) {
			t.Errorf("message %s: FromSQSMessage gives payload %q, %v; want %q", r.ID, got.Payload, err, r.Payload)
		}
		for _, b := range batch {
			if b.ID.String() == r.ID && string(b.Payload) != string(r.Payload) {
				t.Errorf("message %s: payload read back %q, want %q", r.ID, r.Payload, b.Payload)
			}
		}
	}
}

// Headers SQS would refuse fail their message for good before anything is
// sent, naming the header; the rest of the batch goes.
func TestHeaderSQSWouldRefuseFailsItsMessagePermanentlyNamingTheHeader(t *testing.T) {
	t.Parallel()
	srv := awstest.Start(t)
	queue := srv.Queue(t, "outboxaws-hdr-", nil)
	p := newSQS(t, srv, queue, outboxaws.Config{})
	tooMany := map[string]string{}
	for i := range 8 {
		tooMany["h"+strconv.Itoa(i)] = "v"
	}
	cases := []struct {
		headers map[string]string
		naming  string
	}{
		{map[string]string{"trace id": "x"}, `"trace id"`},
		{map[string]string{"AWS.trace": "x"}, `"AWS.trace"`},
		{map[string]string{"empty": ""}, `"empty"`},
		{map[string]string{"outbox-id": "spoof"}, `"outbox-id"`},
		{tooMany, `"h7"`}, // id, topic and key leave room for 7
	}
	batch := publishertest.Messages("t", len(cases)+1)
	for i, c := range cases {
		batch[i].Key, batch[i].Headers = "k", c.headers
	}
	errs := p.Publish(ctxFor(t, 10*time.Second), batch)
	for i, c := range cases {
		if !outbox.IsPermanent(errs[i]) || !errors.Is(errs[i], outboxaws.ErrBadHeader) || !contains(errs[i].Error(), c.naming) {
			t.Errorf("message %s with headers %v: %v; want a permanent ErrBadHeader naming %s", batch[i].ID, c.headers, errs[i], c.naming)
		}
	}
	if last := len(cases); errs[last] != nil {
		t.Errorf("message %s without headers: %v", batch[last].ID, errs[last])
	}
	if ms, err := awstest.Receive(ctxFor(t, 10*time.Second), srv.SQSClient(), queue, 1); err != nil || received(ms[0]).ID != batch[len(cases)].ID.String() {
		t.Errorf("the queue holds %v (%v), want the one good message", ms, err)
	}
}

// A message over Config.MaxMessageSize, attributes counted, is never sent.
func TestMessageOverMaxMessageSizeIsPermanentAndNotSent(t *testing.T) {
	t.Parallel()
	srv := awstest.Start(t)
	queue := srv.Queue(t, "outboxaws-big-", nil)
	p := newSQS(t, srv, queue, outboxaws.Config{MaxMessageSize: 1000})
	m := publishertest.Messages("t", 2)
	m[0].Payload = make([]byte, 950) // under 1000 alone, over with the id and topic
	for i := range m[0].Payload {
		m[0].Payload[i] = 'x'
	}
	errs := p.Publish(ctxFor(t, 10*time.Second), m)
	if !outbox.IsPermanent(errs[0]) || !errors.Is(errs[0], outboxaws.ErrTooLarge) {
		t.Fatalf("message %s of 950 bytes and its attributes with MaxMessageSize 1000: %v; want a permanent ErrTooLarge", m[0].ID, errs[0])
	}
	if errs[1] != nil {
		t.Fatalf("message %s: %v", m[1].ID, errs[1])
	}
	if ms, err := awstest.Receive(ctxFor(t, 10*time.Second), srv.SQSClient(), queue, 1); err != nil || received(ms[0]).ID != m[1].ID.String() {
		t.Fatalf("the queue holds %v (%v), want only %s", ms, err, m[1].ID)
	}
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }
