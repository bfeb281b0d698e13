package outboxpubsub

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"github.com/google/uuid"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/consume"
)

// Defaults of ConsumerConfig.
const (
	MaxDeliverDefault  = 5
	ConcurrencyDefault = 4
	// MaxOutstandingPerWorker times Concurrency is the client's
	// ReceiveSettings.MaxOutstandingMessages and how many messages the
	// lanes hold: the messages queued behind a failing key, and a margin
	// for the others. The client counts a message out when the callback
	// returns, not when it is acknowledged, so it may hand over more while
	// the lanes are full: the callback then waits in Submit, and the
	// client's leases keep those messages meanwhile.
	MaxOutstandingPerWorker = 32
)

// Attributes the consumer adds to a message it parks on ConsumerConfig.ParkTopic,
// beside the message's own. They carry the outbox- prefix so that they do
// not take the place of a header.
const (
	// AttrParkedReason says why: the attempts and the last error.
	AttrParkedReason = "outbox-parked-reason"
	// AttrParkedFrom is the subscription and the Pub/Sub message id the
	// message came from.
	AttrParkedFrom = "outbox-parked-from"
	// AttrParkedBy is the consumer (ConsumerConfig.Name) that gave up on it.
	AttrParkedBy = "outbox-parked-by"
)

// ConsumerConfig configures Consume. Subscription is required.
type ConsumerConfig struct {
	// BackoffBase and BackoffMax bound the pause between two attempts of a
	// failing message (doubling, jittered), and between two tries to
	// receive again after the subscription failed. Defaults 100ms and 5s.
	// The client extends a message's ack deadline while it waits in the
	// process, for an hour at most (ReceiveSettings.MaxExtension): a
	// message that waits longer is delivered again, and the inbox skips it
	// if it was applied meanwhile.
	BackoffBase, BackoffMax time.Duration
	// Concurrency is how many messages are handled at once. Messages of one
	// key are handled one at a time, in the order they arrive; different
	// keys concurrently. Default ConcurrencyDefault.
	Concurrency int
	// Logger receives parked messages and failures. Default slog.Default().
	Logger *slog.Logger
	// MaxDeliver is how many attempts a message gets before it is parked
	// (logged at ERROR level with its id and error, and written to Parked
	// if set, else published to ParkTopic). On a subscription with a
	// dead-letter policy Pub/Sub counts the deliveries
	// (Message.DeliveryAttempt), so deliveries to a process that died count
	// too; without one the attempts are counted in this process only, from
	// 1 at each delivery. Default MaxDeliverDefault.
	// A failure marked outbox.Unavailable (or held back, as
	// outboxevents.Dispatcher.Deliver holds an event whose handler's
	// destination is down) counts no attempt: the message waits in place,
	// its key with it, for as long as the outage lasts.
	MaxDeliver int
	// Name is the consumer's identity in its database: Parked keeps its
	// messages under it, and outbox.ApplyOnce names its inbox after it.
	// Keep it the same in every process of the consumer and across
	// releases, and different from every outboxevents handler's name.
	// Default: the subscription's id.
	Name string
	// Observer, if set, is told of every attempt to handle a message
	// (outboxotel.Observer continues the message's trace there).
	Observer outbox.ConsumeObserver
	// Parked, if set, keeps parked messages in the consumer's database
	// (e.g. the inbox table: outboxpg.InboxTable) instead of ParkTopic: a
	// message is written there, then acknowledged, and an operator lists
	// and retries it with `outbox inbox parked`, as with any broker.
	// Consume then also polls the store for requested retries and hands
	// them to fn again. Parked messages are kept under Name.
	Parked outbox.ParkStore
	// ParkTopic is the Pub/Sub topic (an id of the client's project or a
	// full name) where parked messages go when Parked is not set, and
	// messages that are no outbox message (no outbox-message-id attribute)
	// in any case: the message is published there with its data, its
	// attributes and the AttrParked* attributes, and acknowledged once
	// Pub/Sub stored the copy. Create the topic, and a subscription on it
	// to keep what is parked. Publishing to it is retried with the backoff
	// while it fails (the message's key waits meanwhile).
	//
	// Empty: on a subscription with a dead-letter policy a parked message
	// is not acknowledged (nacked), so that Pub/Sub moves it to the
	// dead-letter topic after its maximum delivery attempts; on one without,
	// it is handed back too, with an ERROR log naming it, and comes again
	// until it has a place: never dropped. Set ParkTopic (or Parked, and a
	// dead-letter policy for messages that are no outbox message).
	ParkTopic string
	// Readiness, if set, tells whether Consume consumes: nil while it
	// receives from the subscription, else why not (checking it, the
	// subscription missing, credentials or permission refused, Pub/Sub
	// unreachable, receiving stopped and starting again, stopped). One per
	// Consume call.
	Readiness *Readiness
	// SkipParkedInKeyOrder applies the later messages of a key that has a
	// message in Parked as they come. By default (false) they are parked
	// too, as waiting behind it, and applied in order once it is retried
	// or discarded (`outbox inbox parked`), so that key order holds.
	SkipParkedInKeyOrder bool
	// Subscription is the Pub/Sub subscription to receive from: an id of
	// the client's project ("billing") or a full name
	// ("projects/p/subscriptions/billing"). Consume creates none: the
	// subscription is the deployment's, made with message ordering enabled
	// for key order.
	Subscription string
}

