package outboxamqp

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/backoff"
	"github.com/go-outbox/outbox/internal/consume"
)

// Defaults of ConsumerConfig.
const (
	MaxDeliverDefault  = 5
	ConcurrencyDefault = 4
)

// ConsumerConfig configures Consume. Queue and Name are required.
type ConsumerConfig struct {
	// Queue is the queue to read.
	Queue string
	// Name is the consumer's name, for the broker (consumer tag prefix) and
	// the logs. It is also the consumer's identity in its database: Parked keeps
	// its messages under it, and outbox.ApplyOnce names its inbox after
	// it. Keep it the same in every process of the consumer (not a
	// per-process name) and across releases, and different from every
	// outboxevents handler's name.
	Name string
	// Concurrency is how many messages are handled at once. Messages of one
	// key are handled one at a time, in queue order; different keys
	// concurrently. Default ConcurrencyDefault.
	Concurrency int
	// Prefetch is how many unacknowledged messages the broker sends ahead
	// (basic.qos). Default 16 × Concurrency.
	Prefetch int
	// MaxDeliver is how many attempts a message gets before it is parked:
	// written to Parked if set, else rejected without requeue, so the
	// broker moves it to the queue's dead-letter exchange (declare the
	// queue with x-dead-letter-exchange to keep parked messages; without
	// one the broker drops them). Counts
	// deliveries before a crash where the queue says (quorum queues'
	// x-delivery-count). Default MaxDeliverDefault.
	// A failure marked outbox.Unavailable (or held back, as
	// outboxevents.Dispatcher.Deliver holds an event whose handler's
	// destination is down) counts no attempt: the message waits in place,
	// its key with it, for as long as the outage lasts (in this process:
	// a redelivery after a reconnection or a restart is counted by the
	// broker where it counts deliveries).
	MaxDeliver int
	// BackoffBase and BackoffMax bound the pause between two attempts of a
	// failing message (doubling, jittered) and between reconnections.
	// Defaults 100ms and 5s.
	BackoffBase, BackoffMax time.Duration
	// Logger receives parked messages, retries and reconnections. Default
	// slog.Default().
	Logger *slog.Logger
	// Observer, if set, is told of every attempt to handle a message
	// (outboxotel.Observer continues the message's trace there).
	Observer outbox.ConsumeObserver
	// Parked, if set, keeps parked messages in the consumer's database
	// (e.g. the inbox table: outboxpg.InboxTable, outboxsqlite.InboxTable)
	// instead of the dead-letter exchange: a message is written there,
	// then acknowledged, and an operator lists and retries it with `outbox
	// inbox parked`, as with any broker. Consume then also polls the store
	// for requested retries and hands them to fn again. Parked messages
	// are kept under Name.
	Parked outbox.ParkStore
	// Readiness, if set, tells whether Consume consumes: nil while it is
	// connected and reading the queue, else why not (connecting, the
	// connection lost, the queue missing or refused, stopped). Serve its
	// Ready as the consumer's readiness check. One per Consume call.
	Readiness *Readiness
	// SkipParkedInKeyOrder applies the later messages of a key that has a
	// message in Parked as they come. By default (false) they are parked
	// too, as waiting behind it, and applied in order once it is retried
	// or discarded (`outbox inbox parked`), so that key order holds. Each
	// message applied past a parked one is counted on it, and retrying it
	// then needs --force. Messages with no key are never held.
	SkipParkedInKeyOrder bool
}

