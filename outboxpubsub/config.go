package outboxpubsub

import (
	"fmt"
	"log/slog"
	"time"

	"cloud.google.com/go/pubsub/v2"

	"github.com/go-outbox/outbox"
)

// Defaults of Config.
const (
	// ThrottleDelayDefault is how long the relay waits before trying a
	// message again after Pub/Sub refused it for a passing reason (quota or
	// flow control exceeded, RESOURCE_EXHAUSTED): long enough for a quota
	// window to move on, short next to an outage.
	ThrottleDelayDefault = time.Second
	// TimeoutDefault bounds one batch: the client's bundles are sent within
	// it (PublishSettings.Timeout), and Publish waits no longer for their
	// results. A publish takes a round trip plus the bundling delay; the
	// margin covers a slow region.
	TimeoutDefault = 10 * time.Second
)

// Config configures a Publisher. The zero value publishes each message to
// the Pub/Sub topic named by its outbox topic, unordered, with the client's
// default batching and every default.
type Config struct {
	// Logger receives, at ERROR level, the configuration errors an operator
	// must fix (a missing topic, a denied permission) with the fix, at most
	// once per ConfigErrorLogInterval each. Nil means slog.Default().
	Logger *slog.Logger
	// OrderingKeys, if true, publishes each message with its outbox key as
	// the Pub/Sub ordering key (EnableMessageOrdering on every topic's
	// publisher), so that subscriptions with message ordering enabled
	// deliver a key's messages in order. Messages without a key are
	// unordered. Pub/Sub keeps the order of a key only within one region:
	// publish to a regional endpoint (option.WithEndpoint) if the relay may
	// run in several. The client keeps a key's order per Pub/Sub topic:
	// with Topic set, ForRelay gives the relay a KeyOrderKeeper; with
	// TopicPrefix or TopicFor, which may spread a key over several topics,
	// the relay hands a key's messages over in waves instead.
	OrderingKeys bool
	// PublishSettings, if not nil, replaces pubsub.DefaultPublishSettings
	// for every topic's publisher (bundle size and delay, flow control,
	// compression); its Timeout is replaced by Config.Timeout. Hedging and
	// FlowControlSignalError cannot be combined with OrderingKeys.
	PublishSettings *pubsub.PublishSettings
	// ThrottleDelay is the shortest wait before a message Pub/Sub refused
	// for a passing reason is tried again (outbox.RetryAfter). Zero means
	// ThrottleDelayDefault.
	ThrottleDelay time.Duration
	// Timeout bounds one batch, whatever the context allows: bundles are
	// sent within it, and messages without a result by then are retryable.
	// Zero means TimeoutDefault.
	Timeout time.Duration
	// Topic, if set, is the one Pub/Sub topic every message is published
	// to: a topic id of the client's project ("orders") or a full name
	// ("projects/p/topics/orders"). Set at most one of Topic, TopicFor and
	// TopicPrefix.
	Topic string
	// TopicFor maps a message to its Pub/Sub topic (an id or a full name).
	// A function returning "" or an invalid topic id makes that message
	// fail permanently.
	TopicFor func(m outbox.Message) string
	// TopicPrefix is put before every outbox topic, verbatim: with "events-"
	// the topic "orders.created" goes to the Pub/Sub topic
	// "events-orders.created".
	TopicPrefix string
}

// Validate reports the first invalid field of c as a *outbox.ConfigError, or
// nil. New and Open validate too.
func (c Config) Validate() error {
	_, err := c.withDefaults()
	return err
}

func (c Config) withDefaults() (Config, error) {
	bad := func(field string, value any, fix string) (Config, error) {
		return c, &outbox.ConfigError{Field: "outboxpubsub.Config." + field, Value: value, Fix: fix}
	}
	set := 0
	for _, s := range []bool{c.Topic != "", c.TopicFor != nil, c.TopicPrefix != ""} {
		if s {
			set++
		}
	}
	switch {
	case c.ThrottleDelay < 0:
		return bad("ThrottleDelay", c.ThrottleDelay, "use a positive duration, or 0 for the default "+ThrottleDelayDefault.String())
	case c.Timeout < 0:
		return bad("Timeout", c.Timeout, "use a positive duration, or 0 for the default "+TimeoutDefault.String())
	case set > 1:
		return bad("Topic", fmt.Sprintf("Topic %q, TopicPrefix %q, TopicFor set: %v", c.Topic, c.TopicPrefix, c.TopicFor != nil),
			"set at most one of Topic (one topic for all), TopicPrefix (prefix + topic) and TopicFor (a function)")
	case c.Topic != "" && topicIDError(topicID(c.Topic)) != nil:
		return bad("Topic", c.Topic, topicIDError(topicID(c.Topic)).Error())
	case c.OrderingKeys && c.PublishSettings != nil && c.PublishSettings.HedgingSettings != nil:
		return bad("PublishSettings.HedgingSettings", "set", "the client cannot hedge ordered publishes: drop HedgingSettings or OrderingKeys")
	case c.OrderingKeys && c.PublishSettings != nil && c.PublishSettings.FlowControlSettings.LimitExceededBehavior == pubsub.FlowControlSignalError:
		// A refusal pauses the key in the client: with a full window every
		// key stalls behind messages that were never sent, one attempt at
		// a time.
		return bad("PublishSettings.FlowControlSettings.LimitExceededBehavior", "FlowControlSignalError",
			"with OrderingKeys use FlowControlBlock (the default) or FlowControlIgnore: a refused message pauses its key and holds back the rest of it; or drop OrderingKeys")
	}
	if c.ThrottleDelay == 0 {
		c.ThrottleDelay = ThrottleDelayDefault
	}
	if c.Timeout == 0 {
		c.Timeout = TimeoutDefault
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c, nil
}
