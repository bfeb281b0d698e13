package outboxaws

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/sns"
	"github.com/aws/aws-sdk-go-v2/service/sns/types"

	"github.com/go-outbox/outbox"
)

// SNSPublisher publishes outbox messages to one SNS topic, which fans them
// out to its subscriptions; see the package documentation. It is safe for
// concurrent use by several relay workers.
type SNSPublisher struct {
	base
	client *sns.Client
	fifo   bool
	topic  string // ARN
}

// NewSNS returns a publisher to the topic topicARN
// (arn:aws:sns:REGION:ACCOUNT:NAME) with client, which the caller made in
// the topic's region. NewSNS never connects, and returns a
// *outbox.ConfigError if topicARN is not a topic's ARN or cfg is invalid.
//
// The SDK's retryer may publish a batch again after a lost reply, which
// consumers drop by id; with RetryMaxAttempts 1 (as OpenSNS sets) the relay
// does the retrying instead, and Config.Timeout bounds each attempt.
func NewSNS(client *sns.Client, topicARN string, cfg Config) (*SNSPublisher, error) {
	if client == nil {
		return nil, &outbox.ConfigError{Field: "outboxaws.NewSNS client", Value: "nil", Fix: "pass an SNS client, e.g. sns.NewFromConfig(awsCfg), or use outboxaws.OpenSNS"}
	}
	if _, _, _, ok := ParseTopicARN(topicARN); !ok {
		return nil, &outbox.ConfigError{Field: "outboxaws.NewSNS topicARN", Value: topicARN, Fix: "pass the topic's ARN, arn:aws:sns:REGION:ACCOUNT:NAME (aws sns list-topics shows it)"}
	}
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	p := &SNSPublisher{base: base{cfg: cfg}, client: client, topic: topicARN, fifo: strings.HasSuffix(topicARN, ".fifo")}
	p.configLog.Interval = ConfigErrorLogInterval
	return p, nil
}

// OpenSNS returns a publisher with a client of its own for the topic
// topicARN, in the ARN's region (SNS publishes to a topic only from its own
// region), with the credentials of the SDK's standard chain
// (AWS_ACCESS_KEY_ID, AWS_PROFILE and the shared files, the instance's or
// task's role). optFns change the client's options (an endpoint, say). It
// does not connect: call Check at start.
func OpenSNS(ctx context.Context, topicARN string, cfg Config, optFns ...func(*sns.Options)) (*SNSPublisher, error) {
	if _, err := cfg.withDefaults(); err != nil {
		return nil, err
	}
	region, _, _, ok := ParseTopicARN(topicARN)
	if !ok {
		return nil, &outbox.ConfigError{Field: "outboxaws.OpenSNS topicARN", Value: topicARN, Fix: "pass the topic's ARN, arn:aws:sns:REGION:ACCOUNT:NAME (aws sns list-topics shows it)"}
	}
	awsCfg, err := config.LoadDefaultConfig(ctx, config.WithRegion(region))
	if err != nil {
		return nil, fmt.Errorf("outboxaws: load the AWS configuration (environment, shared files): %w", err)
	}
	opts := append([]func(*sns.Options){func(o *sns.Options) {
		// The relay retries, knowing what it sent; the SDK would also
		// sleep between attempts past Config.Timeout's share.
		o.RetryMaxAttempts = 1
	}}, optFns...)
	return NewSNS(sns.NewFromConfig(awsCfg, opts...), topicARN, cfg)
}

// ParseTopicARN splits an SNS topic's ARN, arn:PARTITION:sns:REGION:ACCOUNT:NAME,
// and reports whether it is one.
func ParseTopicARN(arn string) (region, account, name string, ok bool) {
	parts := strings.Split(arn, ":")
	if len(parts) != 6 || parts[0] != "arn" || parts[1] == "" || parts[2] != "sns" {
		return "", "", "", false
	}
	region, account, name = parts[3], parts[4], parts[5]
	if region == "" || account == "" || name == "" {
		return "", "", "", false
	}
	return region, account, name, true
}

// Client returns the SNS client the publisher uses.
func (p *SNSPublisher) Client() *sns.Client { return p.client }

