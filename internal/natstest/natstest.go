// Package natstest runs an embedded NATS server with JetStream on loopback,
// for tests and for the demo: no binary to install, ready in tens of
// milliseconds. A server can be stopped and started again on the same port
// and store directory, so clients reconnect by themselves and find their
// streams and messages again, which is how outage tests simulate a broker
// restart.
package natstest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
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

var streamSeq atomic.Int64

// NewStream creates a stream on js with a fresh name, capturing the subjects
// "<prefix>>", and returns its name and prefix (ending with a dot: publish to
// prefix+"orders.created"). cfg gives the other settings (storage, duplicate
// window, limits); its Name and Subjects are replaced. It fails t if the
// stream cannot be created within 10s.
func NewStream(t testing.TB, js jetstream.JetStream, cfg jetstream.StreamConfig) (name, prefix string) {
	t.Helper()
	n := streamSeq.Add(1)
	name = fmt.Sprintf("S%d", n)
	prefix = fmt.Sprintf("s%d.", n)
	cfg.Name = name
	cfg.Subjects = []string{prefix + ">"}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := js.CreateStream(ctx, cfg); err != nil {
		t.Fatalf("natstest: create stream %s: %v", name, err)
	}
	return name, prefix
}

// Reader reads a stream from its first message, in stream order, through an
// ordered consumer (which survives server restarts). Each Next continues
// where the previous one stopped. It is safe for concurrent use.
type Reader struct {
	js     jetstream.JetStream
	stream string

	mu   sync.Mutex
	cons jetstream.Consumer
}

// NewReader returns a reader of stream; it creates its consumer on first
// use.
func NewReader(js jetstream.JetStream, stream string) *Reader {
	return &Reader{js: js, stream: stream}
}

// Next returns the next n messages of the stream, waiting for them until
// ctx ends; then it returns those it got with an error.
func (r *Reader) Next(ctx context.Context, n int) ([]jetstream.Msg, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cons == nil {
		c, err := r.js.OrderedConsumer(ctx, r.stream, jetstream.OrderedConsumerConfig{})
		if err != nil {
			return nil, err
		}
		r.cons = c
	}
	var out []jetstream.Msg
	for len(out) < n {
		wait := time.Second
		if dl, ok := ctx.Deadline(); ok {
			wait = min(wait, time.Until(dl))
		}
		if wait <= 0 || ctx.Err() != nil {
			return out, fmt.Errorf("received %d of %d messages of stream %s: %w", len(out), n, r.stream, context.DeadlineExceeded)
		}
		batch, err := r.cons.Fetch(n-len(out), jetstream.FetchMaxWait(wait))
		if err != nil {
			return out, err
		}
		for m := range batch.Messages() {
			out = append(out, m)
		}
		if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) {
			return out, err
		}
	}
	return out, nil
}
