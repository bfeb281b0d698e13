package outboxaws_test

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/google/uuid"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/awstest"
	"github.com/go-outbox/outbox/internal/consumetest"
	"github.com/go-outbox/outbox/outboxaws"
)

// running is a ConsumeSQS under way, with the Readiness it reports to.
type running struct {
	*consumetest.Run
	ready *outboxaws.Readiness
}

// startConsume runs ConsumeSQS with c in the background (see
// consumetest.Start), with fast retries and a short long poll. fail, if set,
// gives each attempt's outcome from the message and its attempt number in
// this process (nil: success).
func startConsume(t *testing.T, c *sqs.Client, cfg outboxaws.ConsumerSQSConfig, fail func(m outbox.Message, try int) error) *running {
	t.Helper()
	r := &running{ready: &outboxaws.Readiness{}}
	cfg.Readiness = r.ready
	if cfg.BackoffBase == 0 {
		cfg.BackoffBase, cfg.BackoffMax = time.Millisecond, 10*time.Millisecond
	}
	if cfg.WaitTime == 0 {
		cfg.WaitTime = time.Second
	}
	r.Run = consumetest.Start(t, &cfg.Logger, consumetest.Options{Fail: consumetest.WithoutCtx(fail), Name: "ConsumeSQS"}, func(ctx context.Context, fn func(context.Context, outbox.Message) error) error {
		return outboxaws.ConsumeSQS(ctx, c, cfg, fn)
	})
	return r
}

// publishSQS sends msgs to queue with the SQSPublisher.
func publishSQS(t *testing.T, srv *awstest.Server, queue string, msgs ...outbox.Message) {
	t.Helper()
	p := newSQS(t, srv, queue, outboxaws.Config{})
	for i, err := range p.Publish(ctxFor(t, 10*time.Second), msgs) {
		if err != nil {
			t.Fatalf("publish %s: %v", msgs[i].ID, err)
		}
	}
}

// queueLength is how many messages queue holds, in flight or not.
func queueLength(t *testing.T, c *sqs.Client, queue string) int {
	t.Helper()
	out, err := c.GetQueueAttributes(ctxFor(t, 5*time.Second), &sqs.GetQueueAttributesInput{
		QueueUrl: aws.String(queue), AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameApproximateNumberOfMessages},
	})
	if err != nil {
		t.Fatalf("GetQueueAttributes %s: %v", queue, err)
	}
	n, err := strconv.Atoi(out.Attributes[string(types.QueueAttributeNameApproximateNumberOfMessages)])
	if err != nil {
		t.Fatalf("ApproximateNumberOfMessages of %s: %v", queue, err)
	}
	return n
}

// memInbox is an inbox table in memory: records commit with the
// transaction, and a record made by an earlier committed one is found.
type memInbox struct {
	mu      sync.Mutex
	records map[uuid.UUID]bool
	applied map[uuid.UUID]int // committed applications per id
}

type memTx struct{ marks []uuid.UUID }

func newMemInbox() *memInbox {
	return &memInbox{records: map[uuid.UUID]bool{}, applied: map[uuid.UUID]int{}}
}

func (s *memInbox) RunInTx(_ context.Context, fn func(tx *memTx) error) error {
	tx := &memTx{}
	if err := fn(tx); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, id := range tx.marks {
		s.records[id] = true
		s.applied[id]++
	}
	return nil
}

func (s *memInbox) MarkProcessed(_ context.Context, tx *memTx, _ string, id uuid.UUID) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.records[id] {
		return false, nil
	}
	tx.marks = append(tx.marks, id)
	return true, nil
}

func (s *memInbox) appliedCount(id uuid.UUID) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.applied[id]
}
