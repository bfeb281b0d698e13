package outboxaws

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/google/uuid"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/consume"
)

// Defaults of ConsumerSQSConfig.
const (
	ConcurrencyDefault = 4
	MaxDeliverDefault  = 5
	// VisibilityTimeoutDefault is SQS's own default: how long a received
	// message stays hidden from other receives before SQS delivers it
	// again, unless it is deleted or its visibility is extended.
	VisibilityTimeoutDefault = 30 * time.Second
	// WaitTimeDefault is the long poll of one ReceiveMessage, SQS's
	// longest: an idle consumer makes three requests a minute.
	WaitTimeDefault = 20 * time.Second
)

// Message attributes the consumer adds to a message it parks on
// ConsumerSQSConfig.ParkQueue, beside the message's own attributes, as far
// as SQS's 10 attributes leave room (in this order).
const (
	// AttrParkedReason says why: the attempts and the last error.
	AttrParkedReason = "outbox-parked-reason"
	// AttrParkedBy is the consumer (ConsumerSQSConfig.Name) that gave up.
	AttrParkedBy = "outbox-parked-by"
	// AttrParkedFrom is the queue and SQS message id it came from.
	AttrParkedFrom = "outbox-parked-from"
)

// ConsumerSQSConfig configures ConsumeSQS. Queue and Name are required, and
// ParkQueue unless Parked is set.
type ConsumerSQSConfig struct {
	// Queue is the queue to read: its URL or its name (looked up with
	// GetQueueUrl).
	Queue string
	// Name is the consumer's name, for the logs. It is also the consumer's
	// identity in its database: Parked keeps its messages under it, and
	// outbox.ApplyOnce names its inbox after it. Keep it the same in every
	// process of the consumer (not a per-process name) and across
	// releases, and different from every outboxevents handler's name.
	Name string
	// MaxDeliver is how many attempts a message gets before it is parked
	// (logged at ERROR level with its id and error, and written to Parked
	// if set, else sent to ParkQueue and deleted), counting SQS's earlier
	// deliveries (ApproximateReceiveCount: to processes that died, or
	// whose visibility ran out). Default MaxDeliverDefault. A failure
	// marked outbox.Unavailable (or held back) counts no attempt in this
	// process: the message waits in place, its key with it, for as long as
	// the outage lasts.
	MaxDeliver int
	// VisibilityTimeout is how long a message received stays hidden from
	// other receives: the time to wait for a consumer that died. While the
	// process holds a message (its handler runs or retries, or it waits
	// behind its key) the consumer extends it (ChangeMessageVisibility),
	// so SQS does not deliver it again meanwhile. Whole seconds, 1s to 12h.
	// Default VisibilityTimeoutDefault.
	VisibilityTimeout time.Duration
	// WaitTime is how long one ReceiveMessage waits for messages (long
	// polling), whole seconds, 1s to 20s. Default WaitTimeDefault.
	WaitTime time.Duration
	// Concurrency is how many messages are handled at once. Messages of one
	// key are handled one at a time, in the order received; different keys
	// concurrently. Default ConcurrencyDefault.
	Concurrency int
	// BackoffBase and BackoffMax bound the pause between two attempts of a
	// failing message (doubling, jittered) and between two receives after
	// a failure. Defaults 100ms and 5s, or half of VisibilityTimeout if
	// less; BackoffMax must be under VisibilityTimeout.
	BackoffBase, BackoffMax time.Duration
	// ParkQueue (a URL or a name) is where parked messages go when Parked
	// is not set, and messages that are no outbox message (no outbox-id
	// attribute) in any case: the message is sent there with its body and
	// attributes and the AttrParked* attributes, then deleted from Queue,
	// in that order. A FIFO park queue (".fifo") gets the message's group
	// and its SQS message id as deduplication id. Without ParkQueue (Parked
	// set), a message that is no outbox message is logged at ERROR level
	// and left in Queue, for the queue's redrive policy to move.
	ParkQueue string
	// Parked, if set, keeps parked messages in the consumer's database
	// (e.g. the inbox table: outboxpg.InboxTable) instead of ParkQueue: a
	// message is written there, then deleted from the queue, and an
	// operator lists and retries it with `outbox inbox parked`, as with any
	// broker. ConsumeSQS then also polls the store for requested retries
	// and hands them to fn again. Parked messages are kept under Name.
	Parked outbox.ParkStore
	// Readiness, if set, tells whether ConsumeSQS consumes: nil while its
	// receives succeed, else why not (looking the queue up, SQS
	// unreachable, the queue missing, access denied, stopped). One per
	// ConsumeSQS call.
	Readiness *Readiness
	// Logger receives parked messages and failures. Default slog.Default().
	Logger *slog.Logger
	// Observer, if set, is told of every attempt to handle a message
	// (outboxotel.Observer continues the message's trace there).
	Observer outbox.ConsumeObserver
	// SkipParkedInKeyOrder applies the later messages of a key that has a
	// message in Parked as they come. By default (false) they are parked
	// too, as waiting behind it, and applied in order once it is retried
	// or discarded (`outbox inbox parked`), so that key order holds.
	SkipParkedInKeyOrder bool
}