// Check tells at start whether publishing can work: the topic exists and
// the credentials may read its attributes (GetTopicAttributes). The error
// says what is wrong and how to fix it; a missing topic matches
// ErrNotFound, refused credentials ErrAccessDenied. A role allowed
// sns:Publish alone fails the check with ErrAccessDenied and publishes
// fine: grant sns:GetTopicAttributes too, or go on.
func (p *SNSPublisher) Check(ctx context.Context) error {
	_, err := p.client.GetTopicAttributes(ctx, &sns.GetTopicAttributesInput{TopicArn: aws.String(p.topic)})
	if err == nil {
		return nil
	}
	e := &PublishError{Destination: p.topic, Err: err}
	_ = p.classify(ctx, e, "topic")
	switch {
	case errors.Is(e.Err, ErrNotFound):
		_, _, name, _ := ParseTopicARN(p.topic)
		create := "aws sns create-topic --name " + name
		if p.fifo {
			create += " --attributes FifoTopic=true"
		}
		return fmt.Errorf("outboxaws: topic %s does not exist: %w; create it (%s) or correct the ARN's region, account or name", p.topic, ErrNotFound, create)
	case errors.Is(e.Err, ErrAccessDenied):
		return fmt.Errorf("outboxaws: topic %s: %w; give the credentials sns:GetTopicAttributes and sns:Publish on it", p.topic, e.Err)
	}
	return fmt.Errorf("outboxaws: topic %s does not answer: %w", p.topic, err)
}

// Publish sends the batch in PublishBatch requests of up to BatchMax entries
// and BatchBytesMax bytes, all at once, and reports each message's outcome
// from its own entry in the reply, within Config.Timeout or the end of ctx;
// see the package documentation for the outcomes.
func (p *SNSPublisher) Publish(ctx context.Context, batch []outbox.Message) []error {
	errs := make([]error, len(batch))
	if len(batch) == 0 {
		return errs
	}
	ctx, leave, ok := p.enter(ctx, batch, p.topic, errs)
	if !ok {
		return errs
	}
	defer leave()
	var entries []types.PublishBatchRequestEntry
	var sizes []int
	for i := range batch {
		m := &batch[i]
		e, err := encode(m, p.cfg.MaxMessageSize)
		if err != nil {
			errs[i] = outbox.Permanent(&PublishError{ID: m.ID, Destination: p.topic, Err: err})
			continue
		}
		entry := types.PublishBatchRequestEntry{
			Id: aws.String(strconv.Itoa(i)), Message: aws.String(e.body), MessageAttributes: snsAttributes(e.attrs),
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
			p.send(ctx, entries[c[0]:c[1]], batch, errs)
		})
	}
	wg.Wait()
	return errs
}

// send sends one PublishBatch request and sets the outcome of each of its
// entries in errs. Only an entry listed Successful counts as published.
func (p *SNSPublisher) send(ctx context.Context, chunk []types.PublishBatchRequestEntry, batch []outbox.Message, errs []error) {
	index := func(id *string) (int, bool) {
		i, err := strconv.Atoi(aws.ToString(id))
		return i, err == nil && i >= 0 && i < len(batch)
	}
	out, err := p.client.PublishBatch(ctx, &sns.PublishBatchInput{TopicArn: aws.String(p.topic), PublishBatchRequestEntries: chunk})
	if err != nil {
		for _, entry := range chunk {
			i, _ := index(entry.Id)
			errs[i] = p.classify(ctx, &PublishError{ID: batch[i].ID, Destination: p.topic, Err: err}, "topic")
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
		errs[i] = p.classifyEntry(&PublishError{ID: batch[i].ID, Destination: p.topic, Err: ee}, ee, "topic")
	}
	for _, entry := range chunk {
		if i, _ := index(entry.Id); !done[i] {
			errs[i] = &PublishError{ID: batch[i].ID, Destination: p.topic, Err: errors.New("the reply lists the entry neither successful nor failed")}
		}
	}
}

func snsAttributes(attrs map[string]string) map[string]types.MessageAttributeValue {
	out := make(map[string]types.MessageAttributeValue, len(attrs))
	for k, v := range attrs {
		out[k] = types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(v)}
	}
	return out
}
