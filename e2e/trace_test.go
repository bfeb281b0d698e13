package e2e_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go/jetstream"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/natstest"
	"github.com/go-outbox/outbox/internal/pgtest"
	"github.com/go-outbox/outbox/outboxnats"
	"github.com/go-outbox/outbox/outboxotel"
	"github.com/go-outbox/outbox/outboxpg"
	"github.com/go-outbox/outbox/relaytest"
)

// Writer → relay → NATS → consumer → the consumer's own outgoing message →
// relay again: one trace, each span the child of the one before, recorded
// with the SDK's in-memory span recorder.
func TestOneTraceFromTheWriterThroughTheBrokerToTheConsumersOwnMessages(t *testing.T) {
	t.Parallel()
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	tracer := tp.Tracer("e2e")

	o := newPGOutbox(t)
	w, err := outbox.NewWriter(o.store, outbox.WriterConfig{BeforeWrite: outboxotel.InjectTraceContext})
	if err != nil {
		t.Fatal(err)
	}
	srv := natstest.Start(t)
	admin := srv.JetStream(t)
	stream, prefix := natstest.NewStream(t, admin, jetstream.StreamConfig{})
	obs, err := outboxotel.NewObserver(outboxotel.Config{TracerProvider: tp})
	if err != nil {
		t.Fatal(err)
	}
	relaytest.StartRelay(t, o.store, dialNATS(t, srv, outboxnats.Config{SubjectPrefix: prefix, Stream: stream}),
		outbox.Config{Observer: obs, PollInterval: 20 * time.Millisecond})

	ctx := t.Context()
	writeIn := func(ctx context.Context, topic string) {
		t.Helper()
		m := &outbox.Message{Topic: topic, Payload: []byte("{}")}
		if err := w.Transact(ctx, func(ctx context.Context, tx pgx.Tx) error { return w.Write(ctx, tx, m) }); err != nil {
			t.Fatal(err)
		}
	}
	appCtx, placeOrder := tracer.Start(ctx, "place order")
	writeIn(appCtx, "orders.placed")
	placeOrder.End()

	// The consumer adapter continues the trace from the delivered headers
	// (its observer starts the process span) and the handler writes its own
	// message in it.
	var handled atomic.Int32
	consumeCtx, stopConsuming := context.WithCancel(ctx)
	consumed := make(chan error, 1)
	go func() {
		consumed <- outboxnats.Consume(consumeCtx, admin, outboxnats.ConsumerConfig{Stream: stream, Durable: "shipping",
			FilterSubject: prefix + "orders.placed", Observer: obs, Logger: relaytest.TestLogger(t)},
			func(ctx context.Context, m outbox.Message) error {
				writeIn(ctx, "shipments.requested")
				handled.Add(1)
				return nil
			})
	}()
	defer func() {
		stopConsuming()
		if err := <-consumed; err != nil {
			t.Errorf("Consume: %v", err)
		}
	}()
	waitFor(t, 30*time.Second, "the consumer to handle the message", func() bool { return handled.Load() == 1 })

	byName := map[string]sdktrace.ReadOnlySpan{}
	deadline := time.Now().Add(10 * time.Second)
	for len(byName) < 4 {
		for _, s := range spans.Ended() {
			byName[s.Name()] = s
		}
		if time.Now().After(deadline) {
			t.Fatalf("spans ended: %v; want place order, two sends and process", byName)
		}
		time.Sleep(10 * time.Millisecond)
	}
	chain := []string{"place order", "send orders.placed", "process orders.placed", "send shipments.requested"}
	// (The relay sends shipments.requested too; the consumer reads only
	// orders.placed.)
	traceID := byName[chain[0]].SpanContext().TraceID()
	for i, name := range chain {
		s, ok := byName[name]
		if !ok {
			t.Fatalf("no span %q among %v", name, byName)
		}
		if s.SpanContext().TraceID() != traceID {
			t.Errorf("span %q is in trace %v, want %v: one trace from writer to consumer", name, s.SpanContext().TraceID(), traceID)
		}
		if i > 0 && s.Parent().SpanID() != byName[chain[i-1]].SpanContext().SpanID() {
			t.Errorf("span %q has parent %v, want %q (%v)", name, s.Parent().SpanID(), chain[i-1], byName[chain[i-1]].SpanContext().SpanID())
		}
	}
}

// An inbox that reports to the outboxotel observer counts what it applied
// and the duplicates it skipped, by consumer.
func TestInboxMetricsCountAppliedMessagesAndDuplicates(t *testing.T) {
	t.Parallel()
	reader := sdkmetric.NewManualReader()
	obs, err := outboxotel.NewObserver(outboxotel.Config{MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))})
	if err != nil {
		t.Fatal(err)
	}
	o := newPGOutbox(t)
	table, err := outboxpg.NewInboxTable(pgtest.Pool(t), outboxpg.InboxOptions{Schema: o.schema})
	if err != nil {
		t.Fatal(err)
	}
	if err := table.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	inbox, err := outbox.NewInbox(table, "billing")
	if err != nil {
		t.Fatal(err)
	}
	inbox.Observe(obs)
	id := uuid.Must(uuid.NewV7())
	for range 3 { // one delivery and two redeliveries
		if _, err := inbox.Handle(t.Context(), id, func(context.Context, pgx.Tx) error { return nil }); err != nil {
			t.Fatal(err)
		}
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(t.Context(), &rm); err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if sum, ok := m.Data.(metricdata.Sum[int64]); ok {
				for _, p := range sum.DataPoints {
					if v, _ := p.Attributes.Value("consumer"); v.AsString() == "billing" {
						got[m.Name] += p.Value
					}
				}
			}
		}
	}
	if got["outbox.inbox.handled"] != 1 || got["outbox.inbox.duplicates"] != 2 {
		t.Fatalf("inbox metrics %v; want 1 handled and 2 duplicates for consumer billing", got)
	}
}
