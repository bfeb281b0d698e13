package outboxnats

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/consume"
)

// Defaults of ConsumerConfig.
const (
	MaxDeliverDefault  = 5
	AckWaitDefault     = 30 * time.Second
	ConcurrencyDefault = 4
)

// ConsumerConfig configures Consume. Stream and Durable are required.
type ConsumerConfig struct {
	// Stream is the JetStream stream to read.
	Stream string
	// Durable names the consumer on the server; the server remembers what
	// it acknowledged, so a restarted process goes on where the last one
	// stopped. Keep it across releases.
	// It is also the consumer's identity in its database: Parked keeps
	// its messages under it, and outbox.ApplyOnce names its inbox after
	// it. Keep it the same in every process of the consumer (not a
	// per-process name) and across releases, and different from every
	// outboxevents handler's name.
	Durable string
	// FilterSubject reads only the subjects it matches. Default: all.
	FilterSubject string
	// MaxDeliver is how many attempts a message gets before it is parked
	// (logged at ERROR level with its id and error, and written to Parked
	// if set, else terminated on the server), counting redeliveries after
	// a crash. Default
	// MaxDeliverDefault.
	// A failure marked outbox.Unavailable (or held back, as
	// outboxevents.Dispatcher.Deliver holds an event whose handler's
	// destination is down) counts no attempt: the message waits in place,
	// its key with it, for as long as the outage lasts (in this process:
	// a redelivery after a reconnection or a restart is counted by the
	// broker where it counts deliveries).
	MaxDeliver int
	// AckWait is how long the server waits for an acknowledgement before it
	// delivers the message again (after a crash, say). While a handler
	// retries, the consumer tells the server it is still working. Default
	// AckWaitDefault.
	AckWait time.Duration
	// Concurrency is how many messages are handled at once. Messages of one
	// key are handled one at a time, in stream order; different keys
	// concurrently. Default ConcurrencyDefault.
	Concurrency int
	// BackoffBase and BackoffMax bound the pause between two attempts of a
	// failing message (doubling, jittered). Defaults 100ms and 5s, or half
	// of AckWait if less; BackoffMax must be under AckWait.
	BackoffBase, BackoffMax time.Duration
	// Logger receives parked messages and failures. Default slog.Default().
	Logger *slog.Logger
	// Observer, if set, is told of every attempt to handle a message
	// (outboxotel.Observer continues the message's trace there).
	Observer outbox.ConsumeObserver
	// Parked, if set, keeps parked messages in the consumer's database
	// (e.g. the inbox table: outboxpg.InboxTable, outboxsqlite.InboxTable)
	// instead of terminating them on the server: a message is written
	// there, then acknowledged, and an operator lists and retries it with
	// `outbox inbox parked`, as with any broker. Consume then also polls
	// the store for requested retries and hands them to fn again. Parked
	// messages are kept under Durable.
	Parked outbox.ParkStore
	// Readiness, if set, tells whether Consume consumes: nil while it is
	// connected and reading the durable consumer, else why not (creating
	// it, the connection lost, the stream missing, JetStream disabled,
	// stopped). Serve its Ready as the consumer's readiness check. One per
	// Consume call.
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
	case c.Stream == "":
		return c, &outbox.ConfigError{Field: "outboxnats.ConsumerConfig.Stream", Value: `""`, Fix: "name the stream the relay publishes to"}
	case c.Durable == "" || strings.ContainsAny(c.Durable, ". *>"):
		return c, &outbox.ConfigError{Field: "outboxnats.ConsumerConfig.Durable", Value: fmt.Sprintf("%q", c.Durable), Fix: "name the consumer (no dots, spaces or wildcards), e.g. \"billing\"; keep it across releases"}
	case c.MaxDeliver < 0, c.Concurrency < 0, c.AckWait < 0:
		return c, &outbox.ConfigError{Field: "outboxnats.ConsumerConfig", Value: fmt.Sprintf("MaxDeliver %d, Concurrency %d, AckWait %v", c.MaxDeliver, c.Concurrency, c.AckWait), Fix: "use positive values, or 0 for the defaults"}
	}
	if c.MaxDeliver == 0 {
		c.MaxDeliver = MaxDeliverDefault
	}
	if c.AckWait == 0 {
		c.AckWait = AckWaitDefault
	}
	if c.Concurrency == 0 {
		c.Concurrency = ConcurrencyDefault
	}
	if c.BackoffBase <= 0 {
		c.BackoffBase = 100 * time.Millisecond
	}
	if c.BackoffMax <= 0 {
		c.BackoffMax = min(5*time.Second, c.AckWait/2)
	}
	if c.BackoffMax >= c.AckWait {
		// The server is told a message is still worked on once per pause:
		// a longer pause than AckWait makes it deliver the message again.
		return c, &outbox.ConfigError{Field: "outboxnats.ConsumerConfig.BackoffMax", Value: fmt.Sprintf("%v (AckWait %v)", c.BackoffMax, c.AckWait),
			Fix: "keep BackoffMax under AckWait, e.g. at most half of it"}
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c, nil
}

