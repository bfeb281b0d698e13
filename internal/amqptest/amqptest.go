// Package amqptest gives tests a RabbitMQ broker: the one TEST_AMQP_URL
// names (scripts/test starts a throwaway one on loopback), a fresh exchange
// and queue per test, a consumer that survives broker restarts, a real stop
// and start of the broker through TEST_RABBITMQ_CTL. internal/proxytest
// breaks connections to it on demand.
//
// Without TEST_AMQP_URL the tests are skipped, except when CI is "true":
// there a missing broker fails the test, so a broken CI set-up cannot pass by
// skipping everything.
//
// A test that stops the broker must not pull it from under other tests, in
// this test binary or in another package's running at the same time: URL
// takes a shared lock (a file lock, so it spans processes) for the duration
// of the test, and Restartable an exclusive one. A test using Restartable
// must not call t.Parallel, or it waits for its siblings' locks forever.
package amqptest

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Environment variables the package reads; scripts/test exports them.
const (
	// EnvURL names the variable holding the broker's URL, e.g.
	// amqp://guest:guest@127.0.0.1:56720/.
	EnvURL = "TEST_AMQP_URL"
	// EnvCtl names the variable holding the path of a command that stops
	// and starts that broker: `$TEST_RABBITMQ_CTL stop|start`.
	EnvCtl = "TEST_RABBITMQ_CTL"
)

// URL returns TEST_AMQP_URL, or skips the test (fails it when CI=true) if it
// is unset. The broker is not stopped by another test until this one ends.
func URL(t testing.TB) string {
	t.Helper()
	url := envURL(t)
	lock(t, url, syscall.LOCK_SH)
	return url
}

func envURL(t testing.TB) string {
	t.Helper()
	url := os.Getenv(EnvURL)
	if url == "" {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s is not set; CI must provide a RabbitMQ broker for this test (scripts/test starts one)", EnvURL)
		}
		t.Skipf("%s is not set; run scripts/test, or eval \"$(scripts/rabbitmq-up)\" first, to run this test", EnvURL)
	}
	return url
}

// lock takes a file lock tied to the broker's URL until the test ends.
func lock(t testing.TB, url string, how int) {
	t.Helper()
	sum := sha256.Sum256([]byte(url))
	path := filepath.Join(os.TempDir(), "outbox-amqptest-"+hex.EncodeToString(sum[:6])+".lock")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o666)
	if err != nil {
		t.Fatalf("amqptest: lock file: %v", err)
	}
	if err := syscall.Flock(int(f.Fd()), how); err != nil {
		f.Close()
		t.Fatalf("amqptest: lock %s: %v", path, err)
	}
	t.Cleanup(func() { f.Close() }) // closing releases the lock
}

// Broker is the broker of TEST_AMQP_URL, which a test may stop and start.
type Broker struct {
	// URL is the broker's URL.
	URL string
	ctl string
}

// Restartable returns the broker for a test that stops and starts it. It
// waits until no other test uses the broker, and keeps new ones off until
// this test ends; the broker is started again at the end if the test left
// it stopped. Without TEST_RABBITMQ_CTL the test is skipped (failed when
// CI=true).
func Restartable(t testing.TB) *Broker {
	t.Helper()
	url := envURL(t)
	ctl := os.Getenv(EnvCtl)
	if ctl == "" {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s is not set; scripts/test sets it with the broker it starts", EnvCtl)
		}
		t.Skipf("%s is not set: this test stops and restarts the broker; run it through scripts/test or after eval \"$(scripts/rabbitmq-up)\"", EnvCtl)
	}
	lock(t, url, syscall.LOCK_EX)
	b := &Broker{URL: url, ctl: ctl}
	t.Cleanup(func() {
		if exec.Command(ctl, "status").Run() != nil {
			b.Start(t)
		}
	})
	return b
}

// Stop stops the broker gracefully and returns when its process is gone.
func (b *Broker) Stop(t testing.TB) { b.run(t, "stop") }

// Start starts the broker again, on the same port with the same data, and
// returns when it accepts connections.
func (b *Broker) Start(t testing.TB) { b.run(t, "start") }

