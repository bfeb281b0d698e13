package outboxkafka_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/kafkatest"
	"github.com/go-outbox/outbox/outboxkafka"
	"github.com/go-outbox/outbox/publishertest"
)

// oversized is a payload over the client's default batch limit of 1,000,012
// bytes (kgo.ProducerBatchMaxBytes), which is below the broker's default
// max.message.bytes: the client refuses it before sending, the same way
// against kfake and against a real cluster.
var oversized = bytes.Repeat([]byte{'x'}, 1<<20+1)

// openPublisher returns a publisher made by Open on c (or on the seeds in opts when c is nil),
// closed when the test ends.
func openPublisher(t *testing.T, c *kafkatest.Cluster, cfg outboxkafka.Config, opts ...kgo.Opt) *outboxkafka.Publisher {
	t.Helper()
	seeds := []string{"127.0.0.1:1"} // replaced by a kgo.SeedBrokers option
	if c != nil {
		seeds = c.Seeds()
	}
	p, err := outboxkafka.Open(seeds, cfg, opts...)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return p
}

// withOwnClient returns a publisher made by New with a client of the test's
// own on c (built with opts), which is closed when the test ends.
func withOwnClient(t *testing.T, c *kafkatest.Cluster, opts ...kgo.Opt) (*outboxkafka.Publisher, *kgo.Client) {
	t.Helper()
	client, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(c.Seeds()...)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(client.Close)
	p, err := outboxkafka.New(client, outboxkafka.Config{})
	if err != nil {
		t.Fatal(err)
	}
	return p, client
}

// receiver reads records from consumer as publishertest.Received.
func receiver(consumer *kafkatest.Consumer) func(ctx context.Context, n int) ([]publishertest.Received, error) {
	return func(ctx context.Context, n int) ([]publishertest.Received, error) {
		records, err := consumer.Next(ctx, n)
		if err != nil {
			return nil, err
		}
		out := make([]publishertest.Received, len(records))
		for i, r := range records {
			out[i] = received(r)
		}
		return out, nil
	}
}

