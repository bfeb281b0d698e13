// Package natstest runs an embedded NATS server with JetStream on loopback,
// for tests and for the demo: no binary to install, ready in tens of
// milliseconds. A server can be stopped and started again on the same port
// and store directory, so clients reconnect by themselves and find their
// streams and messages again, which is how outage tests simulate a broker
// restart.
package natstest

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// readyTimeout bounds the wait for a started server to accept clients.
const readyTimeout = 10 * time.Second

// Server is an embedded NATS server with JetStream. Its methods are safe for
// concurrent use.
type Server struct {
	mu   sync.Mutex
	opts server.Options // as given, with the port fixed after the first start
	srv  *server.Server // nil while stopped
	url  string
}

// Run starts a server with opts and waits until it accepts clients. Zero
// fields get loopback defaults: Host 127.0.0.1, Port -1 (a free port, kept
// across restarts). JetStream is always on; opts.StoreDir must be set, since
// restarts keep the streams there. The caller stops the server with Shutdown.
// Run is for programs such as the demo; tests use Start.
func Run(opts server.Options) (*Server, error) {
	if opts.StoreDir == "" {
		return nil, errors.New("natstest: Options.StoreDir is empty; set it to a directory for the JetStream files")
	}
	if opts.Host == "" {
		opts.Host = "127.0.0.1"
	}
	if opts.Port == 0 {
		opts.Port = -1
	}
	opts.JetStream = true
	opts.NoSigs = true
	s := &Server{opts: opts}
	if err := s.Start(); err != nil {
		return nil, err
	}
	return s, nil
}

// Start runs a server for t on a free loopback port with its JetStream files
// in t.TempDir(), and shuts it down when the test ends. It fails the test if
// the server does not start.
func Start(t testing.TB) *Server {
	t.Helper()
	return StartWith(t, server.Options{})
}

// StartWith is Start with options (limits, authentication...); zero fields
// get the defaults of Start.
func StartWith(t testing.TB, opts server.Options) *Server {
	t.Helper()
	if opts.StoreDir == "" {
		opts.StoreDir = t.TempDir()
	}
	opts.NoLog = true
	s, err := Run(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Shutdown)
	return s
}

// Start starts a stopped server again, on the same port and store
// directory, and waits until it accepts clients. Starting a running server
// is a no-op.
func (s *Server) Start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.srv != nil {
		return nil
	}
	opts := s.opts // NewServer changes the options it is given
	srv, err := server.NewServer(&opts)
	if err != nil {
		return fmt.Errorf("natstest: new server: %w", err)
	}
	srv.Start()
	if !srv.ReadyForConnections(readyTimeout) {
		srv.Shutdown()
		return fmt.Errorf("natstest: server on %s:%d not ready within %v", s.opts.Host, s.opts.Port, readyTimeout)
	}
	if !srv.JetStreamEnabled() {
		srv.Shutdown()
		return errors.New("natstest: server started without JetStream")
	}
	if s.opts.Port <= 0 {
		// Keep the port the system chose, so a restart comes back at the
		// same address and clients reconnect.
		s.opts.Port = srv.Addr().(*net.TCPAddr).Port
	}
	s.srv = srv
	s.url = srv.ClientURL()
	return nil
}

// Restart stops the server if it runs and starts it again on the same port
// and store directory. It fails t if the server does not come back.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.Shutdown()
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
}

// Shutdown stops the server and waits until it has stopped; clients see the
// connection drop and try to reconnect. Shutting down a stopped server is a
// no-op.
func (s *Server) Shutdown() {
	s.mu.Lock()
	srv := s.srv
	s.srv = nil
	s.mu.Unlock()
	if srv != nil {
		srv.Shutdown()
		srv.WaitForShutdown()
	}
}

// Running reports whether the server is started.
func (s *Server) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.srv != nil
}

// URL returns the client URL, nats://127.0.0.1:PORT. It stays valid across
// restarts.
func (s *Server) URL() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.url
}

// StoreDir returns the directory holding the JetStream files.
func (s *Server) StoreDir() string { return s.opts.StoreDir }

// Server returns the running nats-server, or nil while stopped.
func (s *Server) Server() *server.Server {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.srv
}

// Connect connects to the server with options suited to tests (reconnect
// forever, quickly) followed by opts, and closes the connection when the
// test ends.
func (s *Server) Connect(t testing.TB, opts ...nats.Option) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(s.URL(), append(ClientOptions(), opts...)...)
	if err != nil {
		t.Fatalf("natstest: connect to %s: %v", s.URL(), err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// ClientOptions are the nats.go options tests use for clients of a server
// that restarts: reconnect forever, every 20ms, without jitter.
func ClientOptions() []nats.Option {
	return []nats.Option{
		nats.MaxReconnects(-1),
		nats.ReconnectWait(20 * time.Millisecond),
		nats.ReconnectJitter(0, 0),
		nats.Name("natstest"),
	}
}

// JetStream returns a JetStream context on a new connection (see Connect).
func (s *Server) JetStream(t testing.TB, opts ...nats.Option) jetstream.JetStream {
	t.Helper()
	js, err := jetstream.New(s.Connect(t, opts...))
	if err != nil {
		t.Fatalf("natstest: jetstream: %v", err)
	}
	return js
}
