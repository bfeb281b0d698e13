//go:build fault

package fault

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/amqptest"
	"github.com/go-outbox/outbox/internal/clitest"
	"github.com/go-outbox/outbox/internal/natstest"
	"github.com/go-outbox/outbox/internal/pgtest"
	"github.com/go-outbox/outbox/outboxamqp"
	"github.com/go-outbox/outbox/outboxnats"
)

// consumer consumes a scenario's messages from its broker while the
// scenario runs, applying each through an inbox on PostgreSQL.
type consumer interface {
	// label names it in the report.
	label() string
	// settle waits until every delivered message is applied, stops the
	// consumer, verifies that each delivered message's effect exists once,
	// and returns how many deliveries the inbox skipped. The caller holds
	// s.mu.
	settle(delivered map[uuid.UUID]bool) int
}

const (
	// consumerLanes is every consumer's Concurrency: messages handled at
	// once, by one process.
	consumerLanes = 8
	// consumerAckWait is how long JetStream waits for an acknowledgement
	// before it delivers a message again: short, so that what a killed
	// process or a broker restart left unacknowledged comes again within
	// the run.
	consumerAckWait = 2 * time.Second
	// consumerMaxDeliver is out of reach: parking is not under test, and
	// the redeliveries a fault causes must not park a message.
	consumerMaxDeliver = 1000
	// settleTimeout bounds the wait for a consumer to apply what was
	// delivered: it may have a backlog to read, and what was delivered and
	// not acknowledged at a fault comes again only after the ack wait.
	settleTimeout = 2 * time.Minute
)

// natsConsumerConfig is the configuration of every outboxnats consumer of
// the suite, in the test process or in a consumer process.
func natsConsumerConfig(stream string, log *slog.Logger) outboxnats.ConsumerConfig {
	return outboxnats.ConsumerConfig{
		Stream: stream, Durable: consumerName, AckWait: consumerAckWait, Concurrency: consumerLanes,
		MaxDeliver: consumerMaxDeliver, BackoffMax: time.Second, Logger: log,
	}
}

// adapterConsumer is a consumer adapter running in the test process from
// the start of a scenario to its check, through the broker's restart or the
// stalled link.
type adapterConsumer struct {
	s      *scenario
	name   string
	fx     *effects
	log    *clitest.LockedBuffer // the adapter's warnings and errors
	logger *slog.Logger          // writes to log

	applied, skipped, failed atomic.Int64

	// halt stops the adapter and returns what went wrong: Consume's error,
	// or that it did not return.
	halt func() error
}

// newConsumer returns the scenario's consumer, an adapter that run starts.
func (s *scenario) newConsumer(name string) *adapterConsumer {
	c := &adapterConsumer{s: s, name: name, fx: newEffects(s.t, s.schema, consumerLanes+2), log: &clitest.LockedBuffer{}}
	c.logger = slog.New(slog.NewTextHandler(c.log, &slog.HandlerOptions{Level: slog.LevelWarn}))
	s.consumer = c
	return c
}