func (c ConsumerConfig) withDefaults() (ConsumerConfig, error) {
	bad := func(field string, value any, fix string) (ConsumerConfig, error) {
		return c, &outbox.ConfigError{Field: "outboxpubsub.ConsumerConfig." + field, Value: fmt.Sprint(value), Fix: fix}
	}
	switch {
	case c.Subscription == "" || strings.Count(c.Subscription, "/") != 0 && strings.Count(c.Subscription, "/") != 3:
		return bad("Subscription", fmt.Sprintf("%q", c.Subscription), `name the subscription: its id ("billing") or its full name ("projects/PROJECT/subscriptions/billing")`)
	case c.ParkTopic != "" && topicIDError(topicID(c.ParkTopic)) != nil:
		return bad("ParkTopic", c.ParkTopic, topicIDError(topicID(c.ParkTopic)).Error())
	}
	for _, f := range []struct {
		name     string
		negative bool
		value    any
	}{
		{"MaxDeliver", c.MaxDeliver < 0, c.MaxDeliver},
		{"Concurrency", c.Concurrency < 0, c.Concurrency},
		{"BackoffBase", c.BackoffBase < 0, c.BackoffBase},
		{"BackoffMax", c.BackoffMax < 0, c.BackoffMax},
	} {
		if f.negative {
			return bad(f.name, f.value, "use a positive value, or 0 for the default")
		}
	}
	if c.Name == "" {
		c.Name = topicID(c.Subscription)
	}
	if c.MaxDeliver == 0 {
		c.MaxDeliver = MaxDeliverDefault
	}
	if c.Concurrency == 0 {
		c.Concurrency = ConcurrencyDefault
	}
	if c.BackoffBase == 0 {
		c.BackoffBase = 100 * time.Millisecond
	}
	if c.BackoffMax == 0 {
		c.BackoffMax = max(5*time.Second, c.BackoffBase)
	}
	if c.BackoffMax < c.BackoffBase {
		return bad("BackoffMax", fmt.Sprintf("%v (BackoffBase %v)", c.BackoffMax, c.BackoffBase), "make BackoffMax at least BackoffBase")
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c, nil
}

// FromMessage returns the outbox message a Pub/Sub message carries, as the
// Publisher published it: id, topic and key from their attributes (the key
// from the ordering key when it has no outbox-key attribute), the data as
// payload, and every other attribute as a header, but those the client
// library adds (googclient_*).
func FromMessage(msg *pubsub.Message) (outbox.Message, error) {
	id, err := uuid.Parse(msg.Attributes[AttrID])
	if err != nil {
		return outbox.Message{}, fmt.Errorf("outboxpubsub: Pub/Sub message %s has no outbox id in its %q attribute (%q): %w", msg.ID, AttrID, msg.Attributes[AttrID], err)
	}
	m := outbox.Message{ID: id, Topic: msg.Attributes[AttrTopic], Key: msg.Attributes[AttrKey], Payload: msg.Data, Headers: map[string]string{}}
	if _, ok := msg.Attributes[AttrKey]; !ok {
		m.Key = msg.OrderingKey
	}
	for name, v := range msg.Attributes {
		if name != AttrID && name != AttrTopic && name != AttrKey && !strings.HasPrefix(name, "googclient_") {
			m.Headers[name] = v
		}
	}
	return m, nil
}

// Consume receives from cfg.Subscription and hands each message to fn,
// until ctx ends; then it returns nil, having handed back (nacked) what it
// held, so that Pub/Sub delivers it again at once. A message is
// acknowledged only after fn returned nil (on a subscription with
// exactly-once delivery, Consume waits for Pub/Sub's confirmation of the
// acknowledgement): with fn = inbox.Apply(apply) (outbox.Inbox) that is
// after the consumer's transaction committed, so a crash between the
// commit and the acknowledgement means a redelivery that the inbox skips.
// A failing message is retried in place (its key waits) with a backoff,
// and parked after cfg.MaxDeliver attempts: written to cfg.Parked, or
// published to cfg.ParkTopic (see ParkTopic for neither).
//
// Key order holds on a subscription with message ordering enabled, fed by
// a Publisher with Config.OrderingKeys: Pub/Sub delivers a key's messages
// in order, to one process at a time, and Consume handles them in that
// order. Without it Pub/Sub delivers in no order at all.
//
// Consume checks the subscription at start and each time receiving starts
// again (pubsub.subscriptions.get; credentials that may consume but not
// look skip the check). A missing subscription, refused credentials or
// permission are logged at ERROR level with the fix (at most once per
// ConfigErrorLogInterval) and tried again with the backoff; receiving
// stopped for another reason at WARN level; the return to normal at INFO
// level. The client retries an unreachable Pub/Sub by itself, without a
// word, within Receive, so while it receives Consume reads the
// subscription every few seconds: a read with no answer within a few
// seconds (or a check at start with none within ten) is logged at WARN
// level ("cannot reach Pub/Sub", once per outage and at most once per
// ConfigErrorLogInterval) and fails cfg.Readiness, and the next answer
// clears it and is logged at INFO level. Consume returns an error only
// when it cannot go on: the client is closed. See docs/consumers.md for the
// rule every consumer adapter follows.
func Consume(ctx context.Context, client *pubsub.Client, cfg ConsumerConfig, fn func(ctx context.Context, m outbox.Message) error) error {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return err
	}
	if client == nil {
		return &outbox.ConfigError{Field: "outboxpubsub.Consume client", Value: "nil", Fix: "pass a Pub/Sub client, e.g. pubsub.NewClient(ctx, project)"}
	}
	c := newConsumer(client, cfg, fn)
	defer c.close()
	stopRetrying := consume.StartRetrying(ctx, c.lanesCfg, fn)
	defer stopRetrying()
	c.ready.Start("outboxpubsub", cfg.Name, fmt.Errorf("checking subscription %s", c.subscription))
	err = c.run(ctx)
	c.ready.Stop(err)
	return err
}

