// Package kafkatest gives tests a Kafka cluster and the means to create topics
// on it and read records back.
//
// By default every Start begins an in-process kfake cluster (a Kafka-protocol
// fake from franz-go, ready in about a millisecond) on 127.0.0.1, closed when
// the test ends: no Kafka server can be installed on the machines these tests
// run on. When TEST_KAFKA_SEEDS is set (host:port[,host:port...]) the same
// tests run against that real cluster instead, each on topics with fresh
// random names that are deleted afterwards, so parallel tests and test runs
// never see each other's records. StartFake always begins a kfake cluster,
// for the tests that inject faults or need a cluster of their own.
package kafkatest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// EnvSeeds names the environment variable that points the tests at a real
// cluster: comma-separated host:port seed brokers.
const EnvSeeds = "TEST_KAFKA_SEEDS"

// setupTimeout bounds every administrative call the helpers make.
const setupTimeout = 30 * time.Second

// Cluster is a Kafka cluster a test may create topics on.
type Cluster struct {
	admin *kgo.Client
	// fake is nil when the cluster is the real one of TEST_KAFKA_SEEDS.
	fake  *kfake.Cluster
	seeds []string
}

// Start returns a fresh kfake cluster with one broker, or the cluster of
// TEST_KAFKA_SEEDS when that is set. Everything is closed when t ends.
func Start(t testing.TB) *Cluster {
	t.Helper()
	env := os.Getenv(EnvSeeds)
	if env == "" {
		return StartFake(t)
	}
	c := &Cluster{}
	for s := range strings.SplitSeq(env, ",") {
		if s = strings.TrimSpace(s); s != "" {
			c.seeds = append(c.seeds, s)
		}
	}
	c.openAdmin(t)
	return c
}

// StartFake returns a fresh in-process kfake cluster with one broker,
// whatever TEST_KAFKA_SEEDS says, for tests that inject faults into it or
// that a real cluster shared by test runs cannot host (topics of fixed names,
// a cluster taken down): they run everywhere and never skip. opts are added
// to the cluster's options. Everything is closed when t ends.
func StartFake(t testing.TB, opts ...kfake.Opt) *Cluster {
	t.Helper()
	fake, err := kfake.NewCluster(append([]kfake.Opt{kfake.NumBrokers(1)}, opts...)...)
	if err != nil {
		t.Fatalf("kafkatest: start kfake cluster: %v", err)
	}
	t.Cleanup(fake.Close)
	c := &Cluster{fake: fake, seeds: fake.ListenAddrs()}
	c.openAdmin(t)
	return c
}

func (c *Cluster) openAdmin(t testing.TB) {
	t.Helper()
	admin, err := kgo.NewClient(kgo.SeedBrokers(c.seeds...))
	if err != nil {
		t.Fatalf("kafkatest: admin client for %v: %v", c.seeds, err)
	}
	t.Cleanup(admin.Close)
	c.admin = admin
}

// Seeds returns the addresses of the cluster's seed brokers.
func (c *Cluster) Seeds() []string { return append([]string(nil), c.seeds...) }

// Fake returns the in-process kfake cluster, for tests that inject faults,
// or nil when the cluster is the real one of TEST_KAFKA_SEEDS: tests that
// need it start their cluster with StartFake.
func (c *Cluster) Fake() *kfake.Cluster { return c.fake }

// Topic creates a topic with a fresh name, the given number of partitions and
// topic configs (such as "max.message.bytes"), waits until every partition
// has a leader, and returns its name. On a real cluster the topic is deleted
// when t ends.
func (c *Cluster) Topic(t testing.TB, partitions int32, configs map[string]string) string {
	t.Helper()
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := "outbox-test-" + hex.EncodeToString(b[:])
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()

	req := kmsg.NewPtrCreateTopicsRequest()
	req.TimeoutMillis = int32(setupTimeout / time.Millisecond)
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic = name
	rt.NumPartitions = partitions
	rt.ReplicationFactor = -1 // the broker's default
	for k, v := range configs {
		rc := kmsg.NewCreateTopicsRequestTopicConfig()
		rc.Name, rc.Value = k, kmsg.StringPtr(v)
		rt.Configs = append(rt.Configs, rc)
	}
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, c.admin)
	if err == nil && len(resp.Topics) != 1 {
		err = fmt.Errorf("%d topics in the response", len(resp.Topics))
	}
	if err == nil {
		err = kerr.ErrorForCode(resp.Topics[0].ErrorCode)
	}
	if err != nil {
		t.Fatalf("kafkatest: create topic %s: %v", name, err)
	}
	if c.fake == nil {
		t.Cleanup(func() { c.deleteTopic(t, name) })
	}
	if err := c.waitForLeaders(ctx, name, int(partitions)); err != nil {
		t.Fatalf("kafkatest: topic %s: %v", name, err)
	}
	return name
}

