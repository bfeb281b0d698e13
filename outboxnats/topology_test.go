package outboxnats_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/natstest"
	"github.com/go-outbox/outbox/outboxnats"
	"github.com/go-outbox/outbox/publishertest"
)

func TestDeclareStreamCreatesTheStreamThenLeavesItOrAddsWhatIsAskedKeepingTheRest(t *testing.T) {
	t.Parallel()
	js := natstest.Start(t).JetStream(t)
	s := outboxnats.Stream{Name: "ORDERS", Subjects: []string{"orders.>"}, Duplicates: 10 * time.Minute}
	if d, err := outboxnats.DeclareStream(ctxFor(t, 30*time.Second), js, s); err != nil || d != (outboxnats.Declared{Action: outboxnats.ActionCreated, Kind: "stream", Name: "ORDERS"}) {
		t.Fatalf("DeclareStream = %+v, %v; want stream ORDERS created", d, err)
	}
	for i, err := range publisherOn(t, js).Publish(ctxFor(t, 30*time.Second), publishertest.Messages("orders.created", 3)) {
		if err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
	}
	if d, err := outboxnats.DeclareStream(ctxFor(t, 30*time.Second), js, s); err != nil || d.Action != outboxnats.ActionExists {
		t.Fatalf("DeclareStream again = %+v, %v; want stream ORDERS found existing", d, err)
	}

	wider := outboxnats.Stream{Name: "ORDERS", Subjects: []string{"refunds.>"}, MaxAge: time.Hour}
	if d, err := outboxnats.DeclareStream(ctxFor(t, 30*time.Second), js, wider); err != nil || d.Action != outboxnats.ActionUpdated {
		t.Fatalf("DeclareStream with another subject and MaxAge = %+v, %v; want stream ORDERS updated", d, err)
	}
	stream, err := js.Stream(ctxFor(t, 30*time.Second), "ORDERS")
	if err != nil {
		t.Fatal(err)
	}
	info := stream.CachedInfo()
	if !slices.Equal(info.Config.Subjects, []string{"orders.>", "refunds.>"}) || info.Config.MaxAge != time.Hour || info.Config.Duplicates != 10*time.Minute || info.State.Msgs != 3 {
		t.Fatalf("stream after the update: subjects %v, MaxAge %v, Duplicates %v, %d messages; want both subjects, MaxAge 1h, the 10m window kept and the 3 messages",
			info.Config.Subjects, info.Config.MaxAge, info.Config.Duplicates, info.State.Msgs)
	}
}

func TestDeclareStreamNamesTheOverlapWhenAnotherStreamCapturesTheSubjects(t *testing.T) {
	t.Parallel()
	js := natstest.Start(t).JetStream(t)
	if _, err := outboxnats.DeclareStream(ctxFor(t, 30*time.Second), js, outboxnats.Stream{Name: "ORDERS", Subjects: []string{"orders.>"}}); err != nil {
		t.Fatal(err)
	}
	_, err := outboxnats.DeclareStream(ctxFor(t, 30*time.Second), js, outboxnats.Stream{Name: "ORDERS2", Subjects: []string{"orders.created"}})
	if err == nil || !strings.Contains(err.Error(), "ORDERS2") || !strings.Contains(err.Error(), "another stream captures") {
		t.Fatalf("DeclareStream over captured subjects: %v; want an error naming ORDERS2 and the overlap", err)
	}
}

func TestDeclareStreamRefusesABadStreamBeforeAsking(t *testing.T) {
	t.Parallel()
	for _, s := range []outboxnats.Stream{{Subjects: []string{"a.>"}}, {Name: "A.B", Subjects: []string{"a.>"}}, {Name: "A"}, {Name: "A", Subjects: []string{"a b"}}, {Name: "A", Subjects: []string{"a"}, MaxAge: -1}} {
		var cfgErr *outbox.ConfigError
		if _, err := outboxnats.DeclareStream(t.Context(), nil, s); !errors.As(err, &cfgErr) {
			t.Errorf("DeclareStream(%+v) = %v; want a *outbox.ConfigError", s, err)
		}
	}
}