// requireExactly checks that topic holds want, each once, and nothing else.
func requireExactly(t *testing.T, c *kafkatest.Cluster, topic string, want []outbox.Message) {
	t.Helper()
	consumer := c.Consume(t, topic)
	if len(want) > 0 {
		publishertest.RequireReceived(t, publishertest.Harness{Receive: receiver(consumer)}, want)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if extra, err := consumer.Next(ctx, 1); err == nil {
		t.Errorf("topic %s holds a record beyond the %d published: %s", topic, len(want), headerValue(extra[0], outboxkafka.HeaderID))
	}
}

func received(r *kgo.Record) publishertest.Received {
	out := publishertest.Received{Topic: r.Topic, Key: string(r.Key), Payload: r.Value, Headers: map[string]string{}}
	for _, h := range r.Headers {
		out.Headers[h.Key] = string(h.Value)
		if h.Key == outboxkafka.HeaderID {
			out.ID = string(h.Value)
		}
	}
	return out
}

func ctxTimeout(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func requireOK(t *testing.T, batch []outbox.Message, errs []error) {
	t.Helper()
	if len(errs) != len(batch) {
		t.Fatalf("got %d results for %d messages", len(errs), len(batch))
	}
	for i, err := range errs {
		if err != nil {
			t.Fatalf("message %s: %v, want published", batch[i].ID, err)
		}
	}
}

func TestMessagesOfOneKeyLandOnOnePartition(t *testing.T) {
	t.Parallel()
	c := kafkatest.Start(t)
	topic := c.Topic(t, 4, nil)
	p := openPublisher(t, c, outboxkafka.Config{})
	batch := publishertest.Messages(topic, 100) // keys key-0 ... key-4
	requireOK(t, batch, p.Publish(ctxTimeout(t, 30*time.Second), batch))

	records, err := c.Consume(t, topic).Next(ctxTimeout(t, 30*time.Second), len(batch))
	if err != nil {
		t.Fatal(err)
	}
	partitions := map[string]map[int32]int{}
	used := map[int32]bool{}
	for _, r := range records {
		k := string(r.Key)
		if partitions[k] == nil {
			partitions[k] = map[int32]int{}
		}
		partitions[k][r.Partition]++
		used[r.Partition] = true
	}
	if len(partitions) != 5 {
		t.Fatalf("records carry %d distinct keys, want 5: %v", len(partitions), partitions)
	}
	for k, ps := range partitions {
		if len(ps) != 1 {
			t.Errorf("key %q was spread over partitions %v, want one partition", k, ps)
		}
	}
	if len(used) < 2 {
		t.Errorf("5 keys all hashed to partition(s) %v of 4: the key is not what partitions", used)
	}
	// Within a partition, one key's records keep the batch order.
	last := map[string]string{}
	for _, r := range records {
		seq := headerValue(r, "x-seq")
		if prev, ok := last[string(r.Key)]; ok && mustAtoi(seq) < mustAtoi(prev) {
			t.Errorf("key %q: record x-seq %s read after %s", r.Key, seq, prev)
		}
		last[string(r.Key)] = seq
	}
}

func TestRecordCarriesIDTopicKeyAndSortedHeaders(t *testing.T) {
	t.Parallel()
	c := kafkatest.Start(t)
	topic := c.Topic(t, 1, nil)
	p := openPublisher(t, c, outboxkafka.Config{})
	batch := publishertest.Messages(topic, 2)
	batch[0].Headers = map[string]string{"b": "2", "a": "1", "outbox-message-id": "forged"}
	batch[1].Key, batch[1].Payload, batch[1].Headers = "", nil, nil
	requireOK(t, batch, p.Publish(ctxTimeout(t, 30*time.Second), batch))

	records, err := c.Consume(t, topic).Next(ctxTimeout(t, 30*time.Second), 2)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, h := range records[0].Headers {
		names = append(names, h.Key)
	}
	if got, want := strings.Join(names, ","), "Outbox-Message-Id,Outbox-Topic,a,b"; got != want {
		t.Errorf("message %s: record headers %s, want %s (a message header cannot forge the id)", batch[0].ID, got, want)
	}
	if got := headerValue(records[0], outboxkafka.HeaderID); got != batch[0].ID.String() {
		t.Errorf("record id header %q, want %s", got, batch[0].ID)
	}
	if got := headerValue(records[0], outboxkafka.HeaderTopic); got != topic {
		t.Errorf("message %s: topic header %q, want %q", batch[0].ID, got, topic)
	}
	if string(records[0].Key) != batch[0].Key {
		t.Errorf("message %s: record key %q, want %q", batch[0].ID, records[0].Key, batch[0].Key)
	}
	if records[1].Key != nil || records[1].Value == nil || len(records[1].Value) != 0 {
		t.Errorf("message %s with no key and no payload: record key %q (want null), value %q (want empty, not a null tombstone)",
			batch[1].ID, records[1].Key, records[1].Value)
	}
}

func TestTopicAndTopicFuncChooseTheKafkaTopic(t *testing.T) {
	t.Parallel()
	c := kafkatest.Start(t)
	fixed, routed := c.Topic(t, 1, nil), c.Topic(t, 1, nil)

	msgs := publishertest.Messages("orders.created", 1)
	p := openPublisher(t, c, outboxkafka.Config{Topic: fixed})
	requireOK(t, msgs, p.Publish(ctxTimeout(t, 30*time.Second), msgs))
	r, err := c.Consume(t, fixed).Next(ctxTimeout(t, 30*time.Second), 1)
	if err != nil {
		t.Fatal(err)
	}
	if got := headerValue(r[0], outboxkafka.HeaderTopic); got != "orders.created" {
		t.Errorf("Config.Topic: topic header %q, want the message topic orders.created", got)
	}

	msgs = publishertest.Messages("orders.shipped", 1)
	p = openPublisher(t, c, outboxkafka.Config{TopicFunc: func(m outbox.Message) string {
		if strings.HasPrefix(m.Topic, "orders.") {
			return routed
		}
		return "elsewhere"
	}})
	requireOK(t, msgs, p.Publish(ctxTimeout(t, 30*time.Second), msgs))
	r, err = c.Consume(t, routed).Next(ctxTimeout(t, 30*time.Second), 1)
	if err != nil {
		t.Fatal(err)
	}
	if got := headerValue(r[0], outboxkafka.HeaderID); got != msgs[0].ID.String() {
		t.Errorf("Config.TopicFunc: read message %s, want %s", got, msgs[0].ID)
	}
}

func TestRecordOverTheTopicLimitIsPermanentAndSparesItsBatch(t *testing.T) {
	t.Parallel()
	c := kafkatest.Start(t)
	// The broker, not the client, refuses: the topic's limit is far below
	// the client's batch limit.
	topic := c.Topic(t, 1, map[string]string{"max.message.bytes": "4096"})
	p := openPublisher(t, c, outboxkafka.Config{})
	batch := publishertest.Messages(topic, 20)
	big := 7
	batch[big].Payload = make([]byte, 8192)
	_, _ = rand.Read(batch[big].Payload) // incompressible: the client compresses batches

	errs := p.Publish(ctxTimeout(t, 30*time.Second), batch)
	if len(errs) != len(batch) {
		t.Fatalf("got %d results for %d messages", len(errs), len(batch))
	}
	for i, err := range errs {
		switch {
		case i == big && !outbox.IsPermanent(err):
			t.Errorf("message %s over max.message.bytes: %v, want a permanent error", batch[i].ID, err)
		case i == big && !errors.Is(err, kerr.MessageTooLarge):
			t.Errorf("message %s over max.message.bytes: %v, want kerr.MessageTooLarge", batch[i].ID, err)
		case i != big && err != nil:
			t.Errorf("message %s, batched with a too-large one: %v, want published", batch[i].ID, err)
		}
	}
	good := append(batch[:big:big], batch[big+1:]...)
	records, err := c.Consume(t, topic).Next(ctxTimeout(t, 30*time.Second), len(good))
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, r := range records {
		seen[headerValue(r, outboxkafka.HeaderID)] = true
	}
	for _, m := range good {
		if !seen[m.ID.String()] {
			t.Errorf("message %s was reported published but is not in the topic", m.ID)
		}
	}
}

func TestRecordOverTheClientLimitIsPermanentWithoutASend(t *testing.T) {
	t.Parallel()
	p := openPublisher(t, nil, outboxkafka.Config{}, kgo.SeedBrokers(kafkatest.ClosedAddr(t)))
	m := publishertest.Messages("orders", 1)
	m[0].Payload = oversized
	errs := p.Publish(ctxTimeout(t, 5*time.Second), m)
	if !outbox.IsPermanent(errs[0]) || !errors.Is(errs[0], kerr.MessageTooLarge) {
		t.Fatalf("message %s over kgo.ProducerBatchMaxBytes: %v, want a permanent kerr.MessageTooLarge", m[0].ID, errs[0])
	}
}

func TestInvalidTopicNameIsPermanent(t *testing.T) {
	t.Parallel()
	c := kafkatest.Start(t)
	topic := c.Topic(t, 1, nil)
	p := openPublisher(t, c, outboxkafka.Config{})
	batch := publishertest.Messages(topic, 3)
	batch[1].Topic = "orders created" // valid as a message topic, not as a Kafka topic
	errs := p.Publish(ctxTimeout(t, 30*time.Second), batch)
	if errs[0] != nil || errs[2] != nil {
		t.Fatalf("valid messages failed: %v, %v", errs[0], errs[2])
	}
	if !outbox.IsPermanent(errs[1]) || !errors.Is(errs[1], kerr.InvalidTopicException) {
		t.Fatalf("message %s to topic %q: %v, want a permanent kerr.InvalidTopicException", batch[1].ID, batch[1].Topic, errs[1])
	}
}

func TestValidateTopic(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"orders", "orders.created", "Orders_v2-dlq", strings.Repeat("a", outboxkafka.MaxTopicLength)} {
		if err := outboxkafka.ValidateTopic(name); err != nil {
			t.Errorf("ValidateTopic(%q) = %v, want nil", name, err)
		}
	}
	for _, name := range []string{"", ".", "..", "a b", "orders/created", "é", strings.Repeat("a", outboxkafka.MaxTopicLength+1)} {
		if err := outboxkafka.ValidateTopic(name); !errors.Is(err, kerr.InvalidTopicException) {
			t.Errorf("ValidateTopic(%q) = %v, want kerr.InvalidTopicException", name, err)
		}
	}
}

func TestNewRefusesClientsThatWeakenDelivery(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		opt   kgo.Opt
		field string
	}{
		{"leader ack only", kgo.RequiredAcks(kgo.LeaderAck()), "kgo.RequiredAcks"},
		{"no ack", kgo.RequiredAcks(kgo.NoAck()), "kgo.RequiredAcks"},
		{"idempotency off", kgo.DisableIdempotentWrite(), "kgo.DisableIdempotentWrite"},
		{"transactional", kgo.TransactionalID("tx"), "kgo.TransactionalID"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			opts := []kgo.Opt{tc.opt}
			if tc.name == "no ack" || tc.name == "leader ack only" {
				opts = append(opts, kgo.DisableIdempotentWrite()) // franz-go requires it for acks < all
			}
			_, err := outboxkafka.Dial([]string{kafkatest.ClosedAddr(t)}, outboxkafka.Config{}, opts...)
			if !errors.Is(err, outbox.ErrInvalidConfig) || !strings.Contains(err.Error(), tc.field) {
				t.Fatalf("Dial with %s: %v, want a config error naming %s", tc.name, err, tc.field)
			}
		})
	}
}

