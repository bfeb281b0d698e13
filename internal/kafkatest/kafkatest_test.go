package kafkatest_test

import (
	"context"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/go-outbox/outbox/internal/kafkatest"
)

func TestTopicIsFreshAndConsumerReadsItFromTheStartInBatches(t *testing.T) {
	t.Parallel()
	c := kafkatest.Start(t)
	topic := c.Topic(t, 3, map[string]string{"max.message.bytes": "65536"})
	if other := c.Topic(t, 1, nil); other == topic {
		t.Fatalf("two calls of Topic returned the same name %s", topic)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	producer, err := kgo.NewClient(kgo.SeedBrokers(c.Seeds()...))
	if err != nil {
		t.Fatal(err)
	}
	defer producer.Close()
	for i := range 5 {
		r := &kgo.Record{Topic: topic, Key: []byte(strconv.Itoa(i)), Value: []byte(strconv.Itoa(i))}
		if err := producer.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	consumer := c.Consume(t, topic)
	first, err := consumer.Next(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	rest, err := consumer.Next(ctx, 3)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, r := range append(first, rest...) {
		seen[string(r.Value)] = true
	}
	if len(seen) != 5 {
		t.Fatalf("read %d distinct records in 2+3, want the 5 produced: %v", len(seen), seen)
	}
	short, cancelShort := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancelShort()
	if extra, err := consumer.Next(short, 1); err == nil {
		t.Fatalf("Next returned %v after every record was read, want a timeout", extra)
	}
}

func TestClosedAddrRefusesConnections(t *testing.T) {
	t.Parallel()
	addr := kafkatest.ClosedAddr(t)
	if conn, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		conn.Close()
		t.Fatalf("something listens on %s", addr)
	}
}

func TestStartFakeIsInProcessEvenWhenARealClusterIsNamed(t *testing.T) {
	t.Setenv(kafkatest.EnvSeeds, kafkatest.ClosedAddr(t))
	c := kafkatest.StartFake(t)
	if c.Fake() == nil {
		t.Fatal("StartFake returned a cluster without kfake while TEST_KAFKA_SEEDS was set")
	}
	if got, want := c.Seeds(), c.Fake().ListenAddrs(); len(got) != len(want) || got[0] != want[0] {
		t.Fatalf("seeds %v, want kfake's %v", got, want)
	}
	c.Topic(t, 1, nil)
}