// run runs consume (a consumer adapter's Consume with c.logger, handing
// messages to handle) until the check settles it.
func (c *adapterConsumer) run(consume func(ctx context.Context, handle func(context.Context, outbox.Message) error) error) {
	t := c.s.t
	handle, err := c.fx.handler(func(_ outbox.Message, applied bool, err error) {
		switch {
		case err != nil: // the adapter retries it
			c.failed.Add(1)
		case applied:
			c.applied.Add(1)
		default:
			c.skipped.Add(1)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- consume(ctx, handle) }()
	c.halt = sync.OnceValue(func() error {
		cancel()
		select {
		case err := <-done:
			return err
		case <-time.After(30 * time.Second):
			return errors.New("Consume did not return within 30s of its context's end")
		}
	})
	// Registered after newEffects's: runs before the pool closes.
	t.Cleanup(func() { _ = c.halt() })
}

func (c *adapterConsumer) label() string { return c.name }

func (c *adapterConsumer) settle(delivered map[uuid.UUID]bool) int {
	t := c.s.t
	start := time.Now()
	// Whether all arrive or not, verify names what is missing.
	waitUntil(settleTimeout, func() bool { return c.fx.applied() >= len(delivered) })
	waited := time.Since(start)
	if err := c.halt(); err != nil {
		t.Errorf("%s: consumer %s: %v", c.s.name, c.name, err)
	}
	c.fx.verify(c.s, delivered)
	t.Logf("%s: consumer %s: %d applied, %d deliveries skipped by the inbox, %d failed attempts; the check waited %v for it; its log, by message:\n%s",
		c.s.name, c.name, c.applied.Load(), c.skipped.Load(), c.failed.Load(), waited.Round(time.Millisecond), logSummary(c.log.String()))
	return int(c.skipped.Load())
}

// consumeRabbitMQ binds a second durable queue to d's exchange, so that
// every message the relays publish goes both to the queue the check reads
// and to this one, and consumes it with outboxamqp.Consume while the
// scenario runs. Call it before the relays start.
func (s *scenario) consumeRabbitMQ(brokerURL string, d amqptest.Destination) {
	t := s.t
	queue := d.Queue + "-consumer"
	ch, err := amqptest.Dial(t, brokerURL).Channel()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare(queue, true, false, false, false, nil); err != nil {
		t.Fatalf("declare queue %s: %v", queue, err)
	}
	if err := ch.QueueBind(queue, d.RoutingKey, d.Exchange, false, nil); err != nil {
		t.Fatalf("bind queue %s: %v", queue, err)
	}
	_ = ch.Close()
	t.Cleanup(func() {
		// Runs after the consumer's stop (registered later): nothing
		// reads the queue any more. A connection of its own, as the
		// broker may have restarted since.
		conn, err := amqp.Dial(brokerURL)
		if err == nil {
			defer conn.Close()
			var ch *amqp.Channel
			if ch, err = conn.Channel(); err == nil {
				_, err = ch.QueueDelete(queue, false, false, false)
			}
		}
		if err != nil {
			t.Logf("delete queue %s: %v", queue, err)
		}
	})
	c := s.newConsumer("outboxamqp")
	c.run(func(ctx context.Context, handle func(context.Context, outbox.Message) error) error {
		return outboxamqp.Consume(ctx, brokerURL, outboxamqp.ConsumerConfig{
			Queue: queue, Name: consumerName, Concurrency: consumerLanes,
			MaxDeliver: consumerMaxDeliver, BackoffMax: time.Second, Logger: c.logger,
		}, handle)
	})
}

// consumeNATS consumes stream on srv with outboxnats.Consume (a durable
// consumer, beside the reader of the check) while the scenario runs.
func (s *scenario) consumeNATS(srv *natstest.Server, stream string) {
	c := s.newConsumer("outboxnats")
	// The connection's asynchronous errors go to the consumer's log, not to
	// standard error: after a server restart the adapter's pull
	// subscription can overflow ("slow consumer, messages dropped"; the
	// server delivers those messages again after the ack wait).
	js := srv.JetStream(s.t, nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		c.logger.Warn(err.Error())
	}))
	c.run(func(ctx context.Context, handle func(context.Context, outbox.Message) error) error {
		return outboxnats.Consume(ctx, js, natsConsumerConfig(stream, c.logger), handle)
	})
}

// natsConsumerRole is the child role of a NATS consumer process:
// outboxnats.Consume on a JetStream stream, with an inbox on PostgreSQL,
// until SIGINT.
const natsConsumerRole = "nats-consumer"

// The environment of a consumer process, besides TEST_DATABASE_URL.
const (
	envNATSURL = "OUTBOX_FAULT_NATS_URL"
	envStream  = "OUTBOX_FAULT_STREAM"
	envSchema  = "OUTBOX_FAULT_SCHEMA"
)