// FromMsg returns the outbox message a JetStream message carries, as the
// Publisher sent it: id, topic and key from its headers, the payload, and
// the other headers.
func FromMsg(msg jetstream.Msg) (outbox.Message, error) {
	h := msg.Headers()
	id, err := uuid.Parse(h.Get(HeaderMsgID))
	if err != nil {
		return outbox.Message{}, fmt.Errorf("outboxnats: message on %s has no outbox id in %s (%q): %w", msg.Subject(), HeaderMsgID, h.Get(HeaderMsgID), err)
	}
	m := outbox.Message{ID: id, Topic: h.Get(HeaderTopic), Key: h.Get(HeaderKey), Payload: msg.Data(), Headers: map[string]string{}}
	if m.Topic == "" {
		m.Topic = msg.Subject()
	}
	for name, values := range h {
		if name != HeaderMsgID && name != HeaderTopic && name != HeaderKey && len(values) > 0 {
			m.Headers[name] = values[0]
		}
	}
	return m, nil
}

// Consume reads cfg.Stream through the durable pull consumer cfg.Durable and
// hands each message to fn, until ctx ends; then it returns nil. A message
// is acknowledged only after fn returned nil: with fn = inbox.Apply(apply)
// (outbox.Inbox) that is after the consumer's transaction committed, so a
// crash between the commit and the acknowledgement means a redelivery that
// the inbox skips. A failing message
// is retried in place (its key waits, so key order holds) with a backoff,
// and parked after cfg.MaxDeliver attempts: terminated on the server, or
// written to cfg.Parked.
//
// Consume creates (or updates) the durable consumer, so it owns it: if the
// consumer is deleted on the server, Consume creates it again and goes on
// (the stream's stored messages then come again from the first; the inbox
// skips those already applied). A missing stream is logged at ERROR level
// (at most once per ConfigErrorLogInterval) and waited for; the return to
// normal is logged at INFO level. Consume returns an error only when it
// cannot go on: the connection is closed for good (the error matches
// nats.ErrConnectionClosed: connect again and call Consume again), or the
// server refuses the consumer's configuration (a *jetstream.APIError with
// code 400, such as a durable of that name made with another deliver
// policy). See docs/consumers.md for the rule every consumer adapter
// follows.
func Consume(ctx context.Context, js jetstream.JetStream, cfg ConsumerConfig, fn func(ctx context.Context, m outbox.Message) error) error {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return err
	}
	lanesCfg := consume.Config{
		Consumer: cfg.Durable, Concurrency: cfg.Concurrency, MaxDeliver: cfg.MaxDeliver,
		BackoffBase: cfg.BackoffBase, BackoffMax: cfg.BackoffMax, Logger: cfg.Logger, Observer: cfg.Observer, Parked: cfg.Parked,
		SkipParkedInKeyOrder: cfg.SkipParkedInKeyOrder,
		// The server sends at most MaxAckPending unacknowledged messages
		// (consumer_run.go): the lanes hold what it sent.
		MaxHeld: cfg.Concurrency * 32,
	}
	// When Consume gives up (a connection closed for good), the messages
	// queued in the lanes could not be acknowledged anyway: stop them.
	ctx, cancel := context.WithCancel(ctx)
	lanes := consume.Start(ctx, lanesCfg, fn)
	defer lanes.Close()
	stopRetrying := consume.StartRetrying(ctx, lanesCfg, fn)
	defer stopRetrying()
	defer cancel() // before the lanes close, so that they do not wait for handlers
	r := newReader(js, cfg)
	r.ready.Start("outboxnats", cfg.Durable, fmt.Errorf("creating durable consumer %s on stream %s", cfg.Durable, cfg.Stream))
	stopWatching := r.watchConnection()
	defer stopWatching()
	err = r.run(ctx, lanes)
	r.ready.Stop(err)
	return err
}

// delivery is a JetStream message for the consumer lanes.
type delivery struct {
	msg jetstream.Msg
	m   outbox.Message
}

func (d *delivery) Message() outbox.Message { return d.m }

func (d *delivery) Attempt() int {
	if md, err := d.msg.Metadata(); err == nil {
		return int(md.NumDelivered) // earlier deliveries were attempts too
	}
	return 1
}

func (d *delivery) Ack(ctx context.Context) error { return d.msg.DoubleAck(ctx) }
func (d *delivery) Park(_ context.Context, attempts int, cause error) error {
	return d.msg.TermWithReason(consume.Reason(attempts, cause))
}
func (d *delivery) Working() { _ = d.msg.InProgress() }
