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
// /healthz (the process answers) and /readyz (Relay.Ready, or with
// --tables TablesRelay.Ready), with outboxprom, as an application would.
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
	m.serve(log)
	return nil
}

// watchTables is TablesConfig.OnServe for `outbox relay --tables`: while
// each table's relay runs, the gauges of its table and its relay's
// outbox_relay_ready, as start serves them for a relay of one table; they
// go when the relay stops (its table gone). /readyz has no line per table
// (one tenant's table must not fail the process's probe): watchTablesRelay
// adds the tables relay's own. A watch that fails is logged: the relay is
// served without it.
func (m *metricsServer) watchTables(log *slog.Logger) func(outboxdriver.Store, *outbox.Relay) func() {
	return func(store outboxdriver.Store, relay *outbox.Relay) func() {
		table := store.Name()
		var watches []interface{ Unregister() error }
		if admin, ok := store.(outboxdriver.Admin); ok {
			if reg, err := m.observer.WatchTable(admin, table); err != nil {
				log.Warn("outbox relay: not serving a table's gauges on /metrics", slog.String("table", table), slog.Any("error", err))
			} else {
				watches = append(watches, reg)
			}
		}
		if reg, err := m.observer.WatchRelay(relay, table); err != nil {
			log.Warn("outbox relay: not serving a table's relay readiness on /metrics", slog.String("table", table), slog.Any("error", err))
		} else {
			watches = append(watches, reg)
		}
		return func() {
			for _, w := range watches {
				_ = w.Unregister()
			}
		}
	}
}

// watchTablesRelay adds the /readyz check of `outbox relay --tables`:
// the tables relay runs and its latest listing of the tables succeeded.
func (m *metricsServer) watchTablesRelay(tr *outbox.TablesRelay) {
	m.server.AddReady("tables relay (runs, and its latest listing of the tables succeeded)", tr.Ready)
}

// serve serves the endpoints for the checks and gauges added since.
func (m *metricsServer) serve(log *slog.Logger) {
	log.Info("outbox relay: serving /metrics, /healthz and /readyz", slog.String("addr", m.server.Addr().String()))
	m.server.Start(context.Background())
}

// close stops the server, or releases the port if it never started.
func (m *metricsServer) close() { _ = m.server.Close() }
