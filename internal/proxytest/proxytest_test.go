package proxytest_test

import (
	"bufio"
	"net"
	"testing"
	"time"

	"github.com/go-outbox/outbox/internal/proxytest"
)

// echoServer answers each line with the same line, and counts the lines it
// got.
func echoServer(t *testing.T) (addr string, lines <-chan string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	got := make(chan string, 100)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					got <- line
					if _, err := c.Write([]byte(line)); err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String(), got
}

// client is a connection to the proxy with a line round trip.
type client struct {
	c net.Conn
	r *bufio.Reader
}

func connect(t *testing.T, p *proxytest.Proxy) *client {
	t.Helper()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &client{c: c, r: bufio.NewReader(c)}
}

// roundTrip sends msg and reads a line, waiting up to wait.
func (c *client) roundTrip(msg string, wait time.Duration) (string, error) {
	if _, err := c.c.Write([]byte(msg + "\n")); err != nil {
		return "", err
	}
	return c.read(wait)
}

func (c *client) read(wait time.Duration) (string, error) {
	_ = c.c.SetReadDeadline(time.Now().Add(wait))
	return c.r.ReadString('\n')
}

func TestProxyForwardsHoldsRepliesAndCuts(t *testing.T) {
	t.Parallel()
	addr, _ := echoServer(t)
	p := proxytest.New(t, addr)
	c := connect(t, p)
	if got, err := c.roundTrip("one", 5*time.Second); err != nil || got != "one\n" {
		t.Fatalf("through the proxy: %q, %v", got, err)
	}
	p.Hold()
	if got, err := c.roundTrip("two", 300*time.Millisecond); err == nil {
		t.Fatalf("reply %q came through while held", got)
	}
	p.Release()
	if got, err := c.read(5 * time.Second); err != nil || got != "two\n" {
		t.Fatalf("held reply after Release: %q, %v", got, err)
	}
	p.Cut()
	if _, err := c.read(5 * time.Second); err == nil {
		t.Fatal("connection still open after Cut")
	}
	if got, err := connect(t, p).roundTrip("three", 5*time.Second); err != nil || got != "three\n" {
		t.Fatalf("new connection after Cut: %q, %v", got, err)
	}
}

// A stall keeps what the client sends from the server, on connections made
// before and during it, without closing them; Cut drops what was held.
func TestStallHoldsBothDirectionsAndCutDropsWhatWasHeld(t *testing.T) {
	t.Parallel()
	addr, lines := echoServer(t)
	p := proxytest.New(t, addr)
	before := connect(t, p)
	if _, err := before.roundTrip("before", 5*time.Second); err != nil {
		t.Fatal(err)
	}
	<-lines
	p.Stall()
	if got, err := before.roundTrip("stalled", 300*time.Millisecond); err == nil {
		t.Fatalf("reply %q came through a stall", got)
	}
	during := connect(t, p)
	if got, err := during.roundTrip("new", 300*time.Millisecond); err == nil {
		t.Fatalf("reply %q came through a stall on a new connection", got)
	}
	select {
	case l := <-lines:
		t.Fatalf("the server got %q during the stall", l)
	default:
	}
	p.Cut()
	if _, err := before.read(5 * time.Second); err == nil {
		t.Fatal("connection still open after Cut")
	}
	after := connect(t, p)
	if got, err := after.roundTrip("after", 5*time.Second); err != nil || got != "after\n" {
		t.Fatalf("after Cut: %q, %v", got, err)
	}
	if l := <-lines; l != "after\n" {
		t.Fatalf("the server got %q after the stall was cut; what was held must be dropped", l)
	}
}

func TestURLPointsAtTheProxyKeepingTheRest(t *testing.T) {
	t.Parallel()
	p := proxytest.New(t, "127.0.0.1:1")
	for in, want := range map[string]string{
		"amqp://guest:guest@127.0.0.1:5672/":                  "amqp://guest:guest@" + p.Addr() + "/",
		"amqp://u:p%40ss@broker:5672/prod?x=1":                "amqp://u:p%40ss@" + p.Addr() + "/prod?x=1",
		"amqp://broker":                                       "amqp://" + p.Addr() + "/",
		"nats://127.0.0.1:4222?stream=S":                      "nats://" + p.Addr() + "/?stream=S",
		"postgres://u@127.0.0.1:5432/db?search_path=a&x=1":    "postgres://u@" + p.Addr() + "/db?search_path=a&x=1",
		"postgresql://127.0.0.1:5432/db?host=/tmp/sock&x=1#f": "postgresql://" + p.Addr() + "/db?host=/tmp/sock&x=1#f",
	} {
		if got := p.URL(in); got != want {
			t.Errorf("URL(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestForURLTargetsTheURLsHostAndPort(t *testing.T) {
	t.Parallel()
	addr, _ := echoServer(t)
	p := proxytest.ForURL(t, "amqp://guest:guest@"+addr+"/")
	if got, err := connect(t, p).roundTrip("hello", 5*time.Second); err != nil || got != "hello\n" {
		t.Fatalf("through ForURL's proxy: %q, %v", got, err)
	}
}
