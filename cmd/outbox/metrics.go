package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/outboxdriver"
	"github.com/go-outbox/outbox/outboxotel"
)

// metricsServer serves a relay's /metrics (Prometheus text format),
// /healthz (the process answers) and /readyz (Relay.Ready).
type metricsServer struct {
	listener net.Listener
	observer *outboxotel.Observer
	registry *prometheus.Registry
	server   *http.Server
}

// listenMetrics binds addr and prepares the observer whose metrics the
// server shows; start serves once the relay exists.
func listenMetrics(addr string) (*metricsServer, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--metrics-addr %s: %w (pick a free port, e.g. 127.0.0.1:9464)", addr, err)
	}
	registry := prometheus.NewRegistry()
	exporter, err := otelprom.New(otelprom.WithRegisterer(registry))
	if err != nil {
		ln.Close()
		return nil, fmt.Errorf("metrics: %w", err)
	}
	obs, err := outboxotel.NewObserver(outboxotel.Config{MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter))})
	if err != nil {
		ln.Close()
		return nil, err
	}
	return &metricsServer{listener: ln, observer: obs, registry: registry}, nil
}

// start serves the endpoints for relay and the gauges of table.
func (m *metricsServer) start(relay *outbox.Relay, admin outboxdriver.Admin, table string, log *slog.Logger) error {
	if _, err := m.observer.WatchTable(admin, table); err != nil {
		return err
	}
	if _, err := m.observer.WatchRelay(relay, table); err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(m.registry, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if err := relay.Ready(); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ready")
	})
	m.server = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	log.Info("outbox relay: serving /metrics, /healthz and /readyz", slog.String("addr", m.listener.Addr().String()))
	go func() {
		if err := m.server.Serve(m.listener); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("outbox relay: the metrics server stopped", slog.Any("error", err))
		}
	}()
	return nil
}

// close stops the server, or releases the port if it never started.
func (m *metricsServer) close() {
	if m.server == nil {
		m.listener.Close()
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = m.server.Shutdown(ctx)
}