func TestConfigErrorsNameTheField(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		cfg   outboxkafka.Config
		field string
	}{
		{outboxkafka.Config{Topic: "a", TopicFunc: func(outbox.Message) string { return "b" }}, "Config.Topic"},
		{outboxkafka.Config{Topic: "no spaces"}, "Config.Topic"},
		{outboxkafka.Config{CloseTimeout: -time.Second}, "Config.CloseTimeout"},
		{outboxkafka.Config{DialTimeout: -time.Second}, "Config.DialTimeout"},
	} {
		_, err := outboxkafka.Dial([]string{"127.0.0.1:1"}, tc.cfg)
		if !errors.Is(err, outbox.ErrInvalidConfig) || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("Dial(%+v): %v, want a config error naming %s", tc.cfg, err, tc.field)
		}
	}
	if _, err := outboxkafka.Dial(nil, outboxkafka.Config{}); !errors.Is(err, outbox.ErrInvalidConfig) {
		t.Errorf("Dial with no seeds: %v, want a config error", err)
	}
	if _, err := outboxkafka.New(nil, outboxkafka.Config{}); !errors.Is(err, outbox.ErrInvalidConfig) {
		t.Errorf("New(nil): %v, want a config error", err)
	}
}

func TestCloseOfANewPublisherLeavesTheClientToItsOwner(t *testing.T) {
	t.Parallel()
	c := kafkatest.Start(t)
	topic := c.Topic(t, 1, nil)
	p, client := withOwnClient(t, c)
	batch := publishertest.Messages(topic, 3)
	requireOK(t, batch, p.Publish(ctxTimeout(t, 30*time.Second), batch))
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if errs := p.Publish(ctxTimeout(t, 5*time.Second), batch[:1]); !errors.Is(errs[0], outboxkafka.ErrClosed) || outbox.IsPermanent(errs[0]) {
		t.Fatalf("Publish after Close: %v, want retryable ErrClosed", errs[0])
	}
	// The caller's client still works.
	if err := client.ProduceSync(ctxTimeout(t, 30*time.Second), &kgo.Record{Topic: topic, Value: []byte("after")}).FirstErr(); err != nil {
		t.Fatalf("the caller's client after the publisher's Close: %v", err)
	}
}