func (c ConsumerSQSConfig) withDefaults() (ConsumerSQSConfig, error) {
	bad := func(field string, value any, fix string) (ConsumerSQSConfig, error) {
		return c, &outbox.ConfigError{Field: "outboxaws.ConsumerSQSConfig." + field, Value: fmt.Sprint(value), Fix: fix}
	}
	switch {
	case c.Queue == "":
		return bad("Queue", `""`, "name the queue the relay publishes to (its URL or name)")
	case c.Name == "":
		return bad("Name", `""`, "name the consumer, e.g. \"billing\"; keep it across releases")
	case c.ParkQueue == "" && c.Parked == nil:
		return bad("ParkQueue", `""`, "name a queue for parked messages (e.g. the queue's name with \"-parked\"; create it), or set Parked to keep them in the consumer's database")
	case c.ParkQueue != "" && c.ParkQueue == c.Queue:
		return bad("ParkQueue", c.ParkQueue, "use another queue than Queue: a parked message would come back")
	}
	for _, f := range []struct {
		name     string
		negative bool
		value    any
	}{
		{"MaxDeliver", c.MaxDeliver < 0, c.MaxDeliver},
		{"VisibilityTimeout", c.VisibilityTimeout < 0, c.VisibilityTimeout},
		{"WaitTime", c.WaitTime < 0, c.WaitTime},
		{"Concurrency", c.Concurrency < 0, c.Concurrency},
		{"BackoffBase", c.BackoffBase < 0, c.BackoffBase},
		{"BackoffMax", c.BackoffMax < 0, c.BackoffMax},
	} {
		if f.negative {
			return bad(f.name, f.value, "use a positive value, or 0 for the default")
		}
	}
	switch {
	case c.VisibilityTimeout != 0 && (c.VisibilityTimeout%time.Second != 0 || c.VisibilityTimeout > 12*time.Hour):
		return bad("VisibilityTimeout", c.VisibilityTimeout, "use whole seconds from 1s to 12h (SQS's range), or 0 for the default 30s")
	case c.WaitTime != 0 && (c.WaitTime%time.Second != 0 || c.WaitTime > 20*time.Second):
		return bad("WaitTime", c.WaitTime, "use whole seconds from 1s to 20s (SQS's range), or 0 for the default 20s")
	}
	if c.MaxDeliver == 0 {
		c.MaxDeliver = MaxDeliverDefault
	}
	if c.VisibilityTimeout == 0 {
		c.VisibilityTimeout = VisibilityTimeoutDefault
	}
	if c.WaitTime == 0 {
		c.WaitTime = WaitTimeDefault
	}
	if c.Concurrency == 0 {
		c.Concurrency = ConcurrencyDefault
	}
	if c.BackoffBase == 0 {
		c.BackoffBase = 100 * time.Millisecond
	}
	if c.BackoffMax == 0 {
		c.BackoffMax = min(5*time.Second, c.VisibilityTimeout/2)
	}
	if c.BackoffMax >= c.VisibilityTimeout {
		// The visibility of a retrying message is extended once per pause:
		// a longer pause lets SQS deliver it again meanwhile.
		return bad("BackoffMax", fmt.Sprintf("%v (VisibilityTimeout %v)", c.BackoffMax, c.VisibilityTimeout),
			"keep BackoffMax under VisibilityTimeout, e.g. at most half of it")
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c, nil
}

// FromSQSMessage returns the outbox message an SQS message carries, as the
// SQSPublisher sent it, or as the SNSPublisher's topic delivered it to a
// subscribed queue, with raw message delivery or without (then the body is
// SNS's JSON envelope, and the payload and attributes are read from it):
// the id, topic and key from the attributes AttrID, AttrTopic and AttrKey,
// the payload from the body (decoded from base64 when AttrEncoding says
// EncodingBase64, empty when it says EncodingEmpty), and every other String
// attribute as a header. The message must have been received with its
// attributes (MessageAttributeNames "All"). It fails on a message without a
// valid outbox id or with a body that does not decode.
func FromSQSMessage(m types.Message) (outbox.Message, error) {
	attrs := make(map[string]string, len(m.MessageAttributes))
	for name, v := range m.MessageAttributes {
		if v.StringValue != nil {
			attrs[name] = *v.StringValue
		}
	}
	body, from := aws.ToString(m.Body), "SQS message "+aws.ToString(m.MessageId)
	if _, ok := attrs[AttrID]; !ok {
		if env, ok := snsEnvelope(body); ok {
			// The queue's own attributes go on top: those a consumer
			// added when it parked the message (AttrParkedReason...).
			sqsAttrs := attrs
			attrs, body, from = env.attributes(), env.Message, from+" (SNS message "+env.MessageID+")"
			maps.Copy(attrs, sqsAttrs)
		}
	}
	return fromAttributes(attrs, body, from)
}

// snsNotification is the JSON envelope SNS delivers to a queue subscribed
// without raw message delivery.
type snsNotification struct {
	Type              string
	MessageID         string `json:"MessageId"`
	TopicArn          string
	Message           string
	MessageAttributes map[string]struct{ Type, Value string }
}

// snsEnvelope reads body as SNS's envelope of a notification; ok is false
// for any other body, which is then read as the payload itself.
func snsEnvelope(body string) (env snsNotification, ok bool) {
	if !strings.HasPrefix(body, "{") || json.Unmarshal([]byte(body), &env) != nil {
		return env, false
	}
	return env, env.Type == "Notification" && env.TopicArn != ""
}

// attributes returns the envelope's String attributes, as SQS's own.
func (env snsNotification) attributes() map[string]string {
	attrs := make(map[string]string, len(env.MessageAttributes))
	for name, v := range env.MessageAttributes {
		if v.Type == "String" {
			attrs[name] = v.Value
		}
	}
	return attrs
}

// fromAttributes decodes an outbox message from its attributes and body;
// from names where it came from in errors.
func fromAttributes(attrs map[string]string, body, from string) (outbox.Message, error) {
	id, err := uuid.Parse(attrs[AttrID])
	if err != nil {
		return outbox.Message{}, fmt.Errorf("outboxaws: %s has no outbox id in its %q attribute (%q): %w", from, AttrID, attrs[AttrID], err)
	}
	out := outbox.Message{ID: id, Topic: attrs[AttrTopic], Key: attrs[AttrKey], Payload: []byte(body), Headers: map[string]string{}}
	switch enc := attrs[AttrEncoding]; enc {
	case "":
	case EncodingEmpty:
		out.Payload = nil
	case EncodingBase64:
		if out.Payload, err = base64.StdEncoding.DecodeString(body); err != nil {
			return outbox.Message{}, fmt.Errorf("outboxaws: %s (outbox id %s): the body is not base64 as %s says: %w", from, id, AttrEncoding, err)
		}
	default:
		return outbox.Message{}, fmt.Errorf("outboxaws: %s (outbox id %s): unknown %s %q", from, id, AttrEncoding, enc)
	}
	for name, v := range attrs {
		switch name {
		case AttrID, AttrTopic, AttrKey, AttrEncoding:
		default:
			out.Headers[name] = v
		}
	}
	return out, nil
}

// ConsumeSQS receives cfg.Queue's messages and hands each to fn, until ctx
// ends; then it returns nil. A message is deleted (DeleteMessage) only
// after fn returned nil: with fn = inbox.Apply(apply) (outbox.Inbox) that
// is after the consumer's transaction committed, so a crash between the
// commit and the deletion means a redelivery, after VisibilityTimeout, that
// the inbox skips. A failing message is retried in place (its key waits,
// so key order holds in the process) with a backoff, its visibility
// extended, and parked after cfg.MaxDeliver attempts: sent to
// cfg.ParkQueue, or written to cfg.Parked. A message that is not an outbox
// message is parked at once.
//
// ConsumeSQS receives with long polling (cfg.WaitTime), up to 10 messages
// at a time and no more than the process has room for, so that no message
// waits long unhandled. On a FIFO queue SQS gives a group's next messages
// only once the earlier ones are deleted or visible again; within the
// process each key's messages are handled in the order received.
//
// SQS unreachable, the queue missing or access denied: ConsumeSQS logs it
// (what an operator fixes at ERROR level with the fix, at most once per
// ConfigErrorLogInterval) and tries again with a backoff; the return to
// normal is logged at INFO level. It returns an error only for an invalid
// cfg (a *outbox.ConfigError) or a nil client: nothing else stops an SQS
// client for good. See docs/consumers.md for the rule every consumer
// adapter follows.
func ConsumeSQS(ctx context.Context, client *sqs.Client, cfg ConsumerSQSConfig, fn func(ctx context.Context, m outbox.Message) error) error {
	if client == nil {
		return &outbox.ConfigError{Field: "outboxaws.ConsumeSQS client", Value: "nil", Fix: "pass an SQS client, e.g. sqs.NewFromConfig(awsCfg)"}
	}
	cfg, err := cfg.withDefaults()
	if err != nil {
		return err
	}
	maxHeld := max(2*BatchMax, 4*cfg.Concurrency)
	lanesCfg := consume.Config{
		Consumer: cfg.Name, Concurrency: cfg.Concurrency, MaxDeliver: cfg.MaxDeliver,
		BackoffBase: cfg.BackoffBase, BackoffMax: cfg.BackoffMax, Logger: cfg.Logger, Observer: cfg.Observer, Parked: cfg.Parked,
		SkipParkedInKeyOrder: cfg.SkipParkedInKeyOrder,
		// A receive asks for at most what the lanes have room for
		// (receiver.free), so Submit never waits with a message whose
		// visibility nobody extends.
		MaxHeld: maxHeld,
	}
	ctx, cancel := context.WithCancel(ctx)
	lanes := consume.Start(ctx, lanesCfg, fn)
	defer lanes.Close()
	stopRetrying := consume.StartRetrying(ctx, lanesCfg, fn)
	defer stopRetrying()
	defer cancel() // before the lanes close, so that they do not wait for handlers
	r := newReceiver(ctx, client, cfg, maxHeld)
	r.ready.Start("outboxaws", cfg.Name, fmt.Errorf("looking up queue %s", cfg.Queue))
	stopHeartbeat := r.startHeartbeat(ctx)
	r.run(ctx, lanes)
	stopHeartbeat()
	r.ready.Stop(nil)
	return nil
}

// sqsDelivery is a received SQS message for the consumer lanes.
type sqsDelivery struct {
	r       *receiver
	raw     types.Message
	m       outbox.Message
	attempt int

	mu      sync.Mutex
	receipt string    // the latest receive's handle: SQS deletes by it
	until   time.Time // when its visibility ends, as far as this process extended it
}

func (d *sqsDelivery) Message() outbox.Message { return d.m }
func (d *sqsDelivery) Attempt() int            { return d.attempt }

func (d *sqsDelivery) handle() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.receipt
}

