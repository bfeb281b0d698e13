// Package outboxotel instruments the outbox with OpenTelemetry: metrics and
// traces of a relay (an outbox.Observer), the table's gauges, and the trace
// context carried in message headers from the writer to the consumer.
//
//	obs, _ := outboxotel.NewObserver(outboxotel.Config{}) // the global providers
//	relay, _ := outbox.NewRelay(store, pub, outbox.Config{Observer: obs})
//	obs.WatchTable(store, store.Name()) // pending, oldest age, dead
//	obs.WatchRelay(relay, store.Name()) // relay ready
//	writer, _ := outbox.NewWriter(store, outbox.WriterConfig{BeforeWrite: outboxotel.InjectTraceContext})
//	inbox.Observe(obs)                  // a consumer's applied and duplicate counts
//	obs.WatchInbox(table, "billing")    // a consumer's parked and waiting messages
//	obs.WatchConsumer(ready, "billing") // consumer ready (an adapter's Readiness)
//
// It uses only the OpenTelemetry API: pick the SDK and exporters in your
// application, or serve Prometheus with its package outboxprom (Serve:
// /metrics, /healthz and /readyz for an Observer it makes, as `outbox relay
// --metrics-addr` does).
//
// # Metrics
//
// Named so that the Prometheus exporter shows them as:
//
//	outbox_messages_published_total{table,topic}
//	outbox_messages_retried_total{table,topic}
//	outbox_messages_dead_total{table,topic,class} class: permanent, exhausted or expired
//	outbox_publish_duration_seconds{table}     histogram, per batch
//	outbox_claim_duration_seconds{table}       histogram, per exchange with the store
//	outbox_store_errors_total{table}           failed exchanges
//	outbox_pending_messages{table}             gauge (WatchTable)
//	outbox_oldest_pending_age_seconds{table}   gauge (WatchTable)
//	outbox_dead_messages{table}                gauge (WatchTable)
//	outbox_behind_dead_messages{table}         gauge (WatchTable): pending behind a dead message of their key
//	outbox_live_relays{table}                  gauge (WatchTable): registered relays seen within 3 heartbeats
//	outbox_last_publish_age_seconds{table}     gauge (WatchTable): since the latest publication of a registered relay
//	outbox_stuck_keys{table}                   gauge (WatchTable): keys whose head waited past Config.StuckAfter
//	outbox_relay_ready{table}                  1 while Relay.Ready is nil (WatchRelay)
//	outbox_inbox_handled_total{consumer}       messages an inbox applied
//	outbox_inbox_duplicates_total{consumer}    deliveries an inbox skipped
//	outbox_inbox_parked_messages{consumer}     gauge (WatchInbox): parked in the inbox table, waiting ones included
//	outbox_inbox_waiting_messages{consumer}    gauge (WatchInbox): parked as waiting behind a parked message of their key
//	outbox_consumer_ready{consumer}            1 while the adapter's Readiness is nil (WatchConsumer)
//
// Inboxes report through Inbox.Observe (or Dispatcher.Observe for typed
// events' handlers) with the Observer as their InboxObserver.
//
// The table's and the inbox table's gauges read the database at most once
// per Config.StatsCacheFor (5 s by default) whatever the scrape rate, so
// scrapes never load the database; one read at a time, given Config.StatsTimeout (3 s by default),
// so a slow or hanging database neither piles up queries nor stalls
// scrapes: they show the last values read meanwhile.
//
// # Traces
//
// InjectTraceContext, as the Writer's BeforeWrite, puts the writer's span
// context into each message's headers (W3C traceparent and tracestate). The
// relay then records a "send <topic>" span per message (kind producer,
// OpenTelemetry messaging conventions) as a child of that context, and puts
// its own context into the headers the publisher sends, so the consumer goes
// on with ExtractTraceContext: writer, relay, broker, consumer and the
// consumer's own outgoing messages form one trace.
package outboxotel

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/outboxdriver"
)