func (b *Broker) run(t testing.TB, verb string) {
	t.Helper()
	start := time.Now()
	out, err := exec.Command(b.ctl, verb).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", b.ctl, verb, err, out)
	}
	t.Logf("broker %s: %v", verb, time.Since(start).Round(time.Millisecond))
}

// Dial connects to url, retrying for up to 30 s (a broker that is just
// starting refuses connections), and closes the connection when the test
// ends.
func Dial(t testing.TB, url string) *amqp.Connection {
	t.Helper()
	var conn *amqp.Connection
	err := retry(30*time.Second, func() (err error) {
		conn, err = amqp.Dial(url)
		return err
	})
	if err != nil {
		t.Fatalf("amqptest: connect to the broker of %s: %v", EnvURL, err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

func retry(d time.Duration, f func() error) error {
	deadline := time.Now().Add(d)
	for {
		err := f()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Destination is an exchange with a queue bound to it.
type Destination struct {
	// Exchange is a direct exchange.
	Exchange string
	// Queue is bound to Exchange with RoutingKey.
	Queue string
	// RoutingKey binds Queue; use it as the messages' topic.
	RoutingKey string
}

// Declare creates a durable direct exchange and a durable queue bound to it,
// with fresh names, and deletes both when the test ends. Durable, so they
// survive a broker restart.
func Declare(t testing.TB, url string) Destination {
	t.Helper()
	name := "outbox-test-" + randomHex(6)
	d := Destination{Exchange: name, Queue: name, RoutingKey: name + ".topic"}
	ch, err := Dial(t, url).Channel()
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	if err := ch.ExchangeDeclare(d.Exchange, amqp.ExchangeDirect, true, false, false, false, nil); err != nil {
		t.Fatalf("declare exchange %s: %v", d.Exchange, err)
	}
	if _, err := ch.QueueDeclare(d.Queue, true, false, false, false, nil); err != nil {
		t.Fatalf("declare queue %s: %v", d.Queue, err)
	}
	if err := ch.QueueBind(d.Queue, d.RoutingKey, d.Exchange, false, nil); err != nil {
		t.Fatalf("bind queue %s: %v", d.Queue, err)
	}
	t.Cleanup(func() {
		// A connection of its own: the test's may be closed by now, and the
		// broker may have been restarted.
		err := retry(30*time.Second, func() error {
			conn, err := amqp.Dial(url)
			if err != nil {
				return err
			}
			defer conn.Close()
			ch, err := conn.Channel()
			if err != nil {
				return err
			}
			if _, err := ch.QueueDelete(d.Queue, false, false, false); err != nil {
				return err
			}
			ch, err = conn.Channel()
			if err != nil {
				return err
			}
			return ch.ExchangeDelete(d.Exchange, false, false)
		})
		if err != nil {
			t.Errorf("amqptest: delete %s: %v", d.Queue, err)
		}
	})
	return d
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Consumer consumes a queue with manual acks, acking each delivery after
// recording it, and reconnects when the connection drops (a broker restart),
// so it sees every message the queue got at least once.
type Consumer struct {
	t     testing.TB
	url   string
	queue string

	mu        sync.Mutex
	cond      chan struct{} // closed and replaced on every delivery
	got       []amqp.Delivery
	handedOut int
	connects  int
}

// Consume starts a consumer of queue; it stops when the test ends.
func Consume(t testing.TB, url, queue string) *Consumer {
	t.Helper()
	c := &Consumer{t: t, url: url, queue: queue, cond: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	ready := make(chan error, 1)
	go func() {
		defer close(done)
		c.run(ctx, ready)
	}()
	if err := <-ready; err != nil {
		cancel()
		<-done
		t.Fatalf("amqptest: consume %s: %v", queue, err)
	}
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return c
}

func (c *Consumer) run(ctx context.Context, ready chan<- error) {
	first := true
	for ctx.Err() == nil {
		err := c.consume(ctx, func() {
			if first {
				first = false
				ready <- nil
			}
		})
		if first {
			ready <- err
			return
		}
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond): // broker restarting: try again
		}
	}
}

// consume runs one connection's consumer until it breaks or ctx ends.
func (c *Consumer) consume(ctx context.Context, started func()) error {
	var conn *amqp.Connection
	err := retry(5*time.Second, func() (err error) {
		conn, err = amqp.Dial(c.url)
		return err
	})
	if err != nil {
		return err
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	if err := ch.Qos(200, 0, false); err != nil {
		return err
	}
	deliveries, err := ch.Consume(c.queue, "", false, false, false, false, nil)
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.connects++
	c.mu.Unlock()
	started()
	for {
		select {
		case <-ctx.Done():
			return nil
		case d, ok := <-deliveries:
			if !ok {
				return errors.New("delivery channel closed")
			}
			c.mu.Lock()
			c.got = append(c.got, d)
			close(c.cond)
			c.cond = make(chan struct{})
			c.mu.Unlock()
			// Recorded first: a delivery whose ack is lost comes again,
			// which the tests count as a duplicate, never as a loss.
			_ = d.Ack(false)
		}
	}
}

// Next returns the next n deliveries not returned before, waiting up to
// ctx's deadline.
func (c *Consumer) Next(ctx context.Context, n int) ([]amqp.Delivery, error) {
	for {
		c.mu.Lock()
		if len(c.got)-c.handedOut >= n {
			out := c.got[c.handedOut : c.handedOut+n]
			c.handedOut += n
			c.mu.Unlock()
			return out, nil
		}
		have, wake := len(c.got)-c.handedOut, c.cond
		c.mu.Unlock()
		select {
		case <-wake:
		case <-ctx.Done():
			return nil, fmt.Errorf("%d of %d messages arrived on queue %s: %w", have, n, c.queue, ctx.Err())
		}
	}
}

// WaitFor waits until cond holds for all the deliveries so far, up to ctx's
// deadline. cond must not modify the slice.
func (c *Consumer) WaitFor(ctx context.Context, cond func(all []amqp.Delivery) bool) error {
	for {
		c.mu.Lock()
		all, wake := c.got[:len(c.got):len(c.got)], c.cond
		c.mu.Unlock()
		if cond(all) {
			return nil
		}
		n := len(all)
		select {
		case <-wake:
		case <-ctx.Done():
			return fmt.Errorf("after %d deliveries on queue %s: %w", n, c.queue, ctx.Err())
		}
	}
}

// All returns every delivery so far.
func (c *Consumer) All() []amqp.Delivery {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]amqp.Delivery(nil), c.got...)
}

// Connects counts the connections the consumer made (1 + reconnections).
func (c *Consumer) Connects() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.connects
}

// QueueWatch reads a queue's message count, over a connection of its own
// that it opens again after a broker restart.
type QueueWatch struct {
	url, queue string

	mu   sync.Mutex
	conn *amqp.Connection
	ch   *amqp.Channel
}

// WatchQueue returns a watch of queue; its connection closes when the test
// ends.
func WatchQueue(t testing.TB, url, queue string) *QueueWatch {
	q := &QueueWatch{url: url, queue: queue}
	t.Cleanup(func() {
		q.mu.Lock()
		defer q.mu.Unlock()
		q.reset()
	})
	return q
}

// Ready returns the number of messages ready for delivery in the queue
// (messages delivered to a consumer and not yet acked are not counted), or
// why the broker could not tell, e.g. while it is down.
func (q *QueueWatch) Ready() (int, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.ch == nil || q.ch.IsClosed() {
		q.reset()
		conn, err := amqp.Dial(q.url)
		if err != nil {
			return 0, err
		}
		ch, err := conn.Channel()
		if err != nil {
			_ = conn.Close()
			return 0, err
		}
		q.conn, q.ch = conn, ch
	}
	st, err := q.ch.QueueDeclarePassive(q.queue, true, false, false, false, nil)
	if err != nil {
		return 0, fmt.Errorf("amqptest: queue %s: %w", q.queue, err)
	}
	return st.Messages, nil
}

func (q *QueueWatch) reset() {
	if q.conn != nil {
		_ = q.conn.Close()
	}
	q.conn, q.ch = nil, nil
}

// ClosedURL returns an amqp:// URL for 127.0.0.1 on a port where nothing
// listens (one that was just free).
func ClosedURL(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return "amqp://guest:guest@" + addr + "/"
}
