// Package outboxprom serves the outbox's metrics to Prometheus, with the
// health and readiness checks a deployment probes, in one call:
//
//	ready := &outboxamqp.Readiness{} // set as outboxamqp.ConsumerConfig.Readiness
//	srv, err := outboxprom.Serve(ctx, "127.0.0.1:9464", outboxprom.Config{
//		Consumers: map[string]outboxotel.Readier{"billing": ready}, Inbox: table})
//	inbox.Observe(srv.Observer()) // and ConsumerConfig.Observer, outbox.Config.Observer
//	srv.WatchRelay(relay, store.Name())            // outbox_relay_ready, a check of /readyz
//	srv.Observer().WatchTable(store, store.Name()) // the table's gauges
//
// It is a package apart from outboxotel so that an application exporting
// with OTLP builds without the Prometheus client.
package outboxprom

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/outboxotel"
)

// Config configures Serve. The zero value serves the metrics of the
// Observer it makes and a /readyz with no check.
type Config struct {
	// Consumers are the consumer adapters to watch, by consumer name:
	// each Readiness (outboxamqp.Readiness, outboxnats.Readiness,
	// outboxkafka.Readiness, set in the adapter's ConsumerConfig) is a
	// check of /readyz named after its consumer, and the gauge
	// outbox_consumer_ready (outboxotel.Observer.WatchConsumer).
	Consumers map[string]outboxotel.Readier
	// Inbox, if set, is the consumers' inbox table, whose parked messages
	// are exported by consumer (outboxotel.Observer.WatchInbox): those of
	// the consumers above, and of every consumer found with some.
	Inbox outboxotel.ParkedCounter
	// Logger receives the server's failures. Default slog.Default().
	Logger *slog.Logger
	// Observer configures the Observer whose metrics are served. Leave its
	// MeterProvider nil: Serve makes the provider /metrics exports (use
	// Server.MeterProvider for the application's own instruments).
	Observer outboxotel.Config
	// Ready are more checks of /readyz, by name; Server.AddReady adds
	// one later, Server.WatchRelay a relay's.
	Ready map[string]func() error
	// Registry, if set, is the Prometheus registry the metrics are
	// registered with and /metrics serves, so that the application's own
	// collectors show beside them. Default a new registry.
	Registry *prometheus.Registry
}

// Server serves, over HTTP, the Prometheus metrics of its Observer
// (/metrics), that the process answers (/healthz) and whether every
// readiness check passes (/readyz: 200 or 503, with a line per check that
// says what it checks and, when it fails, why).
type Server struct {
	listener net.Listener
	log      *slog.Logger
	observer *outboxotel.Observer
	provider *sdkmetric.MeterProvider
	registry *prometheus.Registry

	mu      sync.Mutex
	checks  map[string]check
	closed  bool
	started bool
	server  *http.Server
}

// Serve listens on addr (host:port; port 0 picks a free one, see Addr) and
// serves /metrics, /healthz and /readyz until ctx ends or Close. Give
// Server.Observer to the relays (outbox.Config.Observer), inboxes
// (Inbox.Observe) and consumer adapters (ConsumerConfig.Observer) whose
// metrics it serves.
func Serve(ctx context.Context, addr string, cfg Config) (*Server, error) {
	s, err := Listen(addr, cfg)
	if err != nil {
		return nil, err
	}
	s.Start(ctx)
	return s, nil
}

// Listen is Serve's first half: it listens on addr and makes the Observer,
// but answers nothing until Start. A program that must fail early on a
// taken port, before it builds what the checks watch (the relay, which
// needs the Observer), uses it.
func Listen(addr string, cfg Config) (*Server, error) {
	if cfg.Observer.MeterProvider != nil {
		return nil, &outbox.ConfigError{Field: "outboxprom.Config.Observer.MeterProvider", Value: "set",
			Fix: "leave it nil: Serve makes the provider whose metrics it serves; use Server.MeterProvider for your own instruments"}
	}
	registry := cmp.Or(cfg.Registry, prometheus.NewRegistry())
	exporter, err := otelprom.New(otelprom.WithRegisterer(registry))
	if err != nil {
		return nil, fmt.Errorf("outboxprom: prometheus exporter: %w", err)
	}
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter))
	obsCfg := cfg.Observer
	obsCfg.MeterProvider = provider
	obs, err := outboxotel.NewObserver(obsCfg)
	if err != nil {
		return nil, err
	}
	s := &Server{log: cmp.Or(cfg.Logger, slog.Default()), observer: obs, provider: provider, registry: registry, checks: map[string]check{}}
	names := make([]string, 0, len(cfg.Consumers))
	for name, ready := range cfg.Consumers {
		if _, err := obs.WatchConsumer(ready, name); err != nil {
			return nil, err
		}
		s.checks[name] = check{ready: ready.Ready, what: "consumer " + name + " is connected and consuming, its adapter's Readiness"}
		names = append(names, name)
	}
	if cfg.Inbox != nil {
		slices.Sort(names)
		if _, err := obs.WatchInbox(cfg.Inbox, names...); err != nil {
			return nil, err
		}
	}
	for name, ready := range cfg.Ready {
		s.checks[name] = check{ready: ready}
	}
	if s.listener, err = net.Listen("tcp", addr); err != nil {
		return nil, fmt.Errorf("outboxprom: serve metrics on %s: %w (pick a free port, e.g. 127.0.0.1:9464)", addr, err)
	}
	return s, nil
}

// Start serves, in the background, until ctx ends or Close. Calling it
// again does nothing.
func (s *Server) Start(ctx context.Context) {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.registry, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("GET /readyz", s.readyz)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started || s.closed {
		return
	}
	s.started = true
	s.server = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := s.server.Serve(s.listener); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("outboxprom: the metrics server stopped", slog.Any("error", err))
		}
	}()
	context.AfterFunc(ctx, func() { _ = s.Close() })
}

// Addr is the address the server listens on.
func (s *Server) Addr() net.Addr { return s.listener.Addr() }

// MeterProvider is the provider whose metrics /metrics serves, for the
// application's own instruments.
func (s *Server) MeterProvider() metric.MeterProvider { return s.provider }

// Observer is the Observer whose metrics the server serves: give it to the
// relays, inboxes and consumer adapters, and watch tables and relays with
// it (WatchTable, WatchRelay).
func (s *Server) Observer() *outboxotel.Observer { return s.observer }

// Close stops serving, letting requests under way end (2 s at most), or
// releases the port if the server never started. It is idempotent.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	server := s.server
	s.mu.Unlock()
	if server == nil {
		return s.listener.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	err := server.Shutdown(ctx)
	if errors.Is(err, context.DeadlineExceeded) {
		err = server.Close()
	}
	return err
}
