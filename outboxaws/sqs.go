package outboxaws

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/go-outbox/outbox"
)

// BatchMax is the most entries AWS takes in one SendMessageBatch or
// PublishBatch request.
const BatchMax = 10

// SQSPublisher sends outbox messages to one SQS queue; see the package
// documentation. It is safe for concurrent use by several relay workers.
type SQSPublisher struct {
	base
	client *sqs.Client
	fifo   bool

	queue   string // URL or, until resolved, name
	resolve sync.Mutex
	url     string // resolved queue URL
}

// NewSQS returns a publisher sending to queue, a queue URL
// (https://sqs.REGION.amazonaws.com/ACCOUNT/NAME) or name, with client,
// which the caller made. A name is looked up (GetQueueUrl) by Check or the
// first Publish. NewSQS never connects, and returns a *outbox.ConfigError
// if cfg is invalid.
//
// The SDK's retryer may send a batch again after a lost reply, which
// consumers drop by id; with RetryMaxAttempts 1 (as OpenSQS sets) the relay
// does the retrying instead, and Config.Timeout bounds each attempt.
func NewSQS(client *sqs.Client, queue string, cfg Config) (*SQSPublisher, error) {
	if client == nil {
		return nil, &outbox.ConfigError{Field: "outboxaws.NewSQS client", Value: "nil", Fix: "pass an SQS client, e.g. sqs.NewFromConfig(awsCfg), or use outboxaws.OpenSQS"}
	}
	if queue == "" {
		return nil, &outbox.ConfigError{Field: "outboxaws.NewSQS queue", Value: "", Fix: "pass the queue's URL or name"}
	}
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	p := &SQSPublisher{base: base{cfg: cfg}, client: client, queue: queue, fifo: strings.HasSuffix(queue, ".fifo")}
	p.configLog.Interval = ConfigErrorLogInterval
	if strings.Contains(queue, "://") {
		p.url = queue
	}
	return p, nil
}

// OpenSQS returns a publisher with a client of its own for queue (a URL or
// a name), with the region and credentials of the SDK's standard chain
// (AWS_REGION, AWS_ACCESS_KEY_ID, AWS_PROFILE and the shared files, the
// instance's or task's role); without a region there, the region of a
// queue URL's host (sqs.REGION.amazonaws.com). optFns change the client's
// options (an endpoint, say). It does not connect: call Check at start.
func OpenSQS(ctx context.Context, queue string, cfg Config, optFns ...func(*sqs.Options)) (*SQSPublisher, error) {
	if _, err := cfg.withDefaults(); err != nil {
		return nil, err
	}
	awsCfg, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		return nil, fmt.Errorf("outboxaws: load the AWS configuration (environment, shared files): %w", err)
	}
	if awsCfg.Region == "" {
		awsCfg.Region = regionOf(queue)
	}
	opts := append([]func(*sqs.Options){func(o *sqs.Options) {
		// The relay retries, knowing what it sent; the SDK would also
		// sleep between attempts past Config.Timeout's share.
		o.RetryMaxAttempts = 1
	}}, optFns...)
	return NewSQS(sqs.NewFromConfig(awsCfg, opts...), queue, cfg)
}

// regionOf returns the region in a queue URL's host, or "".
func regionOf(queue string) string {
	u, err := url.Parse(queue)
	if err != nil {
		return ""
	}
	parts := strings.Split(u.Hostname(), ".")
	if len(parts) >= 4 && parts[0] == "sqs" && parts[2] == "amazonaws" {
		return parts[1]
	}
	return ""
}

// Client returns the SQS client the publisher uses.
func (p *SQSPublisher) Client() *sqs.Client { return p.client }

// Check tells at start whether publishing can work: the queue exists (a
// name is looked up with GetQueueUrl) and the credentials may read its
// attributes. The error says what is wrong and how to fix it; a missing
// queue matches ErrNotFound, refused credentials ErrAccessDenied. A role
// allowed sqs:SendMessage alone fails the check with ErrAccessDenied and
// publishes fine: grant sqs:GetQueueAttributes too, or go on.
func (p *SQSPublisher) Check(ctx context.Context) error {
	queueURL, err := p.queueURL(ctx)
	if err == nil {
		_, err = p.client.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
			QueueUrl: aws.String(queueURL), AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameQueueArn},
		})
	}
	if err == nil {
		return nil
	}
	e := &PublishError{Destination: p.queue, Err: err}
	_ = p.classify(ctx, e, "queue")
	switch {
	case errors.Is(e.Err, ErrNotFound):
		return fmt.Errorf("outboxaws: queue %s does not exist: %w; create it (aws sqs create-queue --queue-name NAME) or correct the name, region or account", p.queue, ErrNotFound)
	case errors.Is(e.Err, ErrAccessDenied):
		return fmt.Errorf("outboxaws: queue %s: %w; give the credentials sqs:GetQueueUrl, sqs:GetQueueAttributes and sqs:SendMessage on it", p.queue, e.Err)
	}
	return fmt.Errorf("outboxaws: queue %s does not answer: %w", p.queue, err)
}