// delivery is a Pub/Sub message for the consumer lanes.
type delivery struct {
	c   *consumer
	msg *pubsub.Message
	m   outbox.Message
}

func (d *delivery) Message() outbox.Message { return d.m }

// Attempt is Pub/Sub's count of deliveries on a subscription with a
// dead-letter policy, else 1.
func (d *delivery) Attempt() int {
	if d.msg.DeliveryAttempt != nil {
		return *d.msg.DeliveryAttempt
	}
	return 1
}

// Ack acknowledges the message. On a subscription with exactly-once
// delivery it waits for Pub/Sub's answer, so that a refused acknowledgement
// (the ack deadline passed) is reported; elsewhere the result is at once a
// success, and a lost acknowledgement means a redelivery the inbox skips.
func (d *delivery) Ack(ctx context.Context) error {
	_, err := d.msg.AckWithResult().Get(ctx)
	return err
}

// Park publishes the message to ParkTopic, then acknowledges it; without a
// ParkTopic it hands it back (for the subscription's dead-letter policy, or
// to come again): see ConsumerConfig.ParkTopic.
func (d *delivery) Park(ctx context.Context, attempts int, cause error) error {
	return d.c.park(ctx, d.msg, consume.Reason(attempts, cause))
}

// Working does nothing: the client extends the ack deadline of every
// message it handed over and that is not acknowledged yet, up to
// ReceiveSettings.MaxExtension.
func (d *delivery) Working() {}