// What a consumer process writes on its standard output, a line per
// handled delivery: the event, a space, the message id. Each line is one
// write of less than PIPE_BUF bytes, so the lines of concurrent lanes never
// mix, and a line written before a SIGKILL is not lost.
const (
	evApplied = "applied" // the inbox applied the message and committed
	evSkipped = "skipped" // the inbox skipped it: applied before
	evDying   = "dying"   // applied and committed; the process kills itself before the ack
)

// dyingOdds: an armed consumer process kills itself after one in this many
// of the messages it applies.
const dyingOdds = 4

// dyingAckGrace is how long a process about to kill itself waits after
// the inbox's commit: three times the longest an adapter's client holds an
// acknowledgement before sending it, so that one sent before the handler
// returned (a bug) reaches the broker and the message never comes again.
const dyingAckGrace = 300 * time.Millisecond

// natsConsumerMain is the main function of a NATS consumer process.
func natsConsumerMain() int {
	return consumerMain(natsConsumerRole, func(ctx context.Context, apply func(context.Context, outbox.Message) error) error {
		nc, err := nats.Connect(os.Getenv(envNATSURL), natstest.ClientOptions()...)
		if err != nil {
			return err
		}
		defer nc.Close()
		js, err := jetstream.New(nc)
		if err != nil {
			return err
		}
		return outboxnats.Consume(ctx, js, natsConsumerConfig(os.Getenv(envStream), consumerProcLog()), apply)
	})
}

// consumerProcLog is the adapter's logger in a consumer process: its
// standard error, which the test shows if it fails.
func consumerProcLog() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// consumerMain is the main function of a consumer process in role, until
// SIGINT: consume runs the adapter's Consume, handing each message to apply,
// which applies it through an inbox on PostgreSQL (envSchema) and tells what
// it did on the standard output (evApplied...).
func consumerMain(role string, consume func(ctx context.Context, apply func(context.Context, outbox.Message) error) error) int {
	fail := func(err error) int {
		fmt.Fprintf(os.Stderr, "%s process: %v\n", role, err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	// SIGUSR1 arms the process: then a random draw makes one of the
	// messages it applies its last. It kills itself after the inbox's
	// commit, before the handler returns: every adapter settles a message
	// (ack, XACK, DeleteMessage) only once the handler returned, so that
	// message stays unsettled and comes again.
	var armed atomic.Bool
	usr1 := make(chan os.Signal, 1)
	signal.Notify(usr1, syscall.SIGUSR1)
	go func() {
		<-usr1
		armed.Store(true)
	}()
	emit := func(event string, id uuid.UUID) { fmt.Fprintf(os.Stdout, "%s %s\n", event, id) }

	cfg, err := pgxpool.ParseConfig(os.Getenv(pgtest.EnvURL))
	if err != nil {
		return fail(fmt.Errorf("%s cannot be parsed as a PostgreSQL URL", pgtest.EnvURL))
	}
	cfg.MaxConns = consumerLanes + 2
	cfg.ConnConfig.RuntimeParams["synchronous_commit"] = "off" // as newEffects says
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return fail(err)
	}
	defer pool.Close()
	fx, err := openEffects(pool, os.Getenv(envSchema))
	if err != nil {
		return fail(err)
	}
	apply, err := fx.handler(func(m outbox.Message, applied bool, err error) {
		switch {
		case err != nil: // the adapter logs it and retries
		case !applied:
			emit(evSkipped, m.ID)
		case armed.Load() && rand.IntN(dyingOdds) == 0:
			emit(evDying, m.ID)
			// The handler has not returned, so nothing may acknowledge the
			// message; an adapter that did so early (before the handler)
			// gets the time its client takes to send it: clients batch
			// acknowledgements (Pub/Sub's every 100 ms).
			time.Sleep(dyingAckGrace)
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {} // never return: nothing may settle the message
		default:
			emit(evApplied, m.ID)
		}
	})
	if err != nil {
		return fail(err)
	}
	if err := consume(ctx, apply); err != nil {
		return fail(err)
	}
	return 0
}

// consumerProcs are consumer processes of one adapter (a child role:
// natsConsumerRole, redisConsumerRole, sqsConsumerRole, pubsubConsumerRole) sharing one durable
// consumer, which the test kills and starts again. They tell what they do
// on their standard output (evApplied...).
type consumerProcs struct {
	s     *scenario
	fx    *effects
	role  string
	env   []string
	procs []*consumerProc

	mu      sync.Mutex
	applied int               // deliveries applied, as told
	skipped map[uuid.UUID]int // deliveries skipped by the inbox, by message
	dying   []uuid.UUID       // messages applied by a process that died before their ack
	kills   int
}

// startConsumerProcs starts n consumer processes in role, with env (the
// adapter's own variables) added to their environment besides envSchema.
func (s *scenario) startConsumerProcs(role string, env []string, n int) *consumerProcs {
	c := &consumerProcs{
		s: s, fx: newEffects(s.t, s.schema, 2), skipped: map[uuid.UUID]int{},
		role: role, env: append(env, envSchema+"="+s.schema),
	}
	for range n {
		c.procs = append(c.procs, c.start())
	}
	s.consumer = c
	return c
}

// consumerProc is one of the consumer processes.
type consumerProc struct {
	*child
	applied int // deliveries it applied, as told; guarded by consumerProcs.mu
}

func (c *consumerProcs) start() *consumerProc {
	p := &consumerProc{}
	p.child = startChild(c.s.t, c.role, c.env, &lineWriter{fn: func(line string) { c.event(p, line) }})
	return p
}

// event records a line of p's output.
func (c *consumerProcs) event(p *consumerProc, line string) {
	what, raw, _ := strings.Cut(line, " ")
	id, err := uuid.Parse(raw)
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case err != nil:
		c.s.t.Errorf("%s: a consumer process wrote %q", c.s.name, line)
	case what == evApplied:
		c.applied++
		p.applied++
	case what == evDying:
		c.applied++
		p.applied++
		c.dying = append(c.dying, id)
	case what == evSkipped:
		c.skipped[id]++
	}
}

