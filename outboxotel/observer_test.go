package outboxotel_test

import (
	"context"
	"database/sql"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/outboxdriver"
	"github.com/go-outbox/outbox/outboxotel"
)

type sdk struct {
	reader *sdkmetric.ManualReader
	spans  *tracetest.SpanRecorder
	tp     *sdktrace.TracerProvider
	obs    *outboxotel.Observer
}

func newSDK(t *testing.T) sdk {
	t.Helper()
	return newSDKCachingFor(t, time.Hour)
}

// newSDKCachingFor is newSDK with StatsCacheFor set to cacheFor (0: the
// least, so every collection reads again).
func newSDKCachingFor(t *testing.T, cacheFor time.Duration) sdk {
	t.Helper()
	if cacheFor == 0 {
		cacheFor = time.Nanosecond
	}
	reader := sdkmetric.NewManualReader()
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	obs, err := outboxotel.NewObserver(outboxotel.Config{
		MeterProvider:  sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)),
		TracerProvider: tp,
		StatsCacheFor:  cacheFor,
	})
	if err != nil {
		t.Fatal(err)
	}
	return sdk{reader: reader, spans: spans, tp: tp, obs: obs}
}

// collect returns every data point's value by metric name and attributes.
func (s sdk) collect(t *testing.T) map[string]map[attribute.Set]float64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := s.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	return points(rm)
}

// points returns every data point's value by metric name and attributes.
func points(rm metricdata.ResourceMetrics) map[string]map[attribute.Set]float64 {
	out := map[string]map[attribute.Set]float64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			points := map[attribute.Set]float64{}
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					points[p.Attributes] = float64(p.Value)
				}
			case metricdata.Gauge[int64]:
				for _, p := range d.DataPoints {
					points[p.Attributes] = float64(p.Value)
				}
			case metricdata.Gauge[float64]:
				for _, p := range d.DataPoints {
					points[p.Attributes] = p.Value
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					points[p.Attributes] = float64(p.Count)
				}
			}
			out[m.Name] = points
		}
	}
	return out
}

func attrs(kv ...string) attribute.Set {
	var a []attribute.KeyValue
	for i := 0; i < len(kv); i += 2 {
		a = append(a, attribute.String(kv[i], kv[i+1]))
	}
	return attribute.NewSet(a...)
}

func TestOutcomesAndDurationsAreCountedByTableAndTopic(t *testing.T) {
	s := newSDK(t)
	ctx := context.Background()
	m := outbox.Message{ID: uuid.New(), Topic: "orders"}
	s.obs.Exchanged(ctx, outbox.Exchange{Table: "public.outbox", Duration: 3 * time.Millisecond, Claimed: 2})
	s.obs.Exchanged(ctx, outbox.Exchange{Table: "public.outbox", Duration: time.Second, Err: errors.New("down")})
	_, done := s.obs.Publishing(ctx, "public.outbox", []outbox.Message{m, m})
	done([]error{nil, errors.New("timeout")})
	s.obs.Settled(ctx, "public.outbox", &m, outbox.OutcomePublished, nil)
	s.obs.Settled(ctx, "public.outbox", &m, outbox.OutcomeRetried, errors.New("timeout"))
	s.obs.Settled(ctx, "public.outbox", &m, outbox.OutcomeRetried, errors.New("timeout"))
	s.obs.Settled(ctx, "public.outbox", &m, outbox.OutcomeDead, errors.New("refused"))
	s.obs.Settled(ctx, "public.outbox", &m, outbox.OutcomePostponed, errors.New("down"))

	got := s.collect(t)
	byTopic, byTable := attrs("table", "public.outbox", "topic", "orders"), attrs("table", "public.outbox")
	for _, c := range []struct {
		name  string
		attrs attribute.Set
		want  float64
	}{
		{"outbox.messages.published", byTopic, 1},
		{"outbox.messages.retried", byTopic, 2},
		{"outbox.messages.dead", attrs("table", "public.outbox", "topic", "orders", "class", "exhausted"), 1},
		{"outbox.store.errors", byTable, 1},
		{"outbox.claim.duration", byTable, 2},   // observations
		{"outbox.publish.duration", byTable, 1}, // observations
	} {
		if v := got[c.name][c.attrs]; v != c.want {
			t.Errorf("%s%v = %v, want %v (all: %v)", c.name, c.attrs.ToSlice(), v, c.want, got[c.name])
		}
	}
}

