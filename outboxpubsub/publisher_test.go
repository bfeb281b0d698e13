package outboxpubsub_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/outboxpubsub"
	"github.com/go-outbox/outbox/publishertest"
)

// harness gives the conformance suite a fake server of its own with the
// topic "orders.created"; a header value over Pub/Sub's 1024 bytes is the
// invalid message; every message goes to it through Config.Topic.
func harness(ordering bool) func(t *testing.T) publishertest.Harness {
	return func(t *testing.T) publishertest.Harness {
		const topic = "orders.created"
		srv := server(t, nil)
		createTopic(t, srv, topic)
		// One Pub/Sub topic, as with ordering keys ForRelay keeps key
		// order only then: the suite runs on what the relay gets.
		cfg := outboxpubsub.Config{OrderingKeys: ordering, Topic: topic}
		return publishertest.Harness{
			Publisher: open(t, srv.Addr, "pubsub://"+project, cfg).ForRelay(),
			Topic:     topic,
			Receive:   receiver(srv, topic),
			Unreachable: func(t *testing.T) outbox.Publisher {
				p, err := outboxpubsub.Open(ctxFor(t, 5*time.Second), "pubsub://"+project, cfg, clientOptions(closedAddr(t))...)
				if err != nil {
					t.Fatalf("Open with no server: %v", err)
				}
				return p.ForRelay()
			},
			Invalid: func() outbox.Message {
				m := publishertest.Messages(topic, 1)[0]
				m.Headers["big"] = strings.Repeat("x", 2000)
				return m
			},
		}
	}
}

func TestPublisherConformance(t *testing.T) {
	t.Parallel()
	publishertest.Run(t, harness(false))
}

func TestPublisherConformanceWithOrderingKeys(t *testing.T) {
	t.Parallel()
	publishertest.Run(t, harness(true))
}

// Each message's data is its payload; the outbox id, topic and key and the
// headers are attributes; the Pub/Sub topic is the outbox topic by default.
func TestMessageCarriesThePayloadAsDataAndIDTopicKeyAndHeadersAsAttributes(t *testing.T) {
	t.Parallel()
	srv := server(t, nil)
	createTopic(t, srv, "orders.created")
	p := open(t, srv.Addr, "pubsub://"+project, outboxpubsub.Config{})
	m := publishertest.Messages("orders.created", 1)[0]
	m.Key, m.Headers = "order-7", map[string]string{"trace-id": "abc"}
	m.Payload = []byte{0, 1, 0xff, 'x'}
	if err := p.Publish(ctxFor(t, 10*time.Second), []outbox.Message{m})[0]; err != nil {
		t.Fatalf("Publish %s: %v", m.ID, err)
	}
	ms := stored(srv, "orders.created")
	if len(ms) != 1 {
		t.Fatalf("topic orders.created has %d messages, want 1", len(ms))
	}
	want := map[string]string{"outbox-message-id": m.ID.String(), "outbox-topic": "orders.created", "outbox-key": "order-7", "trace-id": "abc"}
	if string(ms[0].Data) != string(m.Payload) || len(ms[0].Attributes) != len(want) {
		t.Errorf("message %s stored as data %q attributes %v; want data %q attributes %v", m.ID, ms[0].Data, ms[0].Attributes, m.Payload, want)
	}
	for k, v := range want {
		if ms[0].Attributes[k] != v {
			t.Errorf("message %s: attribute %q = %q, want %q", m.ID, k, ms[0].Attributes[k], v)
		}
	}
	if ms[0].OrderingKey != "" {
		t.Errorf("message %s has ordering key %q without Config.OrderingKeys", m.ID, ms[0].OrderingKey)
	}
}

