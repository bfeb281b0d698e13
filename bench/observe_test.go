package bench

// What observability costs: the relay draining to a no-op publisher with no
// observer, with outboxotel's metrics (SDK meter provider, in-memory
// reader), and with metrics and traces (every span sampled, then dropped by
// a discarding exporter). The target is under 5 % of the drain rate.

import (
	"context"
	"testing"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/outboxotel"
	"github.com/go-outbox/outbox/outboxpg"
)

// discard is a span exporter that keeps nothing.
type discard struct{}

func (discard) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discard) Shutdown(context.Context) error                             { return nil }

func BenchmarkRelayDrainObserved(b *testing.B) {
	noopPublisher := outbox.PublisherFunc(func(ctx context.Context, msgs []outbox.Message) []error {
		return make([]error, len(msgs))
	})
	for _, mode := range []string{"off", "metrics", "metrics+traces"} {
		b.Run(mode, func(b *testing.B) {
			pool, store, opts := setup(b, outboxpg.Options{})
			var observer outbox.Observer
			if mode != "off" {
				cfg := outboxotel.Config{
					MeterProvider:  sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader())),
					TracerProvider: noop.NewTracerProvider(),
				}
				if mode == "metrics+traces" {
					tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(discard{}), sdktrace.WithSampler(sdktrace.AlwaysSample()))
					b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
					cfg.TracerProvider = tp
				}
				obs, err := outboxotel.NewObserver(cfg)
				if err != nil {
					b.Fatal(err)
				}
				observer = obs
			}
			drainObserved(b, store, noopPublisher, observer, func() { fill(b, pool, opts, backlog) })
		})
	}
}