// queueURL returns the queue's URL, looking a name up once.
func (p *SQSPublisher) queueURL(ctx context.Context) (string, error) {
	p.resolve.Lock()
	defer p.resolve.Unlock()
	if p.url != "" {
		return p.url, nil
	}
	out, err := p.client.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String(p.queue)})
	if err != nil {
		return "", err
	}
	p.url = aws.ToString(out.QueueUrl)
	return p.url, nil
}

// Publish sends the batch in SendMessageBatch requests of up to BatchMax
// entries and BatchBytesMax bytes, all at once, and reports each message's
// outcome from its own entry in the reply, within Config.Timeout or the end
// of ctx; see the package documentation for the outcomes.
func (p *SQSPublisher) Publish(ctx context.Context, batch []outbox.Message) []error {
	errs := make([]error, len(batch))
	if len(batch) == 0 {
		return errs
	}
	ctx, leave, ok := p.enter(ctx, batch, p.queue, errs)
	if !ok {
		return errs
	}
	defer leave()
	queueURL, err := p.queueURL(ctx)
	if err != nil {
		for i := range batch {
			errs[i] = p.classify(ctx, &PublishError{ID: batch[i].ID, Destination: p.queue, Err: err}, "queue")
		}
		return errs
	}
	var entries []types.SendMessageBatchRequestEntry
	var sizes []int
	for i := range batch {
		m := &batch[i]
		e, err := encode(m, p.cfg.MaxMessageSize)
		if err != nil {
			errs[i] = outbox.Permanent(&PublishError{ID: m.ID, Destination: queueURL, Err: err})
			continue
		}
		entry := types.SendMessageBatchRequestEntry{
			Id: aws.String(strconv.Itoa(i)), MessageBody: aws.String(e.body), MessageAttributes: sqsAttributes(e.attrs),
		}
		if p.fifo {
			entry.MessageGroupId = aws.String(groupID(m.Key, p.cfg.DefaultGroupID))
			entry.MessageDeduplicationId = aws.String(m.ID.String())
		}
		entries = append(entries, entry)
		sizes = append(sizes, e.size())
	}
	var wg sync.WaitGroup
	for _, c := range chunks(sizes) {
		wg.Go(func() {
			p.send(ctx, queueURL, entries[c[0]:c[1]], batch, errs)
		})
	}
	wg.Wait()
	return errs
}

// send sends one SendMessageBatch request and sets the outcome of each of
// its entries in errs. Only an entry listed Successful counts as sent.
func (p *SQSPublisher) send(ctx context.Context, queueURL string, chunk []types.SendMessageBatchRequestEntry, batch []outbox.Message, errs []error) {
	index := func(id *string) (int, bool) {
		i, err := strconv.Atoi(aws.ToString(id))
		return i, err == nil && i >= 0 && i < len(batch)
	}
	out, err := p.client.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: aws.String(queueURL), Entries: chunk})
	if err != nil {
		for _, entry := range chunk {
			i, _ := index(entry.Id)
			errs[i] = p.classify(ctx, &PublishError{ID: batch[i].ID, Destination: queueURL, Err: err}, "queue")
		}
		return
	}
	done := map[int]bool{}
	for _, s := range out.Successful {
		if i, ok := index(s.Id); ok {
			done[i] = true
		}
	}
	for _, f := range out.Failed {
		i, ok := index(f.Id)
		if !ok {
			continue
		}
		done[i] = true
		ee := &EntryError{Code: aws.ToString(f.Code), Message: aws.ToString(f.Message), SenderFault: f.SenderFault}
		errs[i] = p.classifyEntry(&PublishError{ID: batch[i].ID, Destination: queueURL, Err: ee}, ee, "queue")
	}
	for _, entry := range chunk {
		if i, _ := index(entry.Id); !done[i] {
			errs[i] = &PublishError{ID: batch[i].ID, Destination: queueURL, Err: errors.New("the reply lists the entry neither successful nor failed")}
		}
	}
}

func sqsAttributes(attrs map[string]string) map[string]types.MessageAttributeValue {
	out := make(map[string]types.MessageAttributeValue, len(attrs))
	for k, v := range attrs {
		out[k] = types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(v)}
	}
	return out
}

// groupID returns the MessageGroupId of a message of key: the key itself,
// the default group when it is empty, and a digest of it when AWS would
// refuse it (over 128 characters, or characters outside ASCII 33 to 126),
// so that every key keeps a group of its own.
func groupID(key, def string) string {
	switch {
	case key == "":
		return def
	case validDedupOrGroup(key):
		return key
	}
	sum := sha256.Sum256([]byte(key))
	return "sha256:" + hex.EncodeToString(sum[:])
}