// Config.Topic sends everything to one topic, TopicPrefix puts a prefix
// before each outbox topic, and TopicFor maps each message.
func TestTopicTopicPrefixAndTopicForChooseThePubSubTopic(t *testing.T) {
	t.Parallel()
	srv := server(t, nil)
	for _, topic := range []string{"all", "ev-a.b", "for-k1"} {
		createTopic(t, srv, topic)
	}
	for _, tc := range []struct {
		cfg  outboxpubsub.Config
		want string
	}{
		{outboxpubsub.Config{Topic: "all"}, "all"},
		{outboxpubsub.Config{Topic: "projects/" + project + "/topics/all"}, "all"},
		{outboxpubsub.Config{TopicPrefix: "ev-"}, "ev-a.b"},
		{outboxpubsub.Config{TopicFor: func(m outbox.Message) string { return "for-" + m.Key }}, "for-k1"},
	} {
		p := open(t, srv.Addr, "pubsub://"+project, tc.cfg)
		m := publishertest.Messages("a.b", 1)
		m[0].Key = "k1"
		before := len(stored(srv, tc.want))
		for range 2 { // the second batch reuses the topic's publisher
			if err := p.Publish(ctxFor(t, 10*time.Second), m)[0]; err != nil {
				t.Fatalf("config %+v: message %s: %v", tc.cfg, m[0].ID, err)
			}
		}
		if n := len(stored(srv, tc.want)) - before; n != 2 {
			t.Errorf("config %+v: topic %s got %d messages, want 2", tc.cfg, tc.want, n)
		}
	}
}

// With ordering keys each message carries its key as ordering key, and a
// batch's messages of a key are stored in batch order.
func TestOrderingKeysCarryTheKeyAndKeepABatchsOrderPerKey(t *testing.T) {
	t.Parallel()
	srv := server(t, nil)
	createTopic(t, srv, "orders")
	p := open(t, srv.Addr, "pubsub://"+project+"/orders", outboxpubsub.Config{OrderingKeys: true})
	batch := publishertest.Messages("orders", 60)
	for i := range batch {
		batch[i].Key = []string{"a", "b", "c"}[i%3]
	}
	for i, err := range p.Publish(ctxFor(t, 10*time.Second), batch) {
		if err != nil {
			t.Fatalf("message %s: %v", batch[i].ID, err)
		}
	}
	next := map[string]int{}
	for _, m := range stored(srv, "orders") {
		if m.OrderingKey != m.Attributes[outboxpubsub.AttrKey] {
			t.Fatalf("message %s has ordering key %q, want its key %q", m.Attributes[outboxpubsub.AttrID], m.OrderingKey, m.Attributes[outboxpubsub.AttrKey])
		}
		i := next[m.OrderingKey]*3 + strings.Index("abc", m.OrderingKey)
		if m.Attributes[outboxpubsub.AttrID] != batch[i].ID.String() {
			t.Fatalf("key %s's message %d is %s, want %s: the batch's order was not kept", m.OrderingKey, next[m.OrderingKey], m.Attributes[outboxpubsub.AttrID], batch[i].ID)
		}
		next[m.OrderingKey]++
	}
}

// The publisher for the relay keeps key order only when the client pauses
// a key after a failure, that is with ordering keys, and only with one
// Pub/Sub topic: the client orders a key per topic, the relay per outbox
// key, which TopicPrefix or TopicFor may spread over several topics.
func TestForRelayIsAKeyOrderKeeperOnlyWithOrderingKeysOnOneTopic(t *testing.T) {
	t.Parallel()
	addr := closedAddr(t)
	for _, tc := range []struct {
		cfg  outboxpubsub.Config
		want bool
	}{
		{outboxpubsub.Config{Topic: "orders"}, false},
		{outboxpubsub.Config{Topic: "orders", OrderingKeys: true}, true},
		{outboxpubsub.Config{TopicPrefix: "ev-", OrderingKeys: true}, false},
		{outboxpubsub.Config{TopicFor: func(outbox.Message) string { return "orders" }, OrderingKeys: true}, false},
		{outboxpubsub.Config{OrderingKeys: true}, false},
	} {
		p := open(t, addr, "pubsub://"+project, tc.cfg)
		if _, ok := p.ForRelay().(outbox.KeyOrderKeeper); ok != tc.want {
			t.Errorf("OrderingKeys %v, Topic %q, TopicPrefix %q, TopicFor set %v: ForRelay is a KeyOrderKeeper: %v, want %v",
				tc.cfg.OrderingKeys, tc.cfg.Topic, tc.cfg.TopicPrefix, tc.cfg.TopicFor != nil, ok, tc.want)
		}
		var plain outbox.Publisher = p
		if _, ok := plain.(outbox.KeyOrderKeeper); ok {
			t.Errorf("config %+v: the Publisher itself claims key order", tc.cfg)
		}
	}
}