// scope is the instrumentation scope of the meter and the tracer.
const scope = "github.com/go-outbox/outbox/outboxotel"

const (
	// StatsCacheForDefault is Config.StatsCacheFor when zero.
	StatsCacheForDefault = 5 * time.Second
	// StatsTimeoutDefault is Config.StatsTimeout when zero: under the
	// usual scrape timeout of Prometheus (10 s) and OTLP exports (30 s).
	StatsTimeoutDefault = 3 * time.Second
	// StuckAfterDefault is Config.StuckAfter when zero: the default of
	// `outbox status --stuck-after`.
	StuckAfterDefault = 5 * time.Minute
)

// Config configures an Observer. The zero value uses the global providers
// (otel.GetMeterProvider, otel.GetTracerProvider) and W3C trace context.
type Config struct {
	MeterProvider  metric.MeterProvider
	TracerProvider trace.TracerProvider
	// Propagator reads and writes the trace context in message headers.
	// Default W3C (traceparent, tracestate) and baggage, as
	// InjectTraceContext writes them.
	Propagator propagation.TextMapPropagator
	// StatsCacheFor is how long WatchTable's gauges reuse one read of the
	// table. Default StatsCacheForDefault.
	StatsCacheFor time.Duration
	// StatsTimeout bounds one read of the table for WatchTable's gauges,
	// and how long a collection waits for it; past it the gauges show the
	// last values read. Default StatsTimeoutDefault.
	StatsTimeout time.Duration
	// StuckAfter is how long a key's head must have waited for WatchTable
	// to count the key in outbox.stuck.keys, as `outbox status
	// --stuck-after` does. Default StuckAfterDefault.
	StuckAfter time.Duration
}

// Observer is an outbox.Observer that records metrics and spans.
type Observer struct {
	cfg    Config
	meter  metric.Meter
	tracer trace.Tracer

	published, retried, dead, storeErrors metric.Int64Counter
	inboxHandled, inboxDuplicates         metric.Int64Counter
	publishDuration, claimDuration        metric.Float64Histogram

	// attrs caches the attribute sets of the hot path, by their values:
	// building a set per message costs more than the count itself.
	attrs sync.Map // string -> metric.MeasurementOption
}

// attrSet returns the cached option for the attributes key=value pairs.
func (o *Observer) attrSet(kv ...string) metric.MeasurementOption {
	key := strings.Join(kv, "\x00")
	if opt, ok := o.attrs.Load(key); ok {
		return opt.(metric.MeasurementOption)
	}
	a := make([]attribute.KeyValue, 0, len(kv)/2)
	for i := 0; i+1 < len(kv); i += 2 {
		a = append(a, attribute.String(kv[i], kv[i+1]))
	}
	opt, _ := o.attrs.LoadOrStore(key, metric.WithAttributeSet(attribute.NewSet(a...)))
	return opt.(metric.MeasurementOption)
}

var (
	_ outbox.Observer        = (*Observer)(nil)
	_ outbox.InboxObserver   = (*Observer)(nil)
	_ outbox.ConsumeObserver = (*Observer)(nil)
)