func TestConcurrentPublishAndClose(t *testing.T) {
	t.Parallel()
	c := kafkatest.Start(t)
	topic := c.Topic(t, 2, nil)
	p := openPublisher(t, c, outboxkafka.Config{})
	ctx := ctxTimeout(t, 30*time.Second)
	done := make(chan []error, 8)
	for range cap(done) {
		go func() { done <- p.Publish(ctx, publishertest.Messages(topic, 50)) }()
	}
	if err := p.Close(); err != nil {
		t.Errorf("Close while publishing: %v", err)
	}
	for range cap(done) {
		for _, err := range <-done {
			if err != nil && outbox.IsPermanent(err) {
				t.Errorf("publishing during Close: %v is permanent; it must be retryable", err)
			}
		}
	}
}

func headerValue(r *kgo.Record, key string) string {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

func mustAtoi(s string) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		panic(err)
	}
	return n
}

func TestOpenDoesNotConnectAndDialFailsWhenNoBrokerAnswers(t *testing.T) {
	t.Parallel()
	closed := kafkatest.ClosedAddr(t)
	p, err := outboxkafka.Open([]string{closed}, outboxkafka.Config{})
	if err != nil {
		t.Fatalf("Open with no broker listening: %v, want a publisher (it connects on first use)", err)
	}
	if err := p.Close(); err != nil {
		t.Errorf("Close of an Open publisher that never published: %v", err)
	}
	_, err = outboxkafka.Dial([]string{closed}, outboxkafka.Config{DialTimeout: 500 * time.Millisecond})
	if err == nil || !strings.Contains(err.Error(), closed) {
		t.Fatalf("Dial with no broker listening: %v, want an error naming %s", err, closed)
	}
}
