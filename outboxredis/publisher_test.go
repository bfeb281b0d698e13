package outboxredis_test

import (
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/redistest"
	"github.com/go-outbox/outbox/outboxredis"
	"github.com/go-outbox/outbox/publishertest"
)

// harness gives the conformance suite a fresh stream on the test server,
// with a MaxPayload of 64 KiB so that a larger message is the invalid one.
func harness(t *testing.T) publishertest.Harness {
	c, stream := client(t)
	cfg := outboxredis.Config{Stream: stream, MaxPayload: 64 << 10}
	const topic = "orders.created"
	return publishertest.Harness{
		Publisher: open(t, redistest.URL(t), cfg),
		Topic:     topic,
		Receive:   receiver(c, stream),
		Unreachable: func(t *testing.T) outbox.Publisher {
			p, err := outboxredis.Open(redistest.ClosedURL(t), cfg)
			if err != nil {
				t.Fatalf("Open with no server: %v", err)
			}
			return p
		},
		Invalid: func() outbox.Message {
			m := publishertest.Messages(topic, 1)[0]
			m.Payload = make([]byte, 100<<10)
			return m
		},
	}
}

func TestPublisherConformance(t *testing.T) {
	t.Parallel()
	publishertest.Run(t, harness)
}

// Each message becomes one entry whose fields carry the id, topic, key,
// payload and headers; the stream is the topic by default.
func TestEntryCarriesIDTopicKeyPayloadAndPrefixedHeadersInTheTopicsStream(t *testing.T) {
	t.Parallel()
	c, topic := client(t)
	p := open(t, redistest.URL(t), outboxredis.Config{})
	m := publishertest.Messages(topic, 1)[0]
	m.Key, m.Headers = "order-7", map[string]string{"trace-id": "abc", "id": "an application header named id"}
	m.Payload = []byte{0, 1, 0xff, 'x'}
	if err := p.Publish(ctxFor(t, 10*time.Second), []outbox.Message{m})[0]; err != nil {
		t.Fatalf("Publish %s: %v", m.ID, err)
	}
	xs := entries(t, c, topic)
	if len(xs) != 1 {
		t.Fatalf("stream %s (the topic) has %d entries, want 1", topic, len(xs))
	}
	want := map[string]any{
		"id": m.ID.String(), "topic": topic, "key": "order-7", "payload": string(m.Payload),
		"h:trace-id": "abc", "h:id": "an application header named id",
	}
	if len(xs[0].Values) != len(want) {
		t.Errorf("entry of %s has fields %v, want %v", m.ID, xs[0].Values, want)
	}
	for k, v := range want {
		if xs[0].Values[k] != v {
			t.Errorf("entry of %s: field %q = %q, want %q", m.ID, k, xs[0].Values[k], v)
		}
	}
}

// A batch is one pipeline and a stream keeps XADD order, so a key's messages
// of one batch arrive in batch order, interleaved with other keys.
func TestMessagesOfAKeyInOneBatchArriveInBatchOrder(t *testing.T) {
	t.Parallel()
	c, stream := client(t)
	p := open(t, redistest.URL(t), outboxredis.Config{Stream: stream})
	batch := publishertest.Messages("orders", 60)
	for i := range batch {
		batch[i].Key = []string{"a", "b", "c"}[i%3]
	}
	for i, err := range p.Publish(ctxFor(t, 10*time.Second), batch) {
		if err != nil {
			t.Fatalf("message %s: %v", batch[i].ID, err)
		}
	}
	xs := entries(t, c, stream)
	if len(xs) != len(batch) {
		t.Fatalf("%d entries, want %d", len(xs), len(batch))
	}
	for i, x := range xs {
		if x.Values["id"] != batch[i].ID.String() {
			t.Fatalf("entry %d is message %v, want %s: the batch's order was not kept", i, x.Values["id"], batch[i].ID)
		}
	}
}

// Config.MaxLen trims the stream (approximately, as MAXLEN ~ does) as
// messages are appended.
func TestMaxLenTrimsTheStreamToAboutThatManyEntries(t *testing.T) {
	t.Parallel()
	c, stream := client(t)
	p := open(t, redistest.URL(t), outboxredis.Config{Stream: stream, MaxLen: 10})
	for range 5 {
		for i, err := range p.Publish(ctxFor(t, 10*time.Second), publishertest.Messages("t", 200)) {
			if err != nil {
				t.Fatalf("message %d: %v", i, err)
			}
		}
	}
	// ~ trims whole nodes of 100 entries (stream-node-max-entries).
	if n := c.XLen(ctxFor(t, 5*time.Second), stream).Val(); n < 10 || n > 300 {
		t.Fatalf("stream holds %d entries after 1000 appends with MaxLen 10, want about 10 (at most a node more)", n)
	}
}

// The publisher cannot hold back a key's later messages after a refused
// XADD, since the whole pipeline is sent before any reply: it must not claim
// to, so the relay publishes a key's messages in waves.
func TestPublisherDoesNotClaimToKeepKeyOrder(t *testing.T) {
	t.Parallel()
	var p outbox.Publisher = open(t, redistest.ClosedURL(t), outboxredis.Config{})
	if _, ok := p.(outbox.KeyOrderKeeper); ok {
		t.Fatal("the publisher is an outbox.KeyOrderKeeper, but a refused XADD does not stop the later ones of its key")
	}
}

func TestConfigErrorsNameTheField(t *testing.T) {
	t.Parallel()
	for field, cfg := range map[string]outboxredis.Config{
		"outboxredis.Config.MaxLen":        {MaxLen: -1},
		"outboxredis.Config.MaxPayload":    {MaxPayload: -1},
		"outboxredis.Config.ThrottleDelay": {ThrottleDelay: -time.Second},
		"outboxredis.Config.Timeout":       {Timeout: -time.Second},
		"outboxredis.Config.Stream":        {Stream: "s", StreamPrefix: "p:"},
	} {
		var ce *outbox.ConfigError
		if err := cfg.Validate(); !errors.As(err, &ce) || ce.Field != field || ce.Fix == "" {
			t.Errorf("Validate(%+v) = %v, want a ConfigError naming %s with a fix", cfg, err, field)
		}
		if _, err := outboxredis.Open("redis://127.0.0.1:1/0", cfg); !errors.Is(err, outbox.ErrInvalidConfig) {
			t.Errorf("Open with %s invalid = %v, want the ConfigError", field, err)
		}
	}
}

// go-redis's ReadTimeout and WriteTimeout (3 s by default) bound each socket
// read and write whatever the context allows: Open raises them to
// Config.Timeout so that Timeout is the batch's bound, unless the URL sets
// them.
func TestOpenLetsConfigTimeoutBoundReadsAndWritesUnlessTheURLSetsThem(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		url         string
		read, write time.Duration
	}{
		{"redis://127.0.0.1:1/0", 20 * time.Second, 20 * time.Second},
		{"redis://127.0.0.1:1/0?read_timeout=2s&write_timeout=1s", 2 * time.Second, time.Second},
	} {
		p := open(t, tc.url, outboxredis.Config{Timeout: 20 * time.Second})
		opts := p.Client().(*redis.Client).Options()
		if opts.ReadTimeout != tc.read || opts.WriteTimeout != tc.write {
			t.Errorf("Open(%s) with Timeout 20s: ReadTimeout %v, WriteTimeout %v; want %v, %v", tc.url, opts.ReadTimeout, opts.WriteTimeout, tc.read, tc.write)
		}
	}
}
