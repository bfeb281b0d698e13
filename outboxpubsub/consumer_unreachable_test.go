package outboxpubsub_test

import (
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"

	"github.com/go-outbox/outbox/internal/proxytest"
	"github.com/go-outbox/outbox/outboxpubsub"
	"github.com/go-outbox/outbox/publishertest"
)

// Pub/Sub cut off while Consume receives, which the client retries inside
// Receive without a word, is noticed by the consumer's own reads of the
// subscription: Readiness says since when and why, a WARN line says so
// once; once Pub/Sub answers again Readiness is nil, an INFO line says that
// receiving resumes, and what is published is handed over once the client
// opened its stream again (its backoff reaches 30 s: the wait allows it).
func TestPubSubUnreachableWhileReceivingFailsReadinessAndIsLoggedUntilItAnswersAgain(t *testing.T) {
	t.Parallel()
	srv := server(t, nil)
	createTopic(t, srv, "orders")
	createSubscription(t, srv, "billing", "orders", subOptions{})
	l := newLink(t, srv.Addr)
	c, err := pubsub.NewClient(ctxFor(t, 10*time.Second), project, clientOptions(l.addr)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	ready := &outboxpubsub.Readiness{}
	r := startConsume(t, c, fastReconnects(outboxpubsub.ConsumerConfig{Subscription: "billing", Readiness: ready}), nil)
	batch := publishertest.Messages("orders.created", 2)
	publishTo(t, srv, "orders", false, batch[0])
	r.WaitHandled(t, batch[0])
	r.WaitFor(t, "Readiness nil while receiving", func() bool { return ready.Ready() == nil })

	l.cut()
	r.WaitFor(t, "Readiness saying since when Pub/Sub is unreachable, and why", func() bool {
		err := ready.Ready()
		return err != nil && strings.Contains(err.Error(), "since") && strings.Contains(err.Error(), "Pub/Sub unreachable") &&
			strings.Contains(err.Error(), "connection refused")
	})
	r.WaitFor(t, "a WARN line saying Pub/Sub cannot be reached", func() bool { return r.CountLogs(slog.LevelWarn, "cannot reach Pub/Sub") > 0 })
	t.Logf("Readiness while cut off: %v", ready.Ready())

	l.restore()
	r.WaitFor(t, "Readiness nil once Pub/Sub answers again", func() bool { return ready.Ready() == nil })
	r.WaitFor(t, "an INFO line saying receiving resumes", func() bool { return r.Logs.Has(slog.LevelInfo, "back", "receiving resumes") })
	publishTo(t, srv, "orders", false, batch[1])
	r.WaitHandled(t, batch[1])
	if n := r.CountLogs(slog.LevelWarn, "cannot reach Pub/Sub"); n != 1 {
		t.Errorf("%d WARN lines saying Pub/Sub cannot be reached; want 1 for one outage; logs:\n%s", n, r.Logs)
	}
	if n := r.CountLogs(slog.LevelWarn); n != 1 {
		t.Errorf("%d WARN lines or worse; want only the one saying Pub/Sub cannot be reached; logs:\n%s", n, r.Logs)
	}
}

// A network path to Pub/Sub that silently drops everything, without
// closing the connection, is noticed the same way: the read of the
// subscription gets no answer within its time. Once the path carries again,
// Readiness is nil, an INFO line says so, and what is published then is
// handed over.
func TestPubSubSilentWhileReceivingFailsReadinessUntilItAnswersAgain(t *testing.T) {
	t.Parallel()
	srv := server(t, nil)
	createTopic(t, srv, "orders")
	createSubscription(t, srv, "billing", "orders", subOptions{})
	p := proxytest.New(t, srv.Addr)
	c, err := pubsub.NewClient(ctxFor(t, 10*time.Second), project, clientOptions(p.Addr())...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	ready := &outboxpubsub.Readiness{}
	r := startConsume(t, c, fastReconnects(outboxpubsub.ConsumerConfig{Subscription: "billing", Readiness: ready}), nil)
	m := publishertest.Messages("orders.created", 1)[0]
	publishTo(t, srv, "orders", false, m)
	r.WaitHandled(t, m)

	p.Stall()
	r.WaitFor(t, "Readiness saying Pub/Sub gave no answer", func() bool {
		err := ready.Ready()
		return err != nil && strings.Contains(err.Error(), "Pub/Sub unreachable: no answer within")
	})
	r.WaitFor(t, "a WARN line saying Pub/Sub cannot be reached", func() bool { return r.CountLogs(slog.LevelWarn, "cannot reach Pub/Sub") > 0 })
	t.Logf("Readiness while stalled: %v", ready.Ready())
	p.Release()
	r.WaitFor(t, "Readiness nil once Pub/Sub answers again", func() bool { return ready.Ready() == nil })
	r.WaitFor(t, "an INFO line saying receiving resumes", func() bool { return r.Logs.Has(slog.LevelInfo, "back", "receiving resumes") })
	after := publishertest.Messages("orders.created", 1)[0]
	publishTo(t, srv, "orders", false, after)
	r.WaitHandled(t, after)
}

// Pub/Sub unreachable when Consume starts fails the check of the
// subscription: Readiness says so and why, a WARN line says so, and once
// Pub/Sub answers Consume receives and says it is back.
func TestPubSubUnreachableAtStartFailsReadinessAndIsLoggedUntilItAnswers(t *testing.T) {
	t.Parallel()
	srv := server(t, nil)
	createTopic(t, srv, "orders")
	createSubscription(t, srv, "billing", "orders", subOptions{})
	l := newLink(t, srv.Addr)
	l.cut()
	c, err := pubsub.NewClient(ctxFor(t, 10*time.Second), project, clientOptions(l.addr)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	ready := &outboxpubsub.Readiness{}
	r := startConsume(t, c, fastReconnects(outboxpubsub.ConsumerConfig{Subscription: "billing", Readiness: ready}), nil)
	r.WaitFor(t, "Readiness saying Pub/Sub is unreachable, and why", func() bool {
		err := ready.Ready()
		return err != nil && strings.Contains(err.Error(), "Pub/Sub unreachable") && strings.Contains(err.Error(), "connection refused")
	})
	r.WaitFor(t, "a WARN line saying Pub/Sub cannot be reached", func() bool { return r.CountLogs(slog.LevelWarn, "cannot reach Pub/Sub") > 0 })

	l.restore()
	m := publishertest.Messages("orders.created", 1)[0]
	publishTo(t, srv, "orders", false, m)
	r.WaitHandled(t, m)
	r.WaitFor(t, "Readiness nil once Pub/Sub answers", func() bool { return ready.Ready() == nil })
	r.WaitFor(t, "an INFO line saying the consumer is back", func() bool { return r.Logs.Has(slog.LevelInfo, "back") })
}

// link is a TCP path from a client to the fake that a test cuts and
// restores, as a network partition cuts a process off from Pub/Sub: cut
// closes every connection and refuses new ones, restore accepts them again
// on the same address.
type link struct {
	addr   string // where the client connects
	t      *testing.T
	target string

	mu    sync.Mutex
	conns []net.Conn
	ln    net.Listener // nil while cut
}

// newLink opens a link to target, cut when the test ends.
func newLink(t *testing.T, target string) *link {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := &link{addr: ln.Addr().String(), t: t, target: target, ln: ln}
	go l.accept(ln)
	t.Cleanup(l.cut)
	return l
}

// accept carries each connection ln accepts to the target, until ln is
// closed.
func (l *link) accept(ln net.Listener) {
	for {
		in, err := ln.Accept()
		if err != nil {
			return
		}
		out, err := net.Dial("tcp", l.target)
		if err != nil {
			_ = in.Close()
			continue
		}
		l.mu.Lock()
		if l.ln != ln { // cut meanwhile
			l.mu.Unlock()
			_, _ = in.Close(), out.Close()
			return
		}
		l.conns = append(l.conns, in, out)
		l.mu.Unlock()
		for _, pair := range [][2]net.Conn{{in, out}, {out, in}} {
			go func() {
				_, _ = io.Copy(pair[0], pair[1])
				_, _ = pair[0].Close(), pair[1].Close()
			}()
		}
	}
}

// cut closes the link's connections and refuses new ones.
func (l *link) cut() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ln != nil {
		_ = l.ln.Close()
		l.ln = nil
	}
	for _, c := range l.conns {
		_ = c.Close()
	}
	l.conns = nil
}

// restore accepts connections again, on the same address.
func (l *link) restore() {
	l.t.Helper()
	ln, err := net.Listen("tcp", l.addr)
	if err != nil {
		l.t.Fatalf("listen again on %s: %v", l.addr, err)
	}
	l.mu.Lock()
	l.ln = ln
	l.mu.Unlock()
	go l.accept(ln)
}