// The writer's span context travels in the message headers: the relay's
// send span is its child, the publisher sends the send span's context, and
// the consumer extracts it.
func TestSendSpanContinuesTheWritersTraceAndTheConsumerContinuesIt(t *testing.T) {
	s := newSDK(t)
	writerCtx, writerSpan := s.tp.Tracer("app").Start(context.Background(), "place order")
	m := &outbox.Message{ID: uuid.New(), Topic: "orders.placed"}
	outboxotel.InjectTraceContext(writerCtx, m)
	writerSpan.End()
	if m.Headers["traceparent"] == "" {
		t.Fatalf("headers %v: no traceparent after InjectTraceContext", m.Headers)
	}

	batch := []outbox.Message{*m}
	_, done := s.obs.Publishing(context.Background(), "public.outbox", batch)
	done([]error{nil})
	ended := s.spans.Ended()
	if len(ended) != 2 {
		t.Fatalf("%d spans ended, want the writer's and one send span", len(ended))
	}
	send := ended[1]
	if send.Name() != "send orders.placed" || send.SpanKind() != trace.SpanKindProducer ||
		send.Parent().SpanID() != writerSpan.SpanContext().SpanID() || send.SpanContext().TraceID() != writerSpan.SpanContext().TraceID() {
		t.Fatalf("send span %q kind %v parent %v trace %v; want a producer span, child of the writer's span %v",
			send.Name(), send.SpanKind(), send.Parent().SpanID(), send.SpanContext().TraceID(), writerSpan.SpanContext())
	}
	consumer := trace.SpanContextFromContext(outboxotel.ExtractTraceContext(context.Background(), &batch[0]))
	if consumer.SpanID() != send.SpanContext().SpanID() || consumer.TraceID() != writerSpan.SpanContext().TraceID() {
		t.Fatalf("the consumer extracts %v from the sent headers, want the send span %v", consumer, send.SpanContext())
	}
}

// countingStats is an outboxdriver.Admin whose Stats counts its calls; the
// other methods are not used by WatchTable.
type countingStats struct {
	outboxdriver.Admin
	calls atomic.Int32
}

func (c *countingStats) Stats(context.Context) (outboxdriver.Stats, error) {
	c.calls.Add(1)
	return outboxdriver.Stats{Pending: 7, Dead: 2, OldestPending: 1500 * time.Millisecond}, nil
}

// The gauges read the table once per cache period, however often they are
// collected.
func TestTableGaugesReadTheTableAtABoundedRate(t *testing.T) {
	s := newSDK(t)
	store := &countingStats{}
	if _, err := s.obs.WatchTable(store, "public.outbox"); err != nil {
		t.Fatal(err)
	}
	var got map[string]map[attribute.Set]float64
	for range 5 {
		got = s.collect(t)
	}
	table := attrs("table", "public.outbox")
	if got["outbox.pending.messages"][table] != 7 || got["outbox.dead.messages"][table] != 2 || got["outbox.oldest_pending.age"][table] != 1.5 {
		t.Fatalf("gauges %v", got)
	}
	if n := store.calls.Load(); n != 1 {
		t.Fatalf("5 collections read the table %d times, want once (cached)", n)
	}
}

// blockingStats is an outboxdriver.Admin whose Stats answers once, then hangs
// until released, deaf to its context like a stuck connection.
type blockingStats struct {
	outboxdriver.Admin
	calls   atomic.Int32
	release chan struct{}
}