func (c ConsumerConfig) withDefaults() (ConsumerConfig, error) {
	switch {
	case c.Queue == "":
		return c, &outbox.ConfigError{Field: "outboxamqp.ConsumerConfig.Queue", Value: `""`, Fix: "name the queue bound to the exchange the relay publishes to"}
	case c.Name == "":
		return c, &outbox.ConfigError{Field: "outboxamqp.ConsumerConfig.Name", Value: `""`, Fix: "name the consumer, e.g. \"billing\""}
	case c.MaxDeliver < 0, c.Concurrency < 0, c.Prefetch < 0:
		return c, &outbox.ConfigError{Field: "outboxamqp.ConsumerConfig", Value: fmt.Sprintf("MaxDeliver %d, Concurrency %d, Prefetch %d", c.MaxDeliver, c.Concurrency, c.Prefetch), Fix: "use positive values, or 0 for the defaults"}
	}
	if c.MaxDeliver == 0 {
		c.MaxDeliver = MaxDeliverDefault
	}
	if c.Concurrency == 0 {
		c.Concurrency = ConcurrencyDefault
	}
	if c.Prefetch == 0 {
		c.Prefetch = 16 * c.Concurrency
	}
	if c.BackoffBase <= 0 {
		c.BackoffBase = 100 * time.Millisecond
	}
	if c.BackoffMax <= 0 {
		c.BackoffMax = 5 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c, nil
}

// Consume reads cfg.Queue on the broker at url with manual acknowledgements
// and hands each message to fn, until ctx ends; then it returns nil. A
// message is acknowledged only after fn returned nil: with fn =
// inbox.Apply(apply) (outbox.Inbox), after the consumer's transaction
// committed, so a crash in between means a redelivery that the inbox skips.
// A failing message is retried in place (its key waits, so key order holds)
// and parked after cfg.MaxDeliver attempts: in the queue's dead-letter
// exchange, or in cfg.Parked.
//
// Consume does not give up while ctx lives: when the connection drops it
// connects again (with a backoff, logged at WARN level), and the broker
// requeues what was not acknowledged. What only an operator fixes (the queue
// missing or deleted, the credentials or virtual host refused, no permission
// to read the queue) is logged at ERROR level with the fix, at most once per
// ConfigErrorLogInterval, and tried again with the same backoff. Consuming
// again after a failure is logged at INFO level. See docs/consumers.md for
// the rule every consumer adapter follows.
func Consume(ctx context.Context, url string, cfg ConsumerConfig, fn func(ctx context.Context, m outbox.Message) error) error {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return err
	}
	uri, err := amqp.ParseURI(url)
	if err != nil {
		return &outbox.ConfigError{Field: "outboxamqp.Consume url", Value: "(not shown: it may hold a password)", Fix: "use amqp://user:password@host:5672/vhost"}
	}
	broker := redactURI(uri)
	log := cfg.Logger.With(slog.String("consumer", cfg.Name), slog.String("queue", cfg.Queue), slog.String("broker", broker))
	lanes := consume.Config{
		Consumer: cfg.Name, Concurrency: cfg.Concurrency, MaxDeliver: cfg.MaxDeliver,
		BackoffBase: cfg.BackoffBase, BackoffMax: cfg.BackoffMax, Logger: cfg.Logger, Observer: cfg.Observer, Parked: cfg.Parked,
		SkipParkedInKeyOrder: cfg.SkipParkedInKeyOrder,
		// The broker sends at most Prefetch unacknowledged messages: the
		// lanes hold what it sent, so a key that fails waits with its
		// queue and never stops the dispatch below that window.
		MaxHeld: cfg.Prefetch,
	}
	ready := cfg.Readiness.state()
	ready.Start("outboxamqp", cfg.Name, fmt.Errorf("connecting to %s", broker))
	defer ready.Stop(nil)
	stopRetrying := consume.StartRetrying(ctx, lanes, fn)
	defer stopRetrying()
	reconnect := backoff.NewJittered(cfg.BackoffBase, cfg.BackoffMax)
	failures := newFailureLog(log, cfg.Queue)
	for {
		err := consumeOnce(ctx, url, cfg, lanes, log, fn, func() {
			reconnect.Reset()
			failures.back()
			ready.Consuming()
		})
		if ctx.Err() != nil {
			return nil
		}
		ready.Failed(notConsuming(cfg.Queue, err))
		failures.failed(err, reconnect.Next())
		if !reconnect.Sleep(ctx, nil) {
			return nil
		}
	}
}

// delivery is an AMQP delivery for the consumer lanes.
type delivery struct {
	d amqp.Delivery
	m outbox.Message
}

func (d *delivery) Message() outbox.Message { return d.m }

// Attempt counts earlier deliveries where the queue says so (quorum queues),
// else 2 for a redelivery.
func (d *delivery) Attempt() int {
	if n, ok := d.d.Headers["x-delivery-count"].(int64); ok {
		return int(n) + 1
	}
	if d.d.Redelivered {
		return 2
	}
	return 1
}

func (d *delivery) Ack(context.Context) error              { return d.d.Ack(false) }
func (d *delivery) Park(context.Context, int, error) error { return d.d.Nack(false, false) }

// Working does nothing: RabbitMQ waits for an acknowledgement as long as
// the connection lives (up to its consumer_timeout, 30 minutes by default).
func (d *delivery) Working() {}
