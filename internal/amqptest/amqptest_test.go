package amqptest_test

import (
	"bufio"
	"context"
	"net"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/go-outbox/outbox/internal/amqptest"
)

// echoServer answers each line with the same line.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
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
					if _, err := c.Write([]byte(line)); err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String()
}

func TestProxyForwardsHoldsRepliesAndCuts(t *testing.T) {
	t.Parallel()
	p := amqptest.NewProxy(t, echoServer(t))
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	roundTrip := func(msg string) (string, error) {
		if _, err := c.Write([]byte(msg + "\n")); err != nil {
			return "", err
		}
		_ = c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
		return r.ReadString('\n')
	}
	if got, err := roundTrip("one"); err != nil || got != "one\n" {
		t.Fatalf("through the proxy: %q, %v", got, err)
	}
	p.Hold()
	if got, err := roundTrip("two"); err == nil {
		t.Fatalf("reply %q came through while held", got)
	}
	p.Release()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if got, err := r.ReadString('\n'); err != nil || got != "two\n" {
		t.Fatalf("held reply after Release: %q, %v", got, err)
	}
	p.Cut()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := r.ReadString('\n'); err == nil {
		t.Fatal("connection still open after Cut")
	}
	c2, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatalf("new connection after Cut: %v", err)
	}
	c2.Close()
}

func TestProxyURLKeepsCredentialsAndVhost(t *testing.T) {
	t.Parallel()
	p := amqptest.NewProxy(t, "127.0.0.1:1")
	for in, want := range map[string]string{
		"amqp://guest:guest@127.0.0.1:5672/":   "amqp://guest:guest@" + p.Addr() + "/",
		"amqp://u:p%40ss@broker:5672/prod?x=1": "amqp://u:p%40ss@" + p.Addr() + "/prod?x=1",
		"amqp://broker":                        "amqp://" + p.Addr() + "/",
	} {
		if got := p.URL(in); got != want {
			t.Errorf("URL(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestClosedURLRefusesConnections(t *testing.T) {
	t.Parallel()
	url := amqptest.ClosedURL(t)
	if !strings.HasPrefix(url, "amqp://guest:guest@127.0.0.1:") {
		t.Fatalf("ClosedURL() = %q", url)
	}
	if _, err := amqp.Dial(url); err == nil {
		t.Fatalf("connected to %s", url)
	}
}

// The consumer sees what is published to its queue, in order.
func TestDeclareAndConsume(t *testing.T) {
	t.Parallel()
	url := amqptest.URL(t)
	d := amqptest.Declare(t, url)
	c := amqptest.Consume(t, url, d.Queue)
	ch, err := amqptest.Dial(t, url).Channel()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, body := range []string{"a", "b", "c"} {
		if err := ch.PublishWithContext(ctx, d.Exchange, d.RoutingKey, true, false, amqp.Publishing{Body: []byte(body)}); err != nil {
			t.Fatal(err)
		}
	}
	got, err := c.Next(ctx, 3)
	if err != nil {
		t.Fatal(err)
	}
	if string(got[0].Body)+string(got[1].Body)+string(got[2].Body) != "abc" {
		t.Fatalf("received %q %q %q, want a b c", got[0].Body, got[1].Body, got[2].Body)
	}
}
