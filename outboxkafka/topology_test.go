package outboxkafka_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/kafkatest"
	"github.com/go-outbox/outbox/outboxkafka"
)

// topologyCtx is a context for a test's administrative calls, ended with it.
func topologyCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// partitionsOf returns how many partitions the cluster says topic has.
func partitionsOf(t *testing.T, seeds []string, topic string) int {
	t.Helper()
	admin, err := kadm.NewOptClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	details, err := admin.ListTopics(topologyCtx(t), topic)
	if err != nil || details[topic].Err != nil {
		t.Fatalf("list topic %s: %v %v", topic, err, details[topic].Err)
	}
	return len(details[topic].Partitions)
}

func TestDeclareTopicsCreatesAMissingTopicWithItsPartitionsAndThenFindsItThere(t *testing.T) {
	t.Parallel()
	c := kafkatest.StartFake(t) // topics of fixed names
	topics := []outboxkafka.Topic{{Name: "orders", Partitions: 6, Configs: map[string]string{"retention.ms": "86400000"}}, {Name: "billing"}}
	got, err := outboxkafka.DeclareTopics(topologyCtx(t), c.Seeds(), topics)
	if err != nil {
		t.Fatalf("DeclareTopics: %v", err)
	}
	if len(got) != 2 || got[0] != (outboxkafka.Declared{Action: outboxkafka.ActionCreated, Name: "orders", Partitions: 6}) || got[1].Action != outboxkafka.ActionCreated || got[1].Name != "billing" {
		t.Fatalf("DeclareTopics = %+v; want orders created with 6 partitions, then billing created", got)
	}
	if n := partitionsOf(t, c.Seeds(), "orders"); n != 6 {
		t.Fatalf("topic orders has %d partitions on the cluster; want 6", n)
	}
	got, err = outboxkafka.DeclareTopics(topologyCtx(t), c.Seeds(), topics)
	if err != nil {
		t.Fatalf("DeclareTopics again: %v", err)
	}
	if len(got) != 2 || got[0] != (outboxkafka.Declared{Action: outboxkafka.ActionExists, Name: "orders", Partitions: 6}) || got[1].Action != outboxkafka.ActionExists {
		t.Fatalf("DeclareTopics again = %+v; want both found existing, orders with its 6 partitions", got)
	}
}

func TestDeclareTopicsLeavesATopicWithFewerPartitionsAsItIsAndSaysSo(t *testing.T) {
	t.Parallel()
	c := kafkatest.Start(t)
	small, large := c.Topic(t, 2, nil), c.Topic(t, 8, nil)
	got, err := outboxkafka.DeclareTopics(topologyCtx(t), c.Seeds(), []outboxkafka.Topic{{Name: small, Partitions: 4}, {Name: large, Partitions: 4}})
	if !errors.Is(err, outboxkafka.ErrFewerPartitions) || !strings.Contains(err.Error(), small) || !strings.Contains(err.Error(), "2 partitions") || !strings.Contains(err.Error(), "--partitions 4") {
		t.Fatalf("DeclareTopics over a topic of 2 partitions asking for 4: %v; want ErrFewerPartitions naming %s, its 2 partitions and how to add them", err, small)
	}
	if len(got) != 1 || got[0] != (outboxkafka.Declared{Action: outboxkafka.ActionExists, Name: large, Partitions: 8}) {
		t.Fatalf("DeclareTopics = %+v; want only %s, found existing with its 8 partitions (more than asked is fine)", got, large)
	}
	if n := partitionsOf(t, c.Seeds(), small); n != 2 {
		t.Fatalf("topic %s has %d partitions after DeclareTopics; want its 2, unchanged", small, n)
	}
}

func TestDeclareTopicsRefusesABadTopicBeforeConnecting(t *testing.T) {
	t.Parallel()
	for _, topic := range []outboxkafka.Topic{{Name: ""}, {Name: "a b"}, {Name: "orders", Partitions: -1}, {Name: "orders", ReplicationFactor: -2}} {
		var cfgErr *outbox.ConfigError
		if _, err := outboxkafka.DeclareTopics(t.Context(), []string{"127.0.0.1:1"}, []outboxkafka.Topic{topic}); !errors.As(err, &cfgErr) {
			t.Errorf("DeclareTopics(%+v) = %v; want a *outbox.ConfigError", topic, err)
		}
	}
}