// appliedSoFar counts the deliveries the processes applied so far.
func (c *consumerProcs) appliedSoFar() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.applied
}

// kill ends process i with SIGKILL and starts another in its place. With
// afterCommit, the process kills itself right after an inbox commit, before
// the acknowledgement; else the test kills it at once.
func (c *consumerProcs) kill(i int, afterCommit bool) {
	t := c.s.t
	p := c.procs[i]
	if p.exited() {
		t.Fatalf("%s: consumer process %d exited by itself", c.s.name, i)
	}
	if afterCommit {
		// A process that has applied a message has set up its SIGUSR1
		// handler; before that, the signal's default action would kill it.
		waitFor(t, time.Minute, "the consumer process to apply a message", func() bool {
			c.mu.Lock()
			defer c.mu.Unlock()
			return p.applied > 0
		})
		c.mu.Lock()
		before := len(c.dying)
		c.mu.Unlock()
		p.signal(syscall.SIGUSR1)
		if !p.wait(time.Minute) {
			t.Fatalf("%s: armed consumer process %d did not kill itself within a minute", c.s.name, i)
		}
		// Its output has been read by now: Wait returns after that.
		c.mu.Lock()
		died := len(c.dying) > before
		c.mu.Unlock()
		if !died {
			t.Fatalf("%s: armed consumer process %d ended without dying after a commit", c.s.name, i)
		}
	} else {
		p.kill()
	}
	c.kills++
	c.procs[i] = c.start()
}

// killAlternately kills a random process kills times while the processes
// apply total messages, alternately at once (after a random pause of up to
// 200ms) and right after a commit (kill). Each kill waits for a fortieth of
// total to be applied: the kills are over by a quarter of the run, with
// messages still coming.
func (c *consumerProcs) killAlternately(total, kills int) {
	for k := range kills {
		before := c.appliedSoFar()
		waitFor(c.s.t, time.Minute, "the consumers to apply messages", func() bool { return c.appliedSoFar() >= before+total/(4*kills) })
		i := rand.IntN(len(c.procs))
		if k%2 == 1 {
			c.kill(i, true)
			continue
		}
		time.Sleep(time.Duration(rand.IntN(200)) * time.Millisecond)
		c.kill(i, false)
	}
}

