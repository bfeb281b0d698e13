package main

import (
	"bytes"
	"context"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-outbox/outbox/internal/kafkatest"
	"github.com/go-outbox/outbox/internal/pgtest"
	"github.com/go-outbox/outbox/outboxkafka"
)

func TestKafkaURLNamesSeedsTopicAndCredentials(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		raw  string
		want kafkaTarget
	}{
		{"kafka://localhost:9092", kafkaTarget{seeds: []string{"localhost:9092"}}},
		{"kafka://b1,b2:9093,[::1]:9094,[::1]/?topic=orders", kafkaTarget{seeds: []string{"b1:9092", "b2:9093", "[::1]:9094", "[::1]:9092"}, topic: "orders"}},
		{"KAFKA://u:p%40ss@b1:9092?tls=true", kafkaTarget{seeds: []string{"b1:9092"}, tls: true, user: "u", password: "p@ss", sasl: "plain"}},
		{"kafka://u:p@b1?sasl=SCRAM-SHA-512&client_id=relay-1", kafkaTarget{seeds: []string{"b1:9092"}, user: "u", password: "p", sasl: "scram-sha-512", clientID: "relay-1"}},
	} {
		got, err := parseKafkaURL(tc.raw)
		if err != nil {
			t.Errorf("parseKafkaURL(%q): %v", tc.raw, err)
			continue
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("parseKafkaURL(%q) = %+v, want %+v", tc.raw, got, tc.want)
		}
	}
}

// Not parallel: a password in a --publisher URL is added to the command's
// list of secrets, which parallel tests read without a lock.
func TestKafkaURLErrorsSayWhatToWriteAndHideThePassword(t *testing.T) {
	for _, tc := range []struct{ raw, want string }{
		{"kafka://", "no broker address"},
		{"kafka://b1:x", "port"},
		{"kafka://b1/orders", "?topic="},
		{"kafka://b1?topic=no%20spaces", "topic="},
		{"kafka://b1?tls=maybe", "tls="},
		{"kafka://b1?sasl=gssapi", "scram-sha-256"},
		{"kafka://b1?sasl=plain", "user:password@"},
		{"kafka://s3cret@b1", "user:password@"},
		{"kafka://u:s3cret@b1?acks=1", "unknown parameter"},
	} {
		code, _, stderr := cli(t, "relay", "--publisher", tc.raw, "--database-url", "postgres://x@127.0.0.1:1/db")
		if code != 2 || !strings.Contains(stderr, tc.want) {
			t.Errorf("relay --publisher %s: exit %d, stderr %q; want exit 2 and %q", tc.raw, code, stderr, tc.want)
		}
		if strings.Contains(stderr, "s3cret") {
			t.Errorf("relay --publisher %s printed the password: %q", tc.raw, stderr)
		}
	}
}

func TestRelayPublishesToKafka(t *testing.T) {
	t.Parallel()
	url, schema := pgtest.URL(t), pgtest.Schema(t)
	cluster := kafkatest.Start(t)
	topic := cluster.Topic(t, 2, nil)
	db := []string{"--database-url", url, "--schema", schema}
	with := func(args ...string) []string { return append(append([]string{}, args...), db...) }

	mustCLI(t, with("migrate", "up")...)
	var ids []string
	for _, key := range []string{"o-1", "o-2", "o-1"} {
		ids = append(ids, strings.TrimSpace(mustCLI(t, with("send", "--topic", "orders.created", "--key", key, "--payload", `{"key":"`+key+`"}`)...)))
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	relayCtx, stopRelay := context.WithCancel(ctx)
	var stderr bytes.Buffer
	done := make(chan int, 1)
	go func() {
		publisher := "kafka://" + strings.Join(cluster.Seeds(), ",") + "?topic=" + topic
		done <- run(relayCtx, with("relay", "--publisher", publisher, "--poll-interval", "100ms"), &bytes.Buffer{}, &stderr)
	}()

	records, err := cluster.Consume(t, topic).Next(ctx, len(ids))
	stopRelay()
	if code := <-done; code != 0 {
		t.Errorf("relay exited with %d: %s", code, stderr.String())
	}
	if err != nil {
		t.Fatalf("reading the relayed messages: %v; relay stderr: %s", err, stderr.String())
	}
	var got []string
	for _, r := range records {
		for _, h := range r.Headers {
			if h.Key == outboxkafka.HeaderID {
				got = append(got, string(h.Value))
			}
			if h.Key == outboxkafka.HeaderTopic && string(h.Value) != "orders.created" {
				t.Errorf("record %s: topic header %q, want orders.created", r.Key, h.Value)
			}
		}
	}
	slices.Sort(got)
	slices.Sort(ids)
	if !slices.Equal(got, ids) {
		t.Fatalf("Kafka received messages %v, want %v", got, ids)
	}
}

func TestKafkaPublisherOpensWhileKafkaIsDown(t *testing.T) {
	t.Parallel()
	pub, err := openKafka("kafka://" + kafkatest.ClosedAddr(t) + "?topic=orders")
	if err != nil {
		t.Fatalf("openKafka with no broker listening: %v; the relay must start and retry while Kafka is down", err)
	}
	if err := pub.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
}

// A ?topic= that does not exist would fail every message: the relay refuses
// to start, naming the topic and the fix.
func TestRelayRefusesToStartWithAMissingKafkaTopic(t *testing.T) {
	t.Parallel()
	cluster := kafkatest.Start(t)
	publisher := "kafka://" + strings.Join(cluster.Seeds(), ",") + "?topic=orders-not-created"
	code, _, stderr := cli(t, "relay", "--publisher", publisher, "--database-url", "postgres://x@127.0.0.1:1/db")
	if code != 1 || !strings.Contains(stderr, `topic "orders-not-created"`) || !strings.Contains(stderr, "create") {
		t.Fatalf("relay with a missing Kafka topic: exit %d, stderr %q; want exit 1 naming the topic and the fix", code, stderr)
	}
}