// NewObserver creates the instruments.
func NewObserver(cfg Config) (*Observer, error) {
	if cfg.MeterProvider == nil {
		cfg.MeterProvider = otel.GetMeterProvider()
	}
	if cfg.TracerProvider == nil {
		cfg.TracerProvider = otel.GetTracerProvider()
	}
	if cfg.Propagator == nil {
		cfg.Propagator = w3c
	}
	if cfg.StatsCacheFor <= 0 {
		cfg.StatsCacheFor = StatsCacheForDefault
	}
	if cfg.StatsTimeout <= 0 {
		cfg.StatsTimeout = StatsTimeoutDefault
	}
	if cfg.StuckAfter <= 0 {
		cfg.StuckAfter = StuckAfterDefault
	}
	o := &Observer{cfg: cfg, meter: cfg.MeterProvider.Meter(scope), tracer: cfg.TracerProvider.Tracer(scope)}
	var errs []error
	counter := func(name, desc, unit string) metric.Int64Counter {
		c, err := o.meter.Int64Counter(name, metric.WithDescription(desc), metric.WithUnit(unit))
		errs = append(errs, err)
		return c
	}
	histogram := func(name, desc string) metric.Float64Histogram {
		h, err := o.meter.Float64Histogram(name, metric.WithDescription(desc), metric.WithUnit("s"),
			metric.WithExplicitBucketBoundaries(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30))
		errs = append(errs, err)
		return h
	}
	o.published = counter("outbox.messages.published", "Messages the publisher confirmed.", "{message}")
	o.retried = counter("outbox.messages.retried", "Failed attempts that will be retried.", "{message}")
	o.dead = counter("outbox.messages.dead", "Messages the relay dead-lettered.", "{message}")
	o.storeErrors = counter("outbox.store.errors", "Exchanges with the store that failed.", "{error}")
	o.inboxHandled = counter("outbox.inbox.handled", "Messages a consumer's inbox applied.", "{message}")
	o.inboxDuplicates = counter("outbox.inbox.duplicates", "Deliveries a consumer's inbox skipped as already applied.", "{message}")
	o.publishDuration = histogram("outbox.publish.duration", "How long the publisher took for a batch.")
	o.claimDuration = histogram("outbox.claim.duration", "How long an exchange with the store (record outcomes, claim a batch) took.")
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("outboxotel: create instruments: %w", err)
	}
	return o, nil
}

// Exchanged records the claim duration, and failed exchanges.
func (o *Observer) Exchanged(ctx context.Context, e outbox.Exchange) {
	table := o.attrSet("table", e.Table)
	o.claimDuration.Record(ctx, e.Duration.Seconds(), table)
	if e.Err != nil {
		o.storeErrors.Add(ctx, 1, table)
	}
}

// Publishing starts a send span per message, child of the trace context in
// its headers, puts the span's context into the headers the publisher
// sends, and ends the spans with the results.
func (o *Observer) Publishing(ctx context.Context, table string, batch []outbox.Message) (context.Context, func([]error)) {
	start := time.Now()
	spans := make([]trace.Span, len(batch))
	for i := range batch {
		m := &batch[i]
		parent := o.cfg.Propagator.Extract(ctx, headerCarrier{m})
		_, span := o.tracer.Start(parent, "send "+m.Topic,
			trace.WithSpanKind(trace.SpanKindProducer),
			trace.WithAttributes(
				attribute.String("messaging.operation.type", "send"),
				attribute.String("messaging.destination.name", m.Topic),
				attribute.String("messaging.message.id", m.ID.String()),
				attribute.String("outbox.table", table),
				attribute.Int("outbox.attempt", m.Attempts+1),
			))
		o.cfg.Propagator.Inject(trace.ContextWithSpan(ctx, span), headerCarrier{m})
		spans[i] = span
	}
	return ctx, func(results []error) {
		o.publishDuration.Record(ctx, time.Since(start).Seconds(), o.attrSet("table", table))
		for i, span := range spans {
			if i < len(results) && results[i] != nil {
				span.RecordError(results[i])
				span.SetStatus(codes.Error, results[i].Error())
			}
			span.End()
		}
	}
}

// Settled counts the message's outcome; a dead message by its class too.
func (o *Observer) Settled(ctx context.Context, table string, m *outbox.Message, outcome outbox.Outcome, err error) {
	switch outcome {
	case outbox.OutcomePublished:
		o.published.Add(ctx, 1, o.attrSet("table", table, "topic", m.Topic))
	case outbox.OutcomeRetried:
		o.retried.Add(ctx, 1, o.attrSet("table", table, "topic", m.Topic))
	case outbox.OutcomeDead:
		o.dead.Add(ctx, 1, o.attrSet("table", table, "topic", m.Topic, "class", string(deadClass(err))))
	}
}