// Ack deletes the message. Whether it succeeds or not the lanes are done
// with it: a message whose deletion failed becomes visible again after
// VisibilityTimeout and comes again, for the inbox to skip.
func (d *sqsDelivery) Ack(ctx context.Context) error {
	defer d.r.done(d)
	return d.r.delete(ctx, d.handle())
}

// Park sends the message to ParkQueue, then deletes it: see receiver.park.
func (d *sqsDelivery) Park(ctx context.Context, attempts int, cause error) error {
	defer d.r.done(d)
	return d.r.park(ctx, d.raw, d.handle(), consume.Reason(attempts, cause))
}

// Working extends the message's visibility, so that SQS does not deliver
// it again while a handler retries it or it waits behind its key. The
// lanes call it in a worker: Consume's end cuts it short.
func (d *sqsDelivery) Working() {
	ctx, cancel := context.WithTimeout(d.r.ctx, 5*time.Second)
	defer cancel()
	d.r.extend(ctx, d)
}

// receiveCount is the ApproximateReceiveCount SQS gave m, at least 1.
func receiveCount(m types.Message) int {
	n, err := strconv.Atoi(m.Attributes[string(types.MessageSystemAttributeNameApproximateReceiveCount)])
	if err != nil || n < 1 {
		return 1
	}
	return n
}
