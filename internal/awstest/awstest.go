// Package awstest runs an SQS and SNS emulator for the tests of outboxaws and
// the CLI: goaws (github.com/Admiral-Piett/goaws), in the test process, with
// no network and no binary to build.
//
// goaws v0.4.5 speaks only the query protocol (form requests, XML replies),
// which SNS's SDK client uses but SQS's has replaced by AWS JSON: the clients
// this package makes speak the query protocol to SQS too (SQS serves both).
// In front of goaws's router stands a small handler that does what goaws
// does not:
//
//   - a batch request whose messages add up to more than 256 KiB fails
//     whole with BatchRequestTooLong, as on AWS (a single message over it
//     passes, as a queue of 1 MiB messages takes it);
//   - SendMessageBatch is sent to goaws as one SendMessage per entry, since
//     goaws's own SendMessageBatch drops message attributes and never fails
//     an entry alone; each entry's reply (goaws refuses a body over the
//     queue's MaximumMessageSize) becomes its Successful or Failed element;
//   - SNS's PublishBatch, which goaws lacks, likewise becomes one Publish per
//     entry, and a missing topic fails the whole request with SNS's NotFound
//     (goaws says AWS.SimpleNotificationService.NonExistentTopic);
//   - SNS's GetTopicAttributes, which goaws lacks, answers from goaws's
//     topics: the topic's ARN, or NotFound;
//   - faults a test sets (Server.FailRequests, Server.FailEntries,
//     Server.Stall): throttling, access denied, a refused entry, no reply.
//
// goaws keeps its queues and topics in package variables, so every Server
// of a test binary shares them: tests name theirs with Name.
package awstest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/xml"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Admiral-Piett/goaws/app"
	"github.com/Admiral-Piett/goaws/app/router"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sns"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/schemas"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go/transport/http/protocol/awsquery"
	"github.com/sirupsen/logrus"
)

// Region and AccountID are what the emulator's ARNs and queue URLs carry.
const (
	AccountID = "100010001000"
	Region    = "us-east-1"
)

var (
	setup   sync.Once
	goaws   http.Handler
	goawsMu sync.Mutex // goaws reads its queue map unlocked: one request at a time
)

// handler serves one request with goaws, alone.
var handler = http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
	goawsMu.Lock()
	defer goawsMu.Unlock()
	goaws.ServeHTTP(w, req)
})

// goaws reads its host, port and account from a package variable when it
// makes queue URLs and ARNs; it routes by the last segment of the URL's
// path, so the host named matters to no request.
func start() {
	setup.Do(func() {
		logrus.SetLevel(logrus.WarnLevel)
		logrus.SetOutput(io.Discard)
		app.CurrentEnvironment.Host = "localhost"
		app.CurrentEnvironment.Port = "4100"
		app.CurrentEnvironment.AccountID = AccountID
		app.CurrentEnvironment.Region = Region
		// FIFO queues drop a deduplication id seen before only with this.
		app.CurrentEnvironment.EnableDuplicates = true
		goaws = router.New()
	})
}

// Server is one endpoint in front of the shared goaws state, with faults of
// its own.
type Server struct {
	// URL is the endpoint, for sqs.Options.BaseEndpoint.
	URL string

	srv *httptest.Server

	mu          sync.Mutex
	failEntry   func(action string, e Entry) (code string, senderFault bool)
	failRequest func(action string) (code string, status int)
	stall       time.Duration
	sent        func(queueURL string, e Entry)
}

// Entry is what a fault sees of a batch entry.
type Entry struct {
	// Attributes holds the string message attributes.
	Attributes      map[string]string
	Body            string
	DeduplicationID string
	GroupID         string
}

// Start starts a server closed when the test ends.
func Start(t testing.TB) *Server {
	t.Helper()
	start()
	s := &Server{}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	s.URL = s.srv.URL
	t.Cleanup(s.srv.Close)
	return s
}

// Stop closes the server: connections are refused until the test ends.
func (s *Server) Stop() { s.srv.CloseClientConnections(); s.srv.Close() }

// FailRequests makes every request whose action f names a code for fail
// with that code and HTTP status (400 for a sender's error, 403 access
// denied, 500 the service's); nil f stops it.
func (s *Server) FailRequests(f func(action string) (code string, status int)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failRequest = f
}

// FailEntries makes each batch entry f names a code for fail alone, as a
// Failed element with that code; nil f stops it.
func (s *Server) FailEntries(f func(action string, e Entry) (code string, senderFault bool)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failEntry = f
}

// WatchSends calls f with each SendMessage request (not batches) before the
// fake takes it: goaws keeps a FIFO message's group but does not return it
// to ReceiveMessage, so a test reads it here. nil f stops it.
func (s *Server) WatchSends(f func(queueURL string, e Entry)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sent = f
}