// waitForLeaders polls the metadata until topic has its partitions, each
// with a leader: a real cluster propagates a new topic to its brokers
// asynchronously, and a producer that looks too early is told the topic does
// not exist.
func (c *Cluster) waitForLeaders(ctx context.Context, topic string, partitions int) error {
	var last error
	for {
		req := kmsg.NewPtrMetadataRequest()
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr(topic)
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(ctx, c.admin)
		switch {
		case err != nil:
			last = err
		case len(resp.Topics) != 1:
			last = fmt.Errorf("%d topics in the metadata", len(resp.Topics))
		case resp.Topics[0].ErrorCode != 0:
			last = kerr.ErrorForCode(resp.Topics[0].ErrorCode)
		case len(resp.Topics[0].Partitions) != partitions:
			last = fmt.Errorf("%d of %d partitions in the metadata", len(resp.Topics[0].Partitions), partitions)
		default:
			last = nil
			for _, p := range resp.Topics[0].Partitions {
				if p.ErrorCode != 0 || p.Leader < 0 {
					last = fmt.Errorf("partition %d has no leader yet", p.Partition)
				}
			}
			if last == nil {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("not ready after %v: %w", setupTimeout, last)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (c *Cluster) deleteTopic(t testing.TB, name string) {
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	req := kmsg.NewPtrDeleteTopicsRequest()
	req.TimeoutMillis = int32(setupTimeout / time.Millisecond)
	rt := kmsg.NewDeleteTopicsRequestTopic()
	rt.Topic = kmsg.StringPtr(name)
	req.Topics = append(req.Topics, rt)
	req.TopicNames = append(req.TopicNames, name)
	resp, err := req.RequestWith(ctx, c.admin)
	if err == nil && len(resp.Topics) == 1 {
		err = kerr.ErrorForCode(resp.Topics[0].ErrorCode)
	}
	if err != nil {
		t.Logf("kafkatest: delete topic %s: %v", name, err)
	}
}

// Consumer reads one topic from its start, across all partitions.
type Consumer struct {
	client *kgo.Client

	mu      sync.Mutex
	pending []*kgo.Record
}

// Consume returns a consumer of topic from its first offset, closed when t
// ends.
func (c *Cluster) Consume(t testing.TB, topic string) *Consumer {
	t.Helper()
	client, err := kgo.NewClient(
		kgo.SeedBrokers(c.seeds...),
		kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(250*time.Millisecond),
	)
	if err != nil {
		t.Fatalf("kafkatest: consumer of %s: %v", topic, err)
	}
	t.Cleanup(client.Close)
	return &Consumer{client: client}
}

// Next returns the next n records, waiting for them until ctx ends. Records
// come in partition order, not across partitions. Records beyond n are kept
// for the next call.
func (c *Consumer) Next(ctx context.Context, n int) ([]*kgo.Record, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for len(c.pending) < n {
		fetches := c.client.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("kafkatest: got %d of %d records: %w", len(c.pending), n, err)
		}
		var errs []error
		fetches.EachError(func(topic string, partition int32, err error) {
			errs = append(errs, fmt.Errorf("%s[%d]: %w", topic, partition, err))
		})
		if err := errors.Join(errs...); err != nil {
			return nil, fmt.Errorf("kafkatest: fetch: %w", err)
		}
		c.pending = append(c.pending, fetches.Records()...)
	}
	out := c.pending[:n:n]
	c.pending = c.pending[n:]
	return out, nil
}

// ClosedAddr returns a 127.0.0.1 address where nothing listens: a port that
// was bound, then released.
func ClosedAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("kafkatest: %v", err)
	}
	addr := l.Addr().String()
	if err := l.Close(); err != nil {
		t.Fatalf("kafkatest: %v", err)
	}
	return addr
}
