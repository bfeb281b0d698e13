package amqptest

import (
	"net"
	"strings"
	"sync"
	"testing"
)

// Proxy forwards TCP connections to a target address, and can hold back
// what the target sends and cut every connection: a client's view of a
// broker that stops answering, or a network that drops. Tests use it to put
// a publisher's connection in a known state at the moment it breaks.
type Proxy struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	conns []net.Conn
	hold  bool
	held  chan struct{} // closed when hold ends
	wg    sync.WaitGroup
}

// NewProxy listens on a free loopback port and forwards to target
// (host:port); it closes when the test ends.
func NewProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{ln: ln, target: target, held: make(chan struct{})}
	close(p.held)
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.Close)
	return p
}

// Addr is the proxy's address, host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// URL returns url with its host and port replaced by the proxy's.
func (p *Proxy) URL(url string) string {
	scheme, rest, _ := strings.Cut(url, "://")
	authority, path, _ := strings.Cut(rest, "/")
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
		p.mu.Lock()
		p.conns = append(p.conns, client, server)
		p.mu.Unlock()
		p.wg.Add(2)
		go func() { defer p.wg.Done(); p.pipe(server, client, false) }()
		go func() { defer p.wg.Done(); p.pipe(client, server, true) }()
	}
}

// pipe copies from src to dst; the target's side (fromTarget) waits while
// the proxy holds.
func (p *Proxy) pipe(dst, src net.Conn, fromTarget bool) {
	defer dst.Close()
	defer src.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && fromTarget {
			p.mu.Lock()
			held := p.held
			p.mu.Unlock()
			<-held
		}
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return // EOF, or a connection closed by Cut
		}
	}
}

// Hold stops forwarding what the target sends (confirms, for a publisher)
// until Release or Cut; what clients send still reaches the target.
func (p *Proxy) Hold() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.hold {
		p.hold = true
		p.held = make(chan struct{})
	}
}

// Release resumes forwarding after Hold.
func (p *Proxy) Release() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.hold {
		p.hold = false
		close(p.held)
	}
}

// Cut closes every connection made so far, dropping anything held, and
// releases the hold; new connections are accepted and forwarded as before.
func (p *Proxy) Cut() {
	p.mu.Lock()
	conns := p.conns
	p.conns = nil
	p.mu.Unlock()
	for _, c := range conns {
		c.Close()
	}
	p.Release()
}

// Close stops listening, cuts every connection and waits for the copying to
// end.
func (p *Proxy) Close() {
	p.ln.Close()
	p.Cut()
	p.wg.Wait()
}