func TestConfigErrorsNameTheField(t *testing.T) {
	t.Parallel()
	for field, cfg := range map[string]outboxpubsub.Config{
		"outboxpubsub.Config.ThrottleDelay": {ThrottleDelay: -time.Second},
		"outboxpubsub.Config.Timeout":       {Timeout: -time.Second},
		"outboxpubsub.Config.Topic":         {Topic: "t-1", TopicPrefix: "p-"},
		"outboxpubsub.Config.PublishSettings.FlowControlSettings.LimitExceededBehavior": {OrderingKeys: true,
			PublishSettings: &pubsub.PublishSettings{FlowControlSettings: pubsub.FlowControlSettings{
				MaxOutstandingMessages: 10, LimitExceededBehavior: pubsub.FlowControlSignalError}}},
	} {
		var ce *outbox.ConfigError
		if err := cfg.Validate(); !errors.As(err, &ce) || ce.Field != field || ce.Fix == "" {
			t.Errorf("Validate(%+v) = %v, want a ConfigError naming %s with a fix", cfg, err, field)
		}
		if _, err := outboxpubsub.Open(ctxFor(t, 5*time.Second), "pubsub://p", cfg, clientOptions(closedAddr(t))...); !errors.Is(err, outbox.ErrInvalidConfig) {
			t.Errorf("Open with %s invalid = %v, want the ConfigError", field, err)
		}
	}
	if err := (outboxpubsub.Config{Topic: "9lives"}).Validate(); err == nil {
		t.Errorf("Validate of topic id 9lives (not starting with a letter) = nil")
	}
}

// A URL names the project and perhaps the topic; credentials never go in it,
// and the error does not repeat them.
func TestParseURLReadsProjectAndTopicAndRefusesCredentials(t *testing.T) {
	t.Parallel()
	if pr, tp, err := outboxpubsub.ParseURL("pubsub://my-proj/orders"); pr != "my-proj" || tp != "orders" || err != nil {
		t.Errorf("ParseURL(pubsub://my-proj/orders) = %q, %q, %v", pr, tp, err)
	}
	if pr, tp, err := outboxpubsub.ParseURL("pubsub://my-proj"); pr != "my-proj" || tp != "" || err != nil {
		t.Errorf("ParseURL(pubsub://my-proj) = %q, %q, %v", pr, tp, err)
	}
	for _, bad := range []string{"pubsub://user:s3cret@my-proj/orders", "redis://my-proj/orders", "pubsub:///orders", "pubsub://p/goog-x", "pubsub://p/a/b"} {
		_, _, err := outboxpubsub.ParseURL(bad)
		if err == nil || strings.Contains(err.Error(), "s3cret") {
			t.Errorf("ParseURL(%s) = %v, want an error without the password", bad, err)
		}
	}
}

// New publishes on the caller's client and Close leaves it open; a topic's
// publisher is stopped, so Publish after Close fails retryably.
func TestNewUsesTheCallersClientAndCloseLeavesItOpen(t *testing.T) {
	t.Parallel()
	srv := server(t, nil)
	createTopic(t, srv, "orders")
	client, err := pubsub.NewClient(ctxFor(t, 10*time.Second), project, clientOptions(srv.Addr)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Close() })
	p, err := outboxpubsub.New(client, outboxpubsub.Config{Topic: "orders"})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Check(ctxFor(t, 5*time.Second)); err != nil {
		t.Fatalf("Check of an existing topic: %v", err)
	}
	m := publishertest.Messages("orders", 1)
	if err := p.Publish(ctxFor(t, 10*time.Second), m)[0]; err != nil {
		t.Fatalf("message %s: %v", m[0].ID, err)
	}
	if err := p.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if _, err := client.TopicAdminClient.GetTopic(ctxFor(t, 5*time.Second), &pubsubpb.GetTopicRequest{Topic: fullName("orders")}); err != nil {
		t.Fatalf("the caller's client after Close: %v; want it open", err)
	}
	if _, err := outboxpubsub.New(nil, outboxpubsub.Config{}); !errors.Is(err, outbox.ErrInvalidConfig) {
		t.Errorf("New(nil) = %v, want a ConfigError", err)
	}
}
