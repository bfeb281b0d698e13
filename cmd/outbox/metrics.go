package main

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/outboxdriver"
	"github.com/go-outbox/outbox/outboxotel"
	"github.com/go-outbox/outbox/outboxotel/outboxprom"
)

// metricsServer serves a relay's /metrics (Prometheus text format),
// /healthz (the process answers) and /readyz (Relay.Ready), with
// outboxprom, as an application would.
type metricsServer struct {
	observer *outboxotel.Observer
	server   *outboxprom.Server
}

// listenMetrics binds addr and prepares the observer whose metrics the
// server shows; start serves once the relay exists.
func listenMetrics(addr string) (*metricsServer, error) {
	srv, err := outboxprom.Listen(addr, outboxprom.Config{})
	if err != nil {
		return nil, fmt.Errorf("--metrics-addr %s: %w", addr, err)
	}
	return &metricsServer{observer: srv.Observer(), server: srv}, nil
}

// start serves the endpoints for relay and the gauges of table.
func (m *metricsServer) start(relay *outbox.Relay, admin outboxdriver.Admin, table string, log *slog.Logger) error {
	if _, err := m.observer.WatchTable(admin, table); err != nil {
		return err
	}
	if err := m.server.WatchRelay(relay, table); err != nil {
		return err
	}
	log.Info("outbox relay: serving /metrics, /healthz and /readyz", slog.String("addr", m.server.Addr().String()))
	m.server.Start(context.Background())
	return nil
}

// close stops the server, or releases the port if it never started.
func (m *metricsServer) close() { _ = m.server.Close() }