// deadClass is the class of a dead letter as the relay records it in the
// history of attempts (and `outbox dead groups` shows it): expired,
// permanent, or a retryable error on the last attempt allowed.
func deadClass(err error) outboxdriver.AttemptClass {
	switch {
	case errors.Is(err, outbox.ErrExpired):
		return outboxdriver.ClassExpired
	case outbox.IsPermanent(err):
		return outboxdriver.ClassPermanent
	default:
		return outboxdriver.ClassExhausted
	}
}

// WatchRelay registers the gauge outbox.relay.ready: 1 while relay.Ready()
// is nil, 0 otherwise, for an alert on a relay that stopped working.
func (o *Observer) WatchRelay(relay *outbox.Relay, table string) (metric.Registration, error) {
	ready, err := o.meter.Int64ObservableGauge("outbox.relay.ready", metric.WithDescription("1 while the relay runs and its store answers (Relay.Ready), 0 otherwise."))
	if err != nil {
		return nil, fmt.Errorf("outboxotel: create gauge: %w", err)
	}
	attrs := metric.WithAttributes(attribute.String("table", table))
	return o.meter.RegisterCallback(func(_ context.Context, obs metric.Observer) error {
		v := int64(0)
		if relay.Ready() == nil {
			v = 1
		}
		obs.ObserveInt64(ready, v, attrs)
		return nil
	}, ready)
}

// Consuming starts a "process <topic>" span (kind consumer) as a child of
// the trace context m carries, for a consumer adapter's attempt to handle
// it; the handler's own work, and the messages it writes with
// InjectTraceContext, go on in that trace.
func (o *Observer) Consuming(ctx context.Context, consumer string, m outbox.Message) (context.Context, func(error)) {
	parent := o.cfg.Propagator.Extract(ctx, headerCarrier{&m})
	ctx, span := o.tracer.Start(parent, "process "+m.Topic,
		trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(
			attribute.String("messaging.operation.type", "process"),
			attribute.String("messaging.destination.name", m.Topic),
			attribute.String("messaging.message.id", m.ID.String()),
			attribute.String("messaging.consumer.group.name", consumer),
		))
	return ctx, func(err error) {
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
		span.End()
	}
}

// Handled counts a message an inbox applied, or skipped as a duplicate.
func (o *Observer) Handled(ctx context.Context, consumer string, applied bool, err error) {
	attrs := o.attrSet("consumer", consumer)
	switch {
	case applied:
		o.inboxHandled.Add(ctx, 1, attrs)
	case err == nil:
		o.inboxDuplicates.Add(ctx, 1, attrs)
	}
}

// w3c is the propagator of message headers: W3C trace context and baggage,
// whatever the application's global propagator, so that every process reads
// what the others wrote.
var w3c = propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})

// InjectTraceContext puts ctx's trace context into m's headers (W3C
// traceparent and tracestate, and baggage). Use it as
// outbox.WriterConfig.BeforeWrite.
func InjectTraceContext(ctx context.Context, m *outbox.Message) {
	w3c.Inject(ctx, headerCarrier{m})
}

// ExtractTraceContext returns ctx carrying the trace context of m's headers,
// for a consumer to start its span as a child of the relay's send span.
func ExtractTraceContext(ctx context.Context, m *outbox.Message) context.Context {
	return w3c.Extract(ctx, headerCarrier{m})
}

// headerCarrier is a message's headers as a TextMapCarrier.
type headerCarrier struct{ m *outbox.Message }

func (c headerCarrier) Get(key string) string { return c.m.Headers[key] }

func (c headerCarrier) Set(key, value string) {
	if c.m.Headers == nil {
		c.m.Headers = map[string]string{}
	}
	c.m.Headers[key] = value
}

func (c headerCarrier) Keys() []string {
	keys := make([]string, 0, len(c.m.Headers))
	for k := range c.m.Headers {
		keys = append(keys, k)
	}
	return keys
}