// Stall holds every reply for d (until the client gives up, if sooner).
func (s *Server) Stall(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stall = d
}

// ClosedURL returns an endpoint where nothing listens.
func ClosedURL(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	return "http://" + addr
}

// Name returns prefix with a random suffix (goaws's queues and topics are
// shared by the whole test binary); a prefix ending in ".fifo" keeps that
// ending, which makes the queue or topic FIFO.
func Name(prefix string) string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	if base, ok := strings.CutSuffix(prefix, ".fifo"); ok {
		return base + hex.EncodeToString(b) + ".fifo"
	}
	return prefix + hex.EncodeToString(b)
}

// SQSProtocol sets the query protocol, which goaws speaks, on a client's
// options: give it to sqs.New or outboxaws.OpenSQS.
func SQSProtocol(o *sqs.Options) { o.Protocol = awsquery.New(schemas.AmazonSQS) }

// SQSClient returns an SQS client for s.
func (s *Server) SQSClient() *sqs.Client {
	return sqs.New(sqs.Options{
		BaseEndpoint: aws.String(s.URL),
		Credentials:  credentials.NewStaticCredentialsProvider("test", "test", ""),
		Region:       Region,
	}, SQSProtocol)
}

// SNSClient returns an SNS client for s.
func (s *Server) SNSClient() *sns.Client {
	return sns.New(sns.Options{
		BaseEndpoint: aws.String(s.URL),
		Credentials:  credentials.NewStaticCredentialsProvider("test", "test", ""),
		Region:       Region,
	})
}

// Queue creates a queue named Name(prefix) with attrs and returns its URL;
// the queue is deleted when the test ends.
func (s *Server) Queue(t testing.TB, prefix string, attrs map[string]string) string {
	t.Helper()
	c := s.SQSClient()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := c.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(Name(prefix)), Attributes: attrs})
	if err != nil {
		t.Fatalf("awstest: CreateQueue: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, _ = c.DeleteQueue(ctx, &sqs.DeleteQueueInput{QueueUrl: out.QueueUrl})
	})
	return *out.QueueUrl
}

// Topic creates a topic named Name(prefix) (FIFO when prefix ends in
// ".fifo") and returns its ARN; the topic is deleted when the test ends.
func (s *Server) Topic(t testing.TB, prefix string) string {
	t.Helper()
	c := s.SNSClient()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	in := &sns.CreateTopicInput{Name: aws.String(Name(prefix))}
	if strings.HasSuffix(prefix, ".fifo") {
		in.Attributes = map[string]string{"FifoTopic": "true"}
	}
	out, err := c.CreateTopic(ctx, in)
	if err != nil {
		t.Fatalf("awstest: CreateTopic: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, _ = c.DeleteTopic(ctx, &sns.DeleteTopicInput{TopicArn: out.TopicArn})
	})
	return *out.TopicArn
}

// Subscribe subscribes the queue at queueURL to topic, with raw message
// delivery (the body is the message as published, with its attributes) or
// without (the body is SNS's JSON envelope).
func (s *Server) Subscribe(t testing.TB, topic, queueURL string, raw bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	name := queueURL[strings.LastIndex(queueURL, "/")+1:]
	_, err := s.SNSClient().Subscribe(ctx, &sns.SubscribeInput{
		TopicArn: aws.String(topic), Protocol: aws.String("sqs"),
		Endpoint:   aws.String("arn:aws:sqs:" + Region + ":" + AccountID + ":" + name),
		Attributes: map[string]string{"RawMessageDelivery": strconv.FormatBool(raw)},
	})
	if err != nil {
		t.Fatalf("awstest: Subscribe: %v", err)
	}
}

