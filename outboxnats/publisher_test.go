package outboxnats_test

import (
	"cmp"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/natstest"
	"github.com/go-outbox/outbox/internal/proxytest"
	"github.com/go-outbox/outbox/outboxnats"
	"github.com/go-outbox/outbox/publishertest"
	"github.com/go-outbox/outbox/relaytest"
)

// harness gives the conformance suite a fresh stream on srv, capped at 64 KiB
// per message so that a larger one is the invalid message.
func harness(t *testing.T, srv *natstest.Server, admin jetstream.JetStream) publishertest.Harness {
	stream, prefix := newStream(t, admin, jetstream.StreamConfig{MaxMsgSize: 64 << 10})
	cfg := outboxnats.Config{SubjectPrefix: prefix, Stream: stream}
	const topic = "orders.created"
	return publishertest.Harness{
		Publisher: dial(t, srv, cfg),
		Topic:     topic,
		Receive:   receiver(admin, stream),
		Unreachable: func(t *testing.T) outbox.Publisher {
			// Dial fails when no server answers, so connect to a server
			// and then stop it for good.
			gone := natstest.Start(t)
			cfg := cfg
			cfg.AckTimeout = time.Second
			p := dial(t, gone, cfg)
			gone.Shutdown()
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
	srv := natstest.Start(t)
	admin := srv.JetStream(t)
	publishertest.Run(t, func(t *testing.T) publishertest.Harness { return harness(t, srv, admin) })
}

// A relay that lost the acknowledgement publishes the message again: the
// stream keeps one copy and says the second was a duplicate, which counts as
// published.
func TestMessageRelayedTwiceIsStoredOnceAndTheSecondAckSaysDuplicate(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	admin := srv.JetStream(t)
	stream, prefix := newStream(t, admin, jetstream.StreamConfig{})
	pub := dial(t, srv, outboxnats.Config{SubjectPrefix: prefix})
	var (
		mu   sync.Mutex
		acks []*jetstream.PubAck
	)
	pub.OnAck(func(_ *outbox.Message, ack *jetstream.PubAck) {
		mu.Lock()
		acks = append(acks, ack)
		mu.Unlock()
	})
	ctx := ctxFor(t, 30*time.Second)
	batch := publishertest.Messages("orders.created", 1)
	for attempt := 1; attempt <= 2; attempt++ {
		if errs := pub.Publish(ctx, batch); errs[0] != nil {
			t.Fatalf("attempt %d to publish %s: %v", attempt, batch[0].ID, errs[0])
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(acks) != 2 || acks[0].Duplicate || !acks[1].Duplicate || acks[0].Sequence != acks[1].Sequence {
		t.Fatalf("acks %+v, %+v: want a first ack and a duplicate of the same sequence", acks[0], acks[1])
	}
	s, err := admin.Stream(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	if n := s.CachedInfo().State.Msgs; n != 1 {
		t.Fatalf("stream holds %d messages after message %s was published twice, want 1", n, batch[0].ID)
	}
	publishertest.RequireReceived(t, publishertest.Harness{Receive: receiver(admin, stream)}, batch)
}

// A message to a subject no stream captures fails (retryably, see
// policy_test.go) alone: the rest of its batch is published.
func TestSubjectNoStreamCapturesFailsAlone(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	admin := srv.JetStream(t)
	stream, prefix := newStream(t, admin, jetstream.StreamConfig{})
	pub := dial(t, srv, outboxnats.Config{})
	good := publishertest.Messages(prefix+"orders.created", 2)
	orphan := publishertest.Messages("nowhere.orders.created", 1)[0]
	errs := pub.Publish(ctxFor(t, 30*time.Second), []outbox.Message{good[0], orphan, good[1]})
	if errs[0] != nil || errs[2] != nil {
		t.Fatalf("messages to the stream failed: %v, %v", errs[0], errs[2])
	}
	if errs[1] == nil || outbox.IsPermanent(errs[1]) || !errors.Is(errs[1], outboxnats.ErrNoStream) {
		t.Fatalf("message %s to a subject without stream: %v, want a retryable ErrNoStream", orphan.ID, errs[1])
	}
	var pe *outboxnats.PublishError
	if !errors.As(errs[1], &pe) || pe.ID != orphan.ID || pe.Subject != orphan.Topic {
		t.Fatalf("error %v does not name message %s and its subject", errs[1], orphan.ID)
	}
	publishertest.RequireReceived(t, publishertest.Harness{Receive: receiver(admin, stream)}, good)
}

// A plain NATS server without JetStream has no responder either, but no
// JetStream API to say that no stream exists: the outcome must be retryable
// (JetStream may be starting), not a dead letter.
func TestNoResponderWithoutJetStreamIsRetryable(t *testing.T) {
	t.Parallel()
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	srv.Start()
	t.Cleanup(srv.Shutdown)
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("server not ready")
	}
	pub, err := outboxnats.Dial(srv.ClientURL(), outboxnats.Config{Logger: relaytest.TestLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	m := publishertest.Messages("orders.created", 1)
	errs := pub.Publish(ctxFor(t, 30*time.Second), m)
	if errs[0] == nil || outbox.IsPermanent(errs[0]) {
		t.Fatalf("message %s to a server without JetStream: %v, want a retryable error", m[0].ID, errs[0])
	}
}

func TestTooLargeForTheServerIsPermanent(t *testing.T) {
	t.Parallel()
	srv := natstest.StartWith(t, server.Options{MaxPayload: 4096})
	_, prefix := newStream(t, srv.JetStream(t), jetstream.StreamConfig{})
	pub := dial(t, srv, outboxnats.Config{SubjectPrefix: prefix})
	m := publishertest.Messages("big", 1)
	m[0].Payload = make([]byte, 5000)
	errs := pub.Publish(ctxFor(t, 30*time.Second), m)
	if !outbox.IsPermanent(errs[0]) || !errors.Is(errs[0], nats.ErrMaxPayload) {
		t.Fatalf("message over max_payload: %v, want permanent nats.ErrMaxPayload", errs[0])
	}
}

func TestUnroutableSubjectsFailPermanentlyWithoutBeingSent(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	admin := srv.JetStream(t)
	stream, prefix := newStream(t, admin, jetstream.StreamConfig{})
	byKey := dial(t, srv, outboxnats.Config{Subject: func(m outbox.Message) string { return m.Key }})
	byPrefix := dial(t, srv, outboxnats.Config{SubjectPrefix: prefix})
	ctx := ctxFor(t, 30*time.Second)
	for _, tc := range []struct {
		name  string
		pub   *outboxnats.Publisher
		topic string
		key   string
	}{
		{"space", byPrefix, "orders created", ""},
		{"empty token", byPrefix, "orders..created", ""},
		{"trailing dot", byPrefix, "orders.", ""},
		{"star wildcard", byPrefix, "orders.*", ""},
		{"tail wildcard", byPrefix, ">", ""},
		{"empty subject from Subject", byKey, "orders", ""},
	} {
		m := publishertest.Messages(tc.topic, 1)
		m[0].Key = tc.key
		errs := tc.pub.Publish(ctx, m)
		if !outbox.IsPermanent(errs[0]) || !errors.Is(errs[0], outboxnats.ErrInvalidSubject) {
			t.Errorf("%s: %v, want permanent ErrInvalidSubject", tc.name, errs[0])
		}
	}
	m := publishertest.Messages("x", 1)
	m[0].ID = uuid.Nil
	if errs := byPrefix.Publish(ctx, m); !outbox.IsPermanent(errs[0]) {
		t.Errorf("message without id: %v, want permanent", errs[0])
	}
	s, err := admin.Stream(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	if n := s.CachedInfo().State.Msgs; n != 0 {
		t.Errorf("stream holds %d messages, want none sent", n)
	}
}

// The subject comes from Config.Subject; the id, topic and key travel in
// headers that override application headers of the same names.
func TestSubjectMappingAndOutboxHeaders(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	admin := srv.JetStream(t)
	stream, prefix := newStream(t, admin, jetstream.StreamConfig{})
	subject := func(m outbox.Message) string { return prefix + "by-key." + cmp.Or(m.Key, "none") }
	pub := dial(t, srv, outboxnats.Config{Subject: subject})
	ctx := ctxFor(t, 30*time.Second)
	batch := publishertest.Messages("orders.created", 2)
	batch[0].Headers[outboxnats.HeaderMsgID] = "spoofed"
	batch[0].Headers[outboxnats.HeaderTopic] = "spoofed"
	batch[1].Key = ""
	batch[1].Headers[outboxnats.HeaderKey] = "spoofed"
	if err := errors.Join(pub.Publish(ctx, batch)...); err != nil {
		t.Fatal(err)
	}
	cons, err := admin.OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range batch {
		msg, err := cons.Next(jetstream.FetchMaxWait(10 * time.Second))
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
		h := msg.Headers()
		if msg.Subject() != subject(want) {
			t.Errorf("message %s on subject %q, want %q", want.ID, msg.Subject(), subject(want))
		}
		if h.Get(outboxnats.HeaderMsgID) != want.ID.String() || h.Get(outboxnats.HeaderTopic) != want.Topic {
			t.Errorf("message %s headers %v: id and topic not the outbox's", want.ID, h)
		}
		if _, ok := h[outboxnats.HeaderKey]; ok != (want.Key != "") || h.Get(outboxnats.HeaderKey) != want.Key {
			t.Errorf("message %s: %s header %q, want %q (absent when empty)", want.ID, outboxnats.HeaderKey, h.Get(outboxnats.HeaderKey), want.Key)
		}
	}
}

// A network path that stops taking data blocks nats.go's writes, under its
// connection lock, for up to its FlusherTimeout (a minute by default): a
// batch must still end with its context (a relay's lease), which the
// publisher makes sure of by closing the network connection under nats.go,
// which then reconnects. Close does not wait for the stall either.
func TestPublishOnAStalledNetworkEndsWithTheContext(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	admin := srv.JetStream(t)
	stream, prefix := newStream(t, admin, jetstream.StreamConfig{})
	proxy := proxytest.ForURL(t, srv.URL())
	pub, err := outboxnats.Dial(proxy.URL(srv.URL()), outboxnats.Config{
		SubjectPrefix: prefix, Stream: stream, DrainTimeout: time.Second,
		ConnectOptions: natstest.ClientOptions(), Logger: relaytest.TestLogger(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pub.Close() })
	for i, err := range pub.Publish(ctxFor(t, 30*time.Second), publishertest.Messages("orders.created", 3)) {
		if err != nil {
			t.Fatalf("message %d before the stall: %v", i, err)
		}
	}

	proxy.Stall()
	// 12 MiB: more than the sockets' buffers on the way take.
	batch := publishertest.Messages("orders.created", 50)
	for i := range batch {
		batch[i].Payload = make([]byte, 256<<10)
	}
	start := time.Now()
	errs := pub.Publish(ctxFor(t, 500*time.Millisecond), batch)
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("Publish took %v with a 500ms context on a stalled network", took.Round(time.Millisecond))
	}
	for i, err := range errs {
		if err == nil || outbox.IsPermanent(err) {
			t.Errorf("message %s on a stalled network: %v; want a retryable error", batch[i].ID, err)
		}
	}

	// What the stall held is dropped, as by a network that never recovers.
	proxy.Cut()
	again := publishertest.Messages("orders.created", 3)
	// Acknowledged, so stored in the stream.
	waitFor(t, 30*time.Second, "a batch to go through after the stall", func() bool {
		for _, err := range pub.Publish(ctxFor(t, 5*time.Second), again) {
			if err != nil {
				return false
			}
		}
		return true
	})
	proxy.Stall()
	start = time.Now()
	_ = pub.Close()
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("Close took %v on a stalled network with a 1s drain timeout", took.Round(time.Millisecond))
	}
}

func TestNewLeavesTheCallersConnectionOpenAndFailsAfterClose(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	nc := srv.Connect(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	_, prefix := newStream(t, js, jetstream.StreamConfig{})
	pub, err := outboxnats.New(js, outboxnats.Config{SubjectPrefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	if pub.JetStream() != js {
		t.Error("JetStream() is not the context given to New")
	}
	ctx := ctxFor(t, 30*time.Second)
	if err := errors.Join(pub.Publish(ctx, publishertest.Messages("a", 3))...); err != nil {
		t.Fatal(err)
	}
	if err := pub.Close(); err != nil {
		t.Fatal(err)
	}
	if !nc.IsConnected() {
		t.Fatal("Close closed the caller's connection")
	}
	errs := pub.Publish(ctx, publishertest.Messages("a", 2))
	for _, err := range errs {
		if !errors.Is(err, outboxnats.ErrClosed) || !errors.Is(err, outbox.ErrClosed) || outbox.IsPermanent(err) {
			t.Fatalf("Publish after Close: %v, want retryable ErrClosed matching outbox.ErrClosed", err)
		}
	}
}

func TestDialClosesItsConnection(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	pub := dial(t, srv, outboxnats.Config{})
	nc := pub.JetStream().Conn()
	if err := pub.Close(); err != nil {
		t.Fatal(err)
	}
	if !nc.IsClosed() {
		t.Fatal("Close left the Dial'ed connection open")
	}
}

func TestDialToNoServerFailsWithoutQuotingThePassword(t *testing.T) {
	t.Parallel()
	_, err := outboxnats.Dial("nats://relay:s3cret@127.0.0.1:1", outboxnats.Config{ConnectOptions: []nats.Option{nats.Timeout(time.Second)}})
	if err == nil {
		t.Fatal("Dial to a closed port succeeded")
	}
	if strings.Contains(err.Error(), "s3cret") {
		t.Fatalf("error quotes the password: %v", err)
	}
	if !strings.Contains(err.Error(), "127.0.0.1:1") {
		t.Errorf("error %q does not name the server", err)
	}
}

func TestConfigErrorsNameTheFieldAndTheFix(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	js := srv.JetStream(t)
	for _, tc := range []struct {
		cfg   outboxnats.Config
		field string
	}{
		{outboxnats.Config{AckTimeout: -1}, "AckTimeout"},
		{outboxnats.Config{DrainTimeout: -1}, "DrainTimeout"},
		{outboxnats.Config{SubjectPrefix: "a.", Subject: func(outbox.Message) string { return "x" }}, "SubjectPrefix"},
		{outboxnats.Config{SubjectPrefix: "a b."}, "SubjectPrefix"},
		{outboxnats.Config{SubjectPrefix: "a.*."}, "SubjectPrefix"},
		{outboxnats.Config{Stream: "A.B"}, "Stream"},
	} {
		if err := tc.cfg.Validate(); !errors.Is(err, outbox.ErrInvalidConfig) {
			t.Errorf("%+v.Validate() = %v, want ErrInvalidConfig", tc.cfg, err)
		}
		_, err := outboxnats.New(js, tc.cfg)
		var ce *outbox.ConfigError
		if !errors.As(err, &ce) || !strings.HasSuffix(ce.Field, tc.field) || ce.Fix == "" {
			t.Errorf("New(%+v) = %v, want a ConfigError for %s", tc.cfg, err, tc.field)
		}
	}
	if _, err := outboxnats.New(nil, outboxnats.Config{}); !errors.Is(err, outbox.ErrInvalidConfig) {
		t.Errorf("New(nil) = %v, want ErrInvalidConfig", err)
	}
}

// While the connection is down, a batch fails at once and unsent, marked
// unavailable: nats.go would otherwise buffer it for after the reconnect,
// and the relay would count the outage against every message.
func TestPublishWhileDisconnectedIsUnavailableAndUnsent(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	stream, prefix := newStream(t, srv.JetStream(t), jetstream.StreamConfig{})
	pub := dial(t, srv, outboxnats.Config{SubjectPrefix: prefix, Stream: stream, AckTimeout: 300 * time.Millisecond})
	srv.Shutdown()
	var err error
	waitFor(t, 10*time.Second, "the publisher to see the server gone", func() bool {
		err = pub.Publish(ctxFor(t, 5*time.Second), publishertest.Messages("orders.created", 1))[0]
		return outbox.IsUnavailable(err)
	})
	if outbox.IsPermanent(err) || !strings.Contains(err.Error(), "not sent") {
		t.Fatalf("publish while disconnected: %v; want a retryable error saying it was not sent", err)
	}
}
