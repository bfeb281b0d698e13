// Package proxytest is a loopback TCP proxy for tests that break a client's
// connection on purpose: hold back what the server sends (a broker whose
// confirms stop coming), stall both directions (a network path that silently
// drops everything, without closing), or cut every connection (a network
// that drops). Clients connect to the proxy's address, or to URL(url) for a
// URL of the server.
package proxytest

import (
	"net"
	"net/url"
	"strings"
	"sync"
	"testing"
)

// Proxy forwards TCP connections to a target address. Its methods are safe
// for concurrent use.
type Proxy struct {
	ln     net.Listener
	target string

	mu       sync.Mutex
	closed   bool
	pairs    []*pair
	toClient gate // what the target sends
	toTarget gate // what clients send
	wg       sync.WaitGroup
}

// pair is one client connection and its connection to the target.
type pair struct {
	client, server net.Conn
	cut            chan struct{} // closed by Cut
}

// gate lets bytes through while open; a closed gate holds them in the proxy
// (neither forwarded nor refused) until it opens, or the connection is cut.
type gate struct {
	shut bool
	open chan struct{} // closed while the gate is open
}

func newGate() gate {
	g := gate{open: make(chan struct{})}
	close(g.open)
	return g
}

func (g *gate) close() {
	if !g.shut {
		g.shut = true
		g.open = make(chan struct{})
	}
}

func (g *gate) reopen() {
	if g.shut {
		g.shut = false
		close(g.open)
	}
}

// New listens on a free loopback port and forwards to target (host:port);
// it closes when the test ends.
func New(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{ln: ln, target: target, toClient: newGate(), toTarget: newGate()}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.Close)
	return p
}

// ForURL is New for the host and port of a server's URL (postgres://,
// amqp://, nats://...): clients use p.URL(url) instead of url.
func ForURL(t testing.TB, serverURL string) *Proxy {
	t.Helper()
	u, err := url.Parse(serverURL)
	if err != nil {
		t.Fatalf("proxytest: %v", err)
	}
	if u.Port() == "" {
		t.Fatalf("proxytest: no port in the URL %s://%s...", u.Scheme, u.Hostname())
	}
	return New(t, u.Host)
}

// Addr is the proxy's address, host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// URL returns serverURL with its host and port replaced by the proxy's; the
// scheme, user information, path and query stay.
func (p *Proxy) URL(serverURL string) string {
	scheme, rest, _ := strings.Cut(serverURL, "://")
	authority, path, _ := strings.Cut(rest, "/")
	if q := strings.IndexByte(authority, '?'); q >= 0 {
		authority, path = authority[:q], authority[q:]
	}
	userinfo := ""
	if at := strings.LastIndex(authority, "@"); at >= 0 {
		userinfo = authority[:at+1]
	}
	return scheme + "://" + userinfo + p.Addr() + "/" + path
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		server, err := net.Dial("tcp", p.target)
		if err != nil {
			client.Close()
			continue
		}
		c := &pair{client: client, server: server, cut: make(chan struct{})}
		p.mu.Lock()
		if p.closed { // Close ran while this connection was being made
			p.mu.Unlock()
			client.Close()
			server.Close()
			return
		}
		p.pairs = append(p.pairs, c)
		p.mu.Unlock()
		p.wg.Add(2)
		go func() { defer p.wg.Done(); p.pipe(c, server, client, &p.toTarget) }()
		go func() { defer p.wg.Done(); p.pipe(c, client, server, &p.toClient) }()
	}
}

// pipe copies from src to dst, each chunk through g.
func (p *Proxy) pipe(c *pair, dst, src net.Conn, g *gate) {
	defer dst.Close()
	defer src.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			open := g.open
			p.mu.Unlock()
			select {
			case <-open:
			case <-c.cut:
				return // what was held is dropped
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return // EOF, or a connection closed by Cut
		}
	}
}

// Hold stops forwarding what the target sends (replies, confirms) until
// Release or Cut; what clients send still reaches the target.
func (p *Proxy) Hold() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.toClient.close()
}

// Release resumes forwarding after Hold or Stall: what was held goes through.
func (p *Proxy) Release() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.toClient.reopen()
	p.toTarget.reopen()
}

// Stall stops forwarding in both directions, on every connection, new ones
// included, until Release or Cut: the connections stay open and bytes are
// neither delivered nor refused, like a network path that silently drops
// everything.
func (p *Proxy) Stall() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.toClient.close()
	p.toTarget.close()
}

// Cut closes every connection made so far, dropping anything held, and
// ends Hold and Stall; new connections are accepted and forwarded as before.
func (p *Proxy) Cut() {
	p.mu.Lock()
	pairs := p.pairs
	p.pairs = nil
	p.mu.Unlock()
	for _, c := range pairs {
		close(c.cut)
		c.client.Close()
		c.server.Close()
	}
	p.Release()
}

// Close stops listening, cuts every connection (dropping anything held) and
// waits for the copying to end. It is idempotent.
func (p *Proxy) Close() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.ln.Close()
	p.Cut()
	p.wg.Wait()
}