// Receive reads up to n messages from queue, with all their attributes,
// deleting each it returns, until n are read or ctx ends.
func Receive(ctx context.Context, c *sqs.Client, queue string, n int) ([]types.Message, error) {
	var got []types.Message
	for len(got) < n {
		out, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
			QueueUrl: aws.String(queue), MaxNumberOfMessages: int32(min(10, n-len(got))),
			MessageAttributeNames: []string{"All"},
		})
		if err != nil {
			return got, fmt.Errorf("ReceiveMessage %s: %w (%d of %d read)", queue, err, len(got), n)
		}
		for _, m := range out.Messages {
			got = append(got, m)
			if _, err := c.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(queue), ReceiptHandle: m.ReceiptHandle}); err != nil {
				return got, fmt.Errorf("DeleteMessage: %w", err)
			}
		}
		if len(out.Messages) == 0 {
			select {
			case <-ctx.Done():
				return got, fmt.Errorf("%d of %d messages in %s: %w", len(got), n, queue, ctx.Err())
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	return got, nil
}

func (s *Server) serve(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(req.Body)
	if err != nil {
		return
	}
	form, _ := url.ParseQuery(string(body))
	action := form.Get("Action")
	s.mu.Lock()
	failRequest, failEntry, stall, sent := s.failRequest, s.failEntry, s.stall, s.sent
	s.mu.Unlock()
	if stall > 0 {
		select {
		case <-time.After(stall):
		case <-req.Context().Done():
			return
		}
	}
	if failRequest != nil {
		if code, status := failRequest(action); code != "" {
			writeError(w, status, code)
			return
		}
	}
	if sent != nil && action == "SendMessage" {
		sent(form.Get("QueueUrl"), entryOf(form))
	}
	switch action {
	case "SendMessageBatch":
		s.batch(w, req, form, "SendMessageBatchRequestEntry", "SendMessage", failEntry)
		return
	case "PublishBatch":
		s.batch(w, req, form, "PublishBatchRequestEntries.member", "Publish", failEntry)
		return
	case "GetTopicAttributes":
		topicAttributes(w, form.Get("TopicArn"))
		return
	}
	req.Body = io.NopCloser(bytes.NewReader(body))
	handler.ServeHTTP(w, req)
}

// topicAttributes answers GetTopicAttributes as SNS does for a topic that
// exists (its ARN; goaws keeps no other attribute) or not (NotFound, 404).
func topicAttributes(w http.ResponseWriter, arn string) {
	goawsMu.Lock()
	app.SyncTopics.RLock()
	name := arn[strings.LastIndex(arn, ":")+1:]
	topic, ok := app.SyncTopics.Topics[name]
	ok = ok && topic.Arn == arn
	app.SyncTopics.RUnlock()
	goawsMu.Unlock()
	if !ok {
		writeError(w, http.StatusNotFound, "NotFound")
		return
	}
	w.Header().Set("Content-Type", "text/xml")
	fmt.Fprintf(w, `<GetTopicAttributesResponse><GetTopicAttributesResult><Attributes><entry><key>TopicArn</key><value>%s</value></entry></Attributes></GetTopicAttributesResult><ResponseMetadata><RequestId>1</RequestId></ResponseMetadata></GetTopicAttributesResponse>`, esc(arn))
}

func writeError(w http.ResponseWriter, status int, code string) {
	w.Header().Set("Content-Type", "text/xml")
	w.WriteHeader(status)
	fmt.Fprintf(w, `<ErrorResponse><Error><Type>Sender</Type><Code>%s</Code><Message>awstest: injected %s</Message></Error><RequestId>1</RequestId></ErrorResponse>`, code, code)
}

// batchEntry is the outcome of one entry.
type batchEntry struct {
	id, code, message, messageID, md5Body, md5Attrs, seq string
	senderFault                                          bool
}

// batch sends each entry of a batch request to goaws as a request of its own
// (single), in the entries' order, and answers with each one's outcome.
func (s *Server) batch(w http.ResponseWriter, req *http.Request, form url.Values, prefix, single string, failEntry func(string, Entry) (string, bool)) {
	entries := map[int]url.Values{}
	for k, vs := range form {
		rest, ok := strings.CutPrefix(k, prefix+".")
		if !ok {
			continue
		}
		n, field, _ := strings.Cut(rest, ".")
		i, err := strconv.Atoi(n)
		if err != nil {
			continue
		}
		if entries[i] == nil {
			entries[i] = url.Values{}
		}
		entries[i][field] = vs
	}
	// AWS refuses a whole request whose messages, bodies and attributes,
	// add up to more than 256 KiB; goaws does not.
	total := 0
	for _, e := range entries {
		x := entryOf(e)
		total += len(x.Body)
		for k, v := range x.Attributes {
			total += len(k) + len("String") + len(v)
		}
	}
	if total > 256<<10 && len(entries) > 1 {
		code := "AWS.SimpleQueueService.BatchRequestTooLong"
		if single == "Publish" {
			code = "BatchRequestTooLong"
		}
		writeError(w, http.StatusBadRequest, code)
		return
	}
	var out []batchEntry
	for i := 1; i <= len(entries); i++ {
		e := entries[i]
		if e == nil {
			break
		}
		one := url.Values{"Action": {single}}
		for _, k := range []string{"QueueUrl", "TopicArn"} {
			if v := form.Get(k); v != "" {
				one.Set(k, v)
			}
		}
		for k, vs := range e {
			one[k] = vs
		}
		r := batchEntry{id: e.Get("Id")}
		if failEntry != nil {
			if code, sender := failEntry(single, entryOf(e)); code != "" {
				r.code, r.senderFault, r.message = code, sender, "awstest: injected "+code
				out = append(out, r)
				continue
			}
		}
		one.Del("Id")
		rec := httptest.NewRecorder()
		sub := httptest.NewRequestWithContext(req.Context(), http.MethodPost, req.URL.String(), strings.NewReader(one.Encode()))
		sub.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		handler.ServeHTTP(rec, sub)
		if rec.Code != http.StatusOK {
			var er struct {
				Code    string `xml:"Error>Code"`
				Message string `xml:"Error>Message"`
				Type    string `xml:"Error>Type"`
			}
			_ = xml.Unmarshal(rec.Body.Bytes(), &er)
			switch er.Code {
			case "AWS.SimpleQueueService.NonExistentQueue":
				// The queue is missing: the whole request fails, as it
				// does on AWS.
				w.Header().Set("Content-Type", "text/xml")
				w.WriteHeader(rec.Code)
				_, _ = w.Write(rec.Body.Bytes())
				return
			case "AWS.SimpleNotificationService.NonExistentTopic", "NotFound":
				writeError(w, http.StatusNotFound, "NotFound")
				return
			}
			r.code, r.message, r.senderFault = er.Code, er.Message, rec.Code < 500
			out = append(out, r)
			continue
		}
		var ok struct {
			Result struct {
				MD5Attrs  string `xml:"MD5OfMessageAttributes"`
				MD5Body   string `xml:"MD5OfMessageBody"`
				MessageID string `xml:"MessageId"`
				Seq       string `xml:"SequenceNumber"`
			} `xml:"SendMessageResult"`
			Published struct {
				MessageID string `xml:"MessageId"`
			} `xml:"PublishResult"`
		}
		_ = xml.Unmarshal(rec.Body.Bytes(), &ok)
		res := ok.Result
		r.messageID, r.md5Body, r.md5Attrs, r.seq = res.MessageID+ok.Published.MessageID, res.MD5Body, res.MD5Attrs, res.Seq
		out = append(out, r)
	}
	writeBatch(w, single, out)
}

func entryOf(e url.Values) Entry {
	x := Entry{
		Attributes: map[string]string{}, Body: e.Get("MessageBody") + e.Get("Message"),
		DeduplicationID: e.Get("MessageDeduplicationId"), GroupID: e.Get("MessageGroupId"),
	}
	for k := range e {
		// MessageAttribute.N.Name (SQS), MessageAttributes.entry.N.Name (SNS)
		if base, ok := strings.CutSuffix(k, ".Name"); ok && strings.HasPrefix(k, "MessageAttribute") {
			x.Attributes[e.Get(k)] = e.Get(base + ".Value.StringValue")
		}
	}
	return x
}

func writeBatch(w http.ResponseWriter, single string, out []batchEntry) {
	var b strings.Builder
	op := single + "Batch"
	fmt.Fprintf(&b, "<%sResponse><%sResult>", op, op)
	if single == "Publish" {
		b.WriteString("<Successful>")
	}
	for _, r := range out {
		if r.code != "" {
			continue
		}
		if single == "Publish" {
			fmt.Fprintf(&b, "<member><Id>%s</Id><MessageId>%s</MessageId><SequenceNumber>%s</SequenceNumber></member>", esc(r.id), esc(r.messageID), esc(r.seq))
			continue
		}
		fmt.Fprintf(&b, "<SendMessageBatchResultEntry><Id>%s</Id><MessageId>%s</MessageId><MD5OfMessageBody>%s</MD5OfMessageBody>", esc(r.id), esc(r.messageID), esc(r.md5Body))
		if r.md5Attrs != "" {
			fmt.Fprintf(&b, "<MD5OfMessageAttributes>%s</MD5OfMessageAttributes>", esc(r.md5Attrs))
		}
		if r.seq != "" {
			fmt.Fprintf(&b, "<SequenceNumber>%s</SequenceNumber>", esc(r.seq))
		}
		b.WriteString("</SendMessageBatchResultEntry>")
	}
	if single == "Publish" {
		b.WriteString("</Successful><Failed>")
	}
	for _, r := range out {
		if r.code == "" {
			continue
		}
		tag := "BatchResultErrorEntry"
		if single == "Publish" {
			tag = "member"
		}
		fmt.Fprintf(&b, "<%s><Id>%s</Id><Code>%s</Code><Message>%s</Message><SenderFault>%t</SenderFault></%s>", tag, esc(r.id), esc(r.code), esc(r.message), r.senderFault, tag)
	}
	if single == "Publish" {
		b.WriteString("</Failed>")
	}
	fmt.Fprintf(&b, "</%sResult><ResponseMetadata><RequestId>1</RequestId></ResponseMetadata></%sResponse>", op, op)
	w.Header().Set("Content-Type", "text/xml")
	_, _ = io.WriteString(w, b.String())
}

func esc(s string) string {
	var b strings.Builder
	_ = xml.EscapeText(&b, []byte(s))
	return b.String()
}