// label names the adapter by its role: "nats 2 procs".
func (c *consumerProcs) label() string {
	return fmt.Sprintf("%s %d procs", strings.TrimSuffix(c.role, "-consumer"), len(c.procs))
}

func (c *consumerProcs) settle(delivered map[uuid.UUID]bool) int {
	t := c.s.t
	start := time.Now()
	// Every delivered message applied, and every message whose process died
	// between the commit and the ack delivered again (after the ack wait)
	// and skipped. Whether that happens or not, what follows names what is
	// missing.
	redelivered := func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		for _, id := range c.dying {
			if c.skipped[id] == 0 {
				return false
			}
		}
		return true
	}
	waitUntil(settleTimeout, func() bool { return c.fx.applied() >= len(delivered) && redelivered() })
	waited := time.Since(start)
	for i, p := range c.procs {
		switch {
		case p.exited():
			t.Errorf("%s: consumer process %d exited by itself", c.s.name, i)
		case !p.stopWithin(20 * time.Second):
			t.Errorf("%s: consumer process %d did not exit within 20s of SIGINT", c.s.name, i)
		}
	}
	c.fx.verify(c.s, delivered)

	c.mu.Lock()
	defer c.mu.Unlock()
	skipped, dyingSkipped := 0, 0
	for _, n := range c.skipped {
		skipped += n
	}
	for _, id := range c.dying {
		if c.skipped[id] == 0 {
			t.Errorf("%s: message %s: its consumer process died between the inbox's commit and the ack, and no redelivery of it was skipped", c.s.name, id)
		}
		dyingSkipped += c.skipped[id]
	}
	if len(c.dying) == 0 {
		t.Errorf("%s: no consumer process died between a commit and its ack", c.s.name)
	}
	t.Logf("%s: %d consumer processes killed, %d messages applied by a process that then died before the ack; "+
		"%d deliveries applied, %d skipped by the inbox (%d of them redeliveries of those messages); the check waited %v for them",
		c.s.name, c.kills, len(c.dying), c.applied, skipped, dyingSkipped, waited.Round(time.Millisecond))
	return skipped
}

// TestFaultConsumerKilledTenTimes kills consumer processes (outboxnats.Consume
// with an inbox on PostgreSQL, two at a time) ten times while a relay
// publishes to JetStream, starting each again: five times at a random
// moment, five times right after the inbox's transaction committed and
// before the acknowledgement. Every message must be applied once, and each
// message whose consumer died after the commit must come again and be
// skipped.
func TestFaultConsumerKilledTenTimes(t *testing.T) {
	const total, kills, procs = 5000, 10, 2
	srv := natstest.Start(t)
	s := newScenario(t, "consumer SIGKILL x10 (5 after commit), 5k msgs, NATS")
	stream := s.toNATS(srv)
	// Three writers pausing after each transaction of ten: about 500
	// messages a second, so that the kills, spaced by the consumers'
	// progress, fall while messages flow.
	s.writePause = 50 * time.Millisecond
	c := s.startConsumerProcs(natsConsumerRole, []string{envNATSURL + "=" + srv.URL(), envStream + "=" + stream}, procs)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	writeDone := make(chan error, 1)
	go func() { writeDone <- s.write(ctx, total, 3) }()
	relay := s.startRelay(s.url, append([]string{"--lease", "10s"}, brokerRelayFlags...)...)
	c.killAlternately(total, kills)
	if err := <-writeDone; err != nil {
		t.Fatal(err)
	}
	s.drain(2 * time.Minute)
	relay.Stop()
	// Nothing happens to the relay: a duplicate in the stream would be one
	// that no fault explains.
	s.check(kills, 0)
}
