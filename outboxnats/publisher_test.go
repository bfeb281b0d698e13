package outboxnats_test

import (
	"cmp"
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
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

func TestEndToEndFromPostgreSQLThroughTheRelayToJetStream(t *testing.T) {
	t.Parallel()
	o := newPGOutbox(t)
	srv := natstest.Start(t)
	publishertest.EndToEnd(t, harness(t, srv, srv.JetStream(t)), o.store, o.write)
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

// outcomes wraps a publisher and counts what it reported.
type outcomes struct {
	next outbox.Publisher

	mu        sync.Mutex
	ok        map[uuid.UUID]bool
	failures  int
	permanent []error
}

func (o *outcomes) Publish(ctx context.Context, batch []outbox.Message) []error {
	errs := o.next.Publish(ctx, batch)
	o.mu.Lock()
	defer o.mu.Unlock()
	for i, err := range errs {
		switch {
		case err == nil:
			o.ok[batch[i].ID] = true
		case outbox.IsPermanent(err):
			o.permanent = append(o.permanent, err)
		default:
			o.failures++
		}
	}
	return errs
}

// Close closes the publisher the outcomes are counted for.
func (o *outcomes) Close() error { return o.next.Close() }

func (o *outcomes) counts() (ok, failures int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.ok), o.failures
}

// The broker stops in the middle of a relay run and comes back: the outcomes
// of the outage are retryable, nothing counts as published that the stream
// does not hold, and in the end the stream holds every message once.
func TestBrokerRestartMidRunLosesNothingAndTheStreamDropsTheDuplicates(t *testing.T) {
	t.Parallel()
	start := time.Now()
	o := newPGOutbox(t)
	srv := natstest.Start(t)
	admin := srv.JetStream(t)
	stream, prefix := newStream(t, admin, jetstream.StreamConfig{Duplicates: time.Minute})
	// A short ack timeout makes every batch sent during the outage fail
	// (retryably) instead of waiting for the broker.
	pub := dial(t, srv, outboxnats.Config{SubjectPrefix: prefix, Stream: stream, AckTimeout: 300 * time.Millisecond})
	var duplicates atomic.Int64
	pub.OnAck(func(_ *outbox.Message, ack *jetstream.PubAck) {
		if ack.Duplicate {
			duplicates.Add(1)
		}
	})
	rec := &outcomes{next: pub, ok: map[uuid.UUID]bool{}}
	relaytest.StartRelay(t, o.store, rec, outbox.Config{
		BatchSize: 20, Workers: 4, LeaseDuration: 5 * time.Second, MaxAttempts: 10000,
		BackoffBase: 20 * time.Millisecond, BackoffMax: 200 * time.Millisecond,
		ActivePollInterval: 5 * time.Millisecond, PollInterval: 50 * time.Millisecond,
	})

	ctx := ctxFor(t, 2*time.Minute)
	var written []uuid.UUID
	write := func(n int) {
		t.Helper()
		for i := 0; i < n; i += 10 {
			batch := publishertest.Messages("orders.created", 10)
			ptrs := make([]*outbox.Message, len(batch))
			for j := range batch {
				ptrs[j] = &batch[j]
			}
			if err := o.write(ctx, ptrs...); err != nil {
				t.Fatalf("write: %v", err)
			}
			for _, m := range batch {
				written = append(written, m.ID)
			}
		}
	}

	write(100)
	waitFor(t, 30*time.Second, "50 messages confirmed before the outage", func() bool { ok, _ := rec.counts(); return ok >= 50 })
	srv.Shutdown()
	_, failedBefore := rec.counts()
	write(100)
	waitFor(t, 30*time.Second, "60 retryable failures during the outage", func() bool { _, f := rec.counts(); return f >= failedBefore+60 })
	okBeforeRestart, failedDuringOutage := rec.counts()
	srv.Restart(t)
	write(100)

	waitFor(t, 60*time.Second, "the outbox to drain after the restart", func() bool {
		st, err := o.store.Stats(ctx)
		return err == nil && st.Pending == 0
	})
	st, err := o.store.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Dead != 0 {
		t.Fatalf("%d messages dead-lettered", st.Dead)
	}
	rec.mu.Lock()
	if len(rec.permanent) > 0 {
		t.Fatalf("%d permanent outcomes, e.g. %v; a broker outage must be retryable", len(rec.permanent), rec.permanent[0])
	}
	confirmed := len(rec.ok)
	okIDs := make([]uuid.UUID, 0, confirmed)
	for id := range rec.ok {
		okIDs = append(okIDs, id)
	}
	rec.mu.Unlock()

	s, err := admin.Stream(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != uint64(len(written)) {
		t.Errorf("stream holds %d messages, want %d (each written message once)", info.State.Msgs, len(written))
	}
	got, err := receiver(admin, stream)(ctx, int(info.State.Msgs))
	if err != nil {
		t.Fatalf("read the stream: %v", err)
	}
	inStream := map[string]int{}
	for _, r := range got {
		inStream[r.ID]++
	}
	for _, id := range written {
		if n := inStream[id.String()]; n != 1 {
			t.Errorf("message %s is %d times in the stream, want once", id, n)
		}
	}
	for _, id := range okIDs {
		if inStream[id.String()] == 0 {
			t.Errorf("message %s was reported published but the stream does not hold it", id)
		}
	}
	_, failedInAll := rec.counts()
	t.Logf("%d messages, %d confirmed before the restart; retryable failures: %d when the server stopped, %d during the outage, %d after the restart; %d duplicate acks; %v",
		len(written), okBeforeRestart, failedBefore, failedDuringOutage-failedBefore, failedInAll-failedDuringOutage, duplicates.Load(), time.Since(start).Round(time.Millisecond))
}

func TestSubjectNoStreamCapturesFailsPermanentlyAndAlone(t *testing.T) {
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
	if !outbox.IsPermanent(errs[1]) || !errors.Is(errs[1], outboxnats.ErrNoStream) {
		t.Fatalf("message %s to a subject without stream: %v, want permanent ErrNoStream", orphan.ID, errs[1])
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

func TestMessageCapturedByAnotherStreamThanConfigIsPermanent(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	admin := srv.JetStream(t)
	_, prefix := newStream(t, admin, jetstream.StreamConfig{})
	other, _ := newStream(t, admin, jetstream.StreamConfig{})
	pub := dial(t, srv, outboxnats.Config{SubjectPrefix: prefix, Stream: other})
	m := publishertest.Messages("orders.created", 1)
	errs := pub.Publish(ctxFor(t, 30*time.Second), m)
	var apiErr *jetstream.APIError
	if !outbox.IsPermanent(errs[0]) || !errors.As(errs[0], &apiErr) || apiErr.Code != 400 {
		t.Fatalf("message for stream %s landing elsewhere: %v, want a permanent 400", other, errs[0])
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