// The consumer DeclareConsumer makes is the one Consume reads: Consume
// starts on it without changing it, so declaring it again finds it as it was.
func TestDeclareConsumerMakesTheDurableConsumeReadsWithoutChangingIt(t *testing.T) {
	t.Parallel()
	js := natstest.Start(t).JetStream(t)
	stream, prefix := newStream(t, js, jetstream.StreamConfig{})
	cfg := outboxnats.ConsumerConfig{Stream: stream, Durable: "billing", FilterSubject: prefix + ">", AckWait: 40 * time.Second, Concurrency: 2}
	if d, err := outboxnats.DeclareConsumer(ctxFor(t, 30*time.Second), js, cfg); err != nil || d != (outboxnats.Declared{Action: outboxnats.ActionCreated, Kind: "consumer", Name: "billing"}) {
		t.Fatalf("DeclareConsumer = %+v, %v; want consumer billing created", d, err)
	}
	batch := publishertest.Messages(prefix+"orders.created", 3)
	for i, err := range publisherOn(t, js).Publish(ctxFor(t, 30*time.Second), batch) {
		if err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
	}
	var (
		mu   sync.Mutex
		seen = map[uuid.UUID]bool{}
	)
	stop := consume(t, js, cfg, func(_ context.Context, m outbox.Message) error {
		mu.Lock()
		defer mu.Unlock()
		seen[m.ID] = true
		return nil
	})
	waitUntil(t, "the 3 messages consumed", func() bool { mu.Lock(); defer mu.Unlock(); return len(seen) == 3 })
	stop()
	if d, err := outboxnats.DeclareConsumer(ctxFor(t, 30*time.Second), js, cfg); err != nil || d.Action != outboxnats.ActionExists {
		t.Fatalf("DeclareConsumer after Consume = %+v, %v; want consumer billing found as declared (Consume changed nothing)", d, err)
	}
	cfg.AckWait = time.Minute
	if d, err := outboxnats.DeclareConsumer(ctxFor(t, 30*time.Second), js, cfg); err != nil || d.Action != outboxnats.ActionUpdated {
		t.Fatalf("DeclareConsumer with another AckWait = %+v, %v; want consumer billing updated", d, err)
	}
	cons, err := js.Consumer(ctxFor(t, 30*time.Second), stream, "billing")
	if err != nil {
		t.Fatal(err)
	}
	if info := cons.CachedInfo(); info.Config.AckWait != time.Minute || info.AckFloor.Stream != 3 {
		t.Fatalf("consumer after the update: AckWait %v, acknowledged up to %d; want 1m and its position kept at 3", info.Config.AckWait, info.AckFloor.Stream)
	}
}

func TestDeclareConsumerSaysHowToFixADurableConsumeCannotRead(t *testing.T) {
	t.Parallel()
	js := natstest.Start(t).JetStream(t)
	stream, _ := newStream(t, js, jetstream.StreamConfig{})
	if _, err := js.CreateConsumer(ctxFor(t, 30*time.Second), stream, jetstream.ConsumerConfig{Durable: "billing", AckPolicy: jetstream.AckExplicitPolicy, DeliverPolicy: jetstream.DeliverNewPolicy}); err != nil {
		t.Fatal(err)
	}
	_, err := outboxnats.DeclareConsumer(ctxFor(t, 30*time.Second), js, outboxnats.ConsumerConfig{Stream: stream, Durable: "billing"})
	if err == nil || !strings.Contains(err.Error(), "billing") || !strings.Contains(err.Error(), "nats consumer rm "+stream+" billing") {
		t.Fatalf("DeclareConsumer over a deliver-new durable: %v; want an error naming billing and how to delete it", err)
	}
	_, err = outboxnats.DeclareConsumer(ctxFor(t, 30*time.Second), js, outboxnats.ConsumerConfig{Stream: "MISSING", Durable: "billing"})
	if !errors.Is(err, jetstream.ErrStreamNotFound) || !strings.Contains(err.Error(), "DeclareStream") {
		t.Fatalf("DeclareConsumer on a missing stream: %v; want ErrStreamNotFound saying to declare the stream first", err)
	}
}

// publisherOn returns a publisher on js, which the test keeps open.
func publisherOn(t *testing.T, js jetstream.JetStream) *outboxnats.Publisher {
	t.Helper()
	p, err := outboxnats.New(js, outboxnats.Config{})
	if err != nil {
		t.Fatal(err)
	}
	return p
}