func (b *blockingStats) Stats(context.Context) (outboxdriver.Stats, error) {
	if b.calls.Add(1) > 1 {
		<-b.release
	}
	return outboxdriver.Stats{Pending: 7, Dead: 2, OldestPending: 1500 * time.Millisecond}, nil
}

// When the database hangs, concurrent collections share one read of the
// table instead of piling up queries, return once the read's timeout has
// passed, and show the last values read.
func TestTableGaugesShareOneBoundedReadOfAHangingTable(t *testing.T) {
	const timeout = 200 * time.Millisecond
	reader := sdkmetric.NewManualReader()
	obs, err := outboxotel.NewObserver(outboxotel.Config{
		MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)),
		StatsCacheFor: time.Nanosecond, // every collection after the first reads again
		StatsTimeout:  timeout,
	})
	if err != nil {
		t.Fatal(err)
	}
	store := &blockingStats{release: make(chan struct{})}
	t.Cleanup(func() { close(store.release) })
	if _, err := obs.WatchTable(store, "public.outbox"); err != nil {
		t.Fatal(err)
	}
	s := sdk{reader: reader}
	s.collect(t) // the read that answers

	const scrapes = 8
	start := time.Now()
	results := make(chan map[string]map[attribute.Set]float64, scrapes)
	var wg sync.WaitGroup
	for range scrapes {
		wg.Go(func() {
			var rm metricdata.ResourceMetrics
			if err := reader.Collect(context.Background(), &rm); err != nil {
				t.Errorf("collect while the table hangs: %v; want the last values, no error", err)
			}
			results <- points(rm)
		})
	}
	returned := make(chan struct{})
	go func() { wg.Wait(); close(results); close(returned) }()
	select {
	case <-returned:
	case <-time.After(10 * timeout):
		t.Fatalf("%d concurrent collections still running after %s with a StatsTimeout of %s", scrapes, 10*timeout, timeout)
	}
	if took := time.Since(start); took < timeout {
		t.Errorf("collections returned after %s, before the read's timeout of %s: they did not wait for it", took, timeout)
	}
	table := attrs("table", "public.outbox")
	for got := range results {
		if got["outbox.pending.messages"][table] != 7 || got["outbox.dead.messages"][table] != 2 || got["outbox.oldest_pending.age"][table] != 1.5 {
			t.Fatalf("gauges while the table hangs: %v; want the last values read (7 pending, 2 dead, 1.5 s)", got)
		}
	}
	s.collect(t) // the read still hangs: no new one
	if n := store.calls.Load(); n != 2 {
		t.Fatalf("%d concurrent collections and one more while the table hangs called Stats %d times, want 2 (the first answer, then one shared read)", scrapes, n)
	}
}

// The calls of the package documentation, compiled so that they keep up with
// the API (WatchTable once lost its table argument there).
var _ = func(store interface {
	outboxdriver.Store
	outboxdriver.Admin
	outbox.Inserter[*sql.Tx]
}, pub outbox.Publisher, inbox *outbox.Inbox[*sql.Tx], table outboxotel.ParkedCounter, ready outboxotel.Readier) {
	obs, _ := outboxotel.NewObserver(outboxotel.Config{}) // the global providers
	relay, _ := outbox.NewRelay(store, pub, outbox.Config{Observer: obs})
	_, _ = obs.WatchTable(store, store.Name()) // pending, oldest age, dead
	_, _ = obs.WatchRelay(relay, store.Name()) // relay ready
	_, _ = outbox.NewWriter(store, outbox.WriterConfig{BeforeWrite: outboxotel.InjectTraceContext})
	inbox.Observe(obs)                         // a consumer's applied and duplicate counts
	_, _ = obs.WatchInbox(table, "billing")    // a consumer's parked and waiting messages
	_, _ = obs.WatchConsumer(ready, "billing") // consumer ready (an adapter's Readiness)
}
