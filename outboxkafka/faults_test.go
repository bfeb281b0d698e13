package outboxkafka_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/kafkatest"
	"github.com/go-outbox/outbox/outboxkafka"
	"github.com/go-outbox/outbox/publishertest"
)

// TestBrokerErrorsMapToOutcomes makes a kfake broker answer produce requests
// with errors and checks each message's outcome, and that the records
// reported published are in the topic exactly once.
func TestBrokerErrorsMapToOutcomes(t *testing.T) {
	t.Parallel()
	const (
		ok        = "published"
		retryable = "retryable"
		permanent = "permanent"
	)
	for _, tc := range []struct {
		name  string
		err   *kerr.Error
		count int // produce requests to fail; -1 means all
		want  string
		// wait bounds the Publish call; 0 means 10s.
		wait time.Duration
	}{
		// The client retries these by itself.
		{"NotLeaderOnceIsRetriedByTheClient", kerr.NotLeaderForPartition, 1, ok, 0},
		// The broker wrote the records but answered with a timeout: the
		// idempotent producer's retry must not write them twice.
		{"TimeoutAfterTheWriteIsRetriedWithoutDuplicates", kerr.RequestTimedOut, 1, ok, 0},
		// A whole batch is refused once: each record, sent alone, passes.
		{"BatchRefusedAsInvalidOnceSparesItsRecords", kerr.InvalidRecord, 1, ok, 0},
		{"BatchRefusedAsTooLargeOnceSparesItsRecords", kerr.MessageTooLarge, 1, ok, 0},
		// Refused every time, alone too: no retry can help.
		{"InvalidRecordIsPermanent", kerr.InvalidRecord, -1, permanent, 0},
		{"RecordListTooLargeIsPermanent", kerr.RecordListTooLarge, -1, permanent, 0},
		// An operator can fix these; the relay's attempts and backoff
		// bound them.
		{"UnknownTopicOnProduceIsRetryable", kerr.UnknownTopicOrPartition, -1, retryable, 0},
		{"AuthorizationFailureIsRetryable", kerr.TopicAuthorizationFailed, -1, retryable, 0},
		{"NotLeaderUntilTheDeadlineIsRetryable", kerr.NotLeaderForPartition, -1, retryable, time.Second},
		{"UnknownServerErrorIsRetryable", kerr.UnknownServerError, -1, retryable, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := kafkatest.StartFake(t) // faults are injected into kfake
			topic := c.Topic(t, 1, nil)
			c.Fake().Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: topic, Err: tc.err, Count: tc.count})
			// Frequent metadata refreshes keep the client's own retries
			// short.
			p := openPublisher(t, c, outboxkafka.Config{}, kgo.MetadataMinAge(50*time.Millisecond))
			batch := publishertest.Messages(topic, 10)
			if tc.wait == 0 {
				tc.wait = 10 * time.Second
			}
			ctx, cancel := context.WithTimeout(context.Background(), tc.wait)
			defer cancel()
			errs := p.Publish(ctx, batch)
			if len(errs) != len(batch) {
				t.Fatalf("got %d results for %d messages", len(errs), len(batch))
			}
			var published []outbox.Message
			for i, err := range errs {
				got := ok
				switch {
				case outbox.IsPermanent(err):
					got = permanent
				case err != nil:
					got = retryable
				}
				if got != tc.want {
					t.Errorf("message %s after %s: %s (%v), want %s", batch[i].ID, tc.err.Message, got, err, tc.want)
				}
				if tc.want != ok && !errors.Is(err, tc.err) && !errors.Is(err, context.DeadlineExceeded) {
					t.Errorf("message %s: %v does not wrap %s", batch[i].ID, err, tc.err.Message)
				}
				if err == nil {
					published = append(published, batch[i])
				}
			}
			requireExactly(t, c, topic, published)
		})
	}
}

// TestUnreachableClusterFailsLaterBatchesUnavailableAndUnsent cuts every
// connection to the cluster (kfake closes each connection on its first
// request) and checks the three stages of an outage: the batch that runs out
// of time is an ordinary failure (its records were handed to the client,
// which keeps them and may send them later); every later batch fails at once
// as unavailable, without a record handed to the client, so an outage of any
// length neither uses up attempts nor piles up copies; and once the cluster
// answers again, batches are produced and nothing of the unavailable batches
// ever reaches the topic.
func TestUnreachableClusterFailsLaterBatchesUnavailableAndUnsent(t *testing.T) {
	t.Parallel()
	c := kafkatest.StartFake(t) // the outage is injected into kfake
	topic := c.Topic(t, 1, nil)
	var down atomic.Bool
	c.Fake().ControlKey(-1, func(kmsg.Request) (kmsg.Response, error, bool) {
		c.Fake().KeepControl()
		if down.Load() {
			return nil, errors.New("kafkatest: cluster down"), true // closes the connection
		}
		return nil, nil, false
	})
	p, client := withOwnClient(t, c, kgo.ProducerLinger(0), kgo.MetadataMinAge(50*time.Millisecond))
	before := publishertest.Messages(topic, 3)
	requireOK(t, before, p.Publish(ctxTimeout(t, 30*time.Second), before))

	down.Store(true)
	timedOut := publishertest.Messages(topic, 3)
	for i, err := range p.Publish(ctxTimeout(t, time.Second), timedOut) {
		if err == nil || outbox.IsUnavailable(err) || outbox.IsPermanent(err) {
			t.Fatalf("message %s of the batch that ran out of time: %v, want an ordinary retryable failure", timedOut[i].ID, err)
		}
	}
	buffered := client.BufferedProduceRecords()
	var unsent []outbox.Message
	for range 3 {
		batch := publishertest.Messages(topic, 5)
		unsent = append(unsent, batch...)
		for i, err := range p.Publish(ctxTimeout(t, 30*time.Second), batch) {
			if !outbox.IsUnavailable(err) || outbox.IsPermanent(err) {
				t.Fatalf("message %s during the outage: %v, want unavailable", batch[i].ID, err)
			}
		}
		if got := client.BufferedProduceRecords(); got != buffered {
			t.Fatalf("the client holds %d records after an unavailable batch, %d before: records were handed over", got, buffered)
		}
	}

	down.Store(false)
	after := publishertest.Messages(topic, 3)
	requireOK(t, after, p.Publish(ctxTimeout(t, 30*time.Second), after))

	// The batch that ran out of time may or may not be in the topic (the
	// client sends what it kept once it can): only the unavailable batches
	// must be absent.
	consumer := c.Consume(t, topic)
	records, err := consumer.Next(ctxTimeout(t, 30*time.Second), len(before)+len(after))
	if err != nil {
		t.Fatalf("reading the topic back: %v", err)
	}
	seen := map[string]bool{}
	for _, r := range records {
		seen[headerValue(r, outboxkafka.HeaderID)] = true
	}
	for {
		extra, err := consumer.Next(ctxTimeout(t, 300*time.Millisecond), 1)
		if err != nil {
			break
		}
		seen[headerValue(extra[0], outboxkafka.HeaderID)] = true
	}
	for _, m := range append(before, after...) {
		if !seen[m.ID.String()] {
			t.Errorf("published message %s is not in the topic", m.ID)
		}
	}
	for _, m := range unsent {
		if seen[m.ID.String()] {
			t.Errorf("message %s failed as unavailable but reached the topic", m.ID)
		}
	}
}
