package outboxkafka_test

import (
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/kafkatest"
	"github.com/go-outbox/outbox/outboxkafka"
	"github.com/go-outbox/outbox/publishertest"
	"github.com/go-outbox/outbox/relaytest"
)

// A topic that does not exist yet is a deployment mistake an operator fixes:
// its messages fail retryably, counting attempts, and the fix is logged at
// ERROR level; once the topic exists the same messages go through.
func TestMissingTopicIsRetryableLogsTheFixAndPublishesOnceCreated(t *testing.T) {
	t.Parallel()
	// A topic of a fixed name: a cluster of its own forgets it.
	c := kafkatest.StartFake(t)
	logs := &relaytest.LogCapture{}
	// The client gives up on the topic at its first unknown-topic answer
	// instead of after 4 metadata refreshes.
	p := openPublisher(t, c, outboxkafka.Config{Logger: slog.New(logs)}, kgo.UnknownTopicRetries(0))
	topic := "outbox-test-created-late"
	batch := publishertest.Messages(topic, 2)

	errs := p.Publish(ctxTimeout(t, 10*time.Second), batch)
	for i, err := range errs {
		if err == nil || outbox.IsPermanent(err) || outbox.IsUnavailable(err) || !errors.Is(err, kerr.UnknownTopicOrPartition) {
			t.Fatalf("message %s to a topic not created yet: %v; want a retryable (attempt-counting) kerr.UnknownTopicOrPartition", batch[i].ID, err)
		}
	}
	if !logs.Has(slog.LevelError, topic, "create") {
		t.Errorf("no ERROR log naming topic %q and the fix; logged: %s", topic, logs)
	}

	createTopic(t, c, topic)
	errs = p.Publish(ctxTimeout(t, 10*time.Second), batch)
	requireOK(t, batch, errs)
	requireExactly(t, c, topic, batch)
}

// createTopic creates the topic named name with one partition.
func createTopic(t *testing.T, c *kafkatest.Cluster, name string) {
	t.Helper()
	admin, err := kgo.NewClient(kgo.SeedBrokers(c.Seeds()...))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	req := kmsg.NewPtrCreateTopicsRequest()
	req.TimeoutMillis = 10_000
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic, rt.NumPartitions, rt.ReplicationFactor = name, 1, -1
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctxTimeout(t, 10*time.Second), admin)
	if err == nil {
		err = kerr.ErrorForCode(resp.Topics[0].ErrorCode)
	}
	if err != nil {
		t.Fatalf("create topic %s: %v", name, err)
	}
}
