package outboxkafka

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/loglimit"
)

// Record headers the publisher adds to every record, before the message's
// own headers. Message headers with these names (in any case) are dropped.
const (
	// HeaderID carries the message id (a UUID in text form). Consumers
	// deduplicate on it.
	HeaderID = "Outbox-Message-Id"
	// HeaderTopic carries the message topic, which differs from the Kafka
	// topic when Config.Topic or Config.TopicFunc route several message
	// topics into one Kafka topic.
	HeaderTopic = "Outbox-Topic"
)

// DialTimeoutDefault is how long Dial waits for a broker to answer when
// Config.DialTimeout is zero.
const DialTimeoutDefault = 10 * time.Second

// CloseTimeoutDefault is how long Close waits for buffered records to be
// acknowledged when Config.CloseTimeout is zero.
const CloseTimeoutDefault = 10 * time.Second

// MetadataMinAgeDefault is the shortest time between two metadata refreshes
// of the client of an Open or Dial publisher (franz-go's default is 5s). The client gives
// up on a topic that does not exist after a few refreshes, and refreshes
// after a leader change: a shorter age reports a missing topic in about 4s
// instead of 20s, and ends the stall of a batch after a broker failure
// sooner, for one cheap request per second at most.
const MetadataMinAgeDefault = time.Second

// PingTimeout bounds the ping that tells whether any broker answers: after a
// batch ran out of time, and before each batch while none answered.
const PingTimeout = 2 * time.Second

// MaxTopicLength is the longest Kafka topic name, in bytes.
const MaxTopicLength = 249

// ConfigErrorLogInterval is the shortest time between two ERROR logs of
// the same configuration error (a missing topic, a refused authorization)
// for the same topic: every batch to that topic fails until an operator
// fixes it, and one line a minute tells them without flooding the log.
const ConfigErrorLogInterval = time.Minute

// ErrClosed is returned, retryable, for messages published after Close.
var ErrClosed = outbox.ClosedError("outboxkafka: publisher closed")

// Config configures a Publisher. The zero value sends each message to the
// Kafka topic named like its message topic.
type Config struct {
	// DialTimeout bounds how long Dial waits for a seed broker to answer.
	// Zero means DialTimeoutDefault.
	DialTimeout time.Duration
	// CloseTimeout bounds how long Close waits for the records still
	// buffered to be acknowledged before it closes the client (publishers
	// made by Open or Dial only). Zero means CloseTimeoutDefault.
	CloseTimeout time.Duration
	// Logger receives, at ERROR level, the configuration errors an
	// operator must fix (a topic that does not exist, an authorization
	// the brokers refuse) with the fix, at most once per
	// ConfigErrorLogInterval for each topic. Nil means slog.Default().
	Logger *slog.Logger
	// Topic, if not empty, is the Kafka topic of every message. The message
	// topic still travels in HeaderTopic.
	Topic string
	// TopicFunc, if not nil, returns the Kafka topic of a message, for
	// routing rules that Topic cannot express. It must be safe for
	// concurrent use. A name Kafka cannot accept fails that message
	// permanently. Set Topic or TopicFunc, not both.
	TopicFunc func(m outbox.Message) string
}

func (c Config) withDefaults() (Config, error) {
	switch {
	case c.CloseTimeout < 0:
		return c, &outbox.ConfigError{Field: "outboxkafka.Config.CloseTimeout", Value: c.CloseTimeout, Fix: "use a positive duration, or zero for the default " + CloseTimeoutDefault.String()}
	case c.Topic != "" && c.TopicFunc != nil:
		return c, &outbox.ConfigError{Field: "outboxkafka.Config.Topic", Value: c.Topic, Fix: "set Topic or TopicFunc, not both"}
	case c.Topic != "":
		if err := ValidateTopic(c.Topic); err != nil {
			return c, &outbox.ConfigError{Field: "outboxkafka.Config.Topic", Value: fmt.Sprintf("%q", c.Topic), Fix: err.Error()}
		}
	}
	if c.DialTimeout < 0 {
		return c, &outbox.ConfigError{Field: "outboxkafka.Config.DialTimeout", Value: c.DialTimeout, Fix: "use a positive duration, or zero for the default " + DialTimeoutDefault.String()}
	}
	if c.CloseTimeout == 0 {
		c.CloseTimeout = CloseTimeoutDefault
	}
	if c.DialTimeout == 0 {
		c.DialTimeout = DialTimeoutDefault
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c, nil
}

// Publisher publishes outbox messages as Kafka records; see the package
// documentation. It is safe for concurrent use by several relay workers.
type Publisher struct {
	cfg    Config
	client *kgo.Client
	// maxBatchBytes is the client's batch limit per topic: a record larger
	// than it alone can never be sent.
	maxBatchBytes func(topic string) int32
	// owned says whether Close closes the client (Open, Dial) or leaves
	// it to the caller (New).
	owned bool
	// unreachable is set when a batch ran out of time and then no broker
	// answered a ping. While it is set, Publish pings before producing and
	// hands nothing to the client until a broker answers: the client keeps
	// records it could not send (they are not failed while no broker can
	// be dialed), so producing a batch again and again during an outage
	// would pile up copies that all reach Kafka once it is back.
	unreachable atomic.Bool
	// autoCreate says whether the client asks brokers to create missing
	// topics (kgo.AllowAutoTopicCreation), for the fix of a missing one.
	autoCreate bool
	// configLog spaces out the ERROR logs of configuration errors.
	configLog loglimit.Limiter

	// mu lets Close wait until no Publish is handing records to the
	// client, so none is handed over after the client is closed.
	mu     sync.RWMutex
	closed bool
}

// New returns a publisher that produces with client, which the caller keeps
// and closes after the publisher's Close. The client must keep the franz-go
// producer defaults this package relies on: acks from all in-sync replicas,
// idempotent writes, no transactional id; New returns a *outbox.ConfigError
// otherwise, as it does for an invalid cfg.
func New(client *kgo.Client, cfg Config) (*Publisher, error) {
	if client == nil {
		return nil, &outbox.ConfigError{Field: "outboxkafka.New client", Value: "nil", Fix: "pass a *kgo.Client, or use outboxkafka.Open"}
	}
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if acks, _ := client.OptValue(kgo.RequiredAcks).(kgo.Acks); acks != kgo.AllISRAcks() {
		return nil, &outbox.ConfigError{Field: "kgo.RequiredAcks", Value: "not all", Fix: "leave the default kgo.AllISRAcks(): with fewer acks a confirmed message can be lost when a broker fails"}
	}
	if disabled, _ := client.OptValue(kgo.DisableIdempotentWrite).(bool); disabled {
		return nil, &outbox.ConfigError{Field: "kgo.DisableIdempotentWrite", Value: true, Fix: "remove the option: the idempotent producer keeps its own retries from duplicating or reordering records"}
	}
	if id, _ := client.OptValue(kgo.TransactionalID).(string); id != "" {
		return nil, &outbox.ConfigError{Field: "kgo.TransactionalID", Value: id, Fix: "use a client without a transactional id: the publisher produces outside transactions"}
	}
	p := &Publisher{cfg: cfg, client: client, configLog: loglimit.Limiter{Interval: ConfigErrorLogInterval}}
	p.maxBatchBytes, _ = client.OptValue(kgo.ProducerBatchMaxBytesFn).(func(string) int32)
	p.autoCreate, _ = client.OptValue(kgo.AllowAutoTopicCreation).(bool)
	return p, nil
}

// Open returns a publisher with a client of its own for the seed brokers
// (host:port), built with kgo.SeedBrokers, kgo.ProducerLinger(0),
// kgo.MetadataMinAge(MetadataMinAgeDefault) and then opts (TLS, SASL, client
// id...), which may override them. Open does not connect: the client connects
// on first use and reconnects by itself, so a relay can start while Kafka is
// down. Close the publisher to close the client.
func Open(seeds []string, cfg Config, opts ...kgo.Opt) (*Publisher, error) {
	if len(seeds) == 0 {
		return nil, &outbox.ConfigError{Field: "outboxkafka.Open seeds", Value: "none", Fix: "give at least one broker address, e.g. localhost:9092"}
	}
	all := append([]kgo.Opt{kgo.SeedBrokers(seeds...), kgo.ProducerLinger(0), kgo.MetadataMinAge(MetadataMinAgeDefault)}, opts...)
	client, err := kgo.NewClient(all...)
	if err != nil {
		return nil, fmt.Errorf("outboxkafka: %w", err)
	}
	p, err := New(client, cfg)
	if err != nil {
		client.Close()
		return nil, err
	}
	p.owned = true
	return p, nil
}

// Dial is Open, then a ping within Config.DialTimeout: it fails, closing the
// client, if no seed broker answers. Later outages are handled by Publish.
func Dial(seeds []string, cfg Config, opts ...kgo.Opt) (*Publisher, error) {
	p, err := Open(seeds, cfg, opts...)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), p.cfg.DialTimeout)
	defer cancel()
	if err := p.client.Ping(ctx); err != nil {
		_ = p.Close()
		return nil, fmt.Errorf("outboxkafka: no broker of %s answered within %v: %w", strings.Join(seeds, ","), p.cfg.DialTimeout, err)
	}
	return p, nil
}

// CheckTopic asks the cluster whether topic exists, for a start-up check of
// the configuration: it returns an error wrapping
// kerr.UnknownTopicOrPartition if the cluster says it does not, or the
// error of the look-up (no broker answered, an authorization refused).
// Publish does not need it. It never creates the topic.
func (p *Publisher) CheckTopic(ctx context.Context, topic string) error {
	if err := p.client.Ping(ctx); err != nil {
		return fmt.Errorf("outboxkafka: no broker answered: %w", err)
	}
	req := kmsg.NewPtrMetadataRequest()
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = kmsg.StringPtr(topic)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, p.client)
	switch {
	case err != nil:
		return fmt.Errorf("outboxkafka: metadata of topic %q: %w", topic, err)
	case len(resp.Topics) != 1:
		return fmt.Errorf("outboxkafka: metadata of topic %q: %d topics in the answer", topic, len(resp.Topics))
	}
	if err := kerr.ErrorForCode(resp.Topics[0].ErrorCode); err != nil {
		return fmt.Errorf("outboxkafka: topic %q: %w", topic, err)
	}
	return nil
}

// Close stops the publisher: later Publish calls fail with ErrClosed. A
// publisher made by Open or Dial also waits up to Config.CloseTimeout for the
// records in flight to be acknowledged, then closes its client; records
// still unacknowledged then fail (retryably) in the Publish calls waiting for
// them, and Close reports them. Close is idempotent.
func (p *Publisher) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	p.mu.Unlock()
	if !p.owned {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), p.cfg.CloseTimeout)
	defer cancel()
	err := p.client.Flush(ctx)
	p.client.Close()
	if err != nil {
		return fmt.Errorf("outboxkafka: close: records not acknowledged within %v were failed: %w", p.cfg.CloseTimeout, err)
	}
	return nil
}

// Publish produces the batch and waits for every record's acknowledgement or
// for ctx to end; see the package documentation for the outcomes.
func (p *Publisher) Publish(ctx context.Context, batch []outbox.Message) []error {
	errs := make([]error, len(batch))
	if len(batch) == 0 {
		return errs
	}
	if err := ctx.Err(); err != nil {
		for i := range errs {
			errs[i] = fmt.Errorf("outboxkafka: not produced: %w", err)
		}
		return errs
	}
	if p.unreachable.Load() {
		pctx, cancel := context.WithTimeout(ctx, PingTimeout)
		err := p.client.Ping(pctx)
		cancel()
		if err != nil {
			err = outbox.Unavailable(fmt.Errorf("outboxkafka: no broker answers, batch not produced: %w", err))
			for i := range errs {
				errs[i] = err
			}
			return errs
		}
		p.unreachable.Store(false)
	}
	records := make([]*kgo.Record, len(batch))
	topics := make([]string, len(batch))
	sent := 0
	for i := range batch {
		topics[i] = p.topic(batch[i])
		if err := ValidateTopic(topics[i]); err != nil {
			errs[i] = err
			continue
		}
		records[i] = record(topics[i], &batch[i])
		if err := p.checkSize(records[i]); err != nil {
			errs[i], records[i] = err, nil
			continue
		}
		sent++
	}
	p.produce(ctx, records, errs)

	// The broker judges a record batch as a whole: one record over the
	// topic's max.message.bytes, or one it cannot accept (a record without
	// a key on a compacted topic), fails every record batched with it. Send
	// each record so refused alone, to learn which one is at fault.
	// A key's records stay in batch order: once one of them failed for
	// another reason, the key's later records are not sent again alone
	// (the relay holds them back without an attempt).
	if sent > 1 {
		failedKeys := map[string]bool{}
		for i, err := range errs {
			key := batch[i].Key
			if records[i] != nil && refusesBatch(err) && ctx.Err() == nil {
				if key != "" && failedKeys[key] {
					errs[i] = outbox.HeldBack(fmt.Errorf("not produced again: an earlier record of key %q in the batch failed", key))
					continue
				}
				records[i] = record(topics[i], &batch[i])
				p.produce(ctx, records[i:i+1], errs[i:i+1])
			}
			if errs[i] != nil && !refusesBatch(errs[i]) && !errors.Is(errs[i], kerr.InvalidTopicException) {
				failedKeys[key] = true
			}
		}
	}
	failed := false
	for i, err := range errs {
		if err != nil && !errors.Is(err, ErrClosed) {
			err = fmt.Errorf("outboxkafka: produce to topic %q: %w", topics[i], err)
			if fix := p.configFix(err, topics[i]); fix != "" {
				p.logConfigError(topics[i], err, fix)
				err = fmt.Errorf("%w; fix: %s", err, fix)
			}
			errs[i] = classify(err)
			failed = true
		}
	}
	if failed && errors.Is(ctx.Err(), context.DeadlineExceeded) {
		p.checkReachable(ctx)
	}
	return errs
}

// checkReachable pings the cluster after a batch ran out of time and marks
// the publisher unreachable when no broker answers. The batch's own failures
// stay ordinary: its records were handed to the client, which may still send
// them, so they are not known to be unsent.
func (p *Publisher) checkReachable(ctx context.Context) {
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), PingTimeout)
	defer cancel()
	if err := p.client.Ping(pctx); err != nil {
		p.unreachable.Store(true)
	}
}

// topic returns the Kafka topic of m.
func (p *Publisher) topic(m outbox.Message) string {
	switch {
	case p.cfg.Topic != "":
		return p.cfg.Topic
	case p.cfg.TopicFunc != nil:
		return p.cfg.TopicFunc(m)
	default:
		return m.Topic
	}
}

// checkSize fails a record that is over the client's batch limit on its own,
// as the client would, but without waiting for the topic's metadata first
// (which never comes while the brokers are down).
func (p *Publisher) checkSize(r *kgo.Record) error {
	if p.maxBatchBytes == nil {
		return nil
	}
	size := len(r.Key) + len(r.Value)
	for _, h := range r.Headers {
		size += len(h.Key) + len(h.Value)
	}
	if limit := p.maxBatchBytes(r.Topic); size > int(limit) {
		return fmt.Errorf("record of %d bytes is over the client's batch limit of %d bytes (kgo.ProducerBatchMaxBytes): %w", size, limit, kerr.MessageTooLarge)
	}
	return nil
}

// record builds the Kafka record of m.
func record(topic string, m *outbox.Message) *kgo.Record {
	r := &kgo.Record{Topic: topic, Value: m.Payload}
	if r.Value == nil {
		r.Value = []byte{} // a null value would be a tombstone
	}
	if m.Key != "" {
		r.Key = []byte(m.Key)
	}
	r.Headers = make([]kgo.RecordHeader, 0, 2+len(m.Headers))
	r.Headers = append(r.Headers,
		kgo.RecordHeader{Key: HeaderID, Value: []byte(m.ID.String())},
		kgo.RecordHeader{Key: HeaderTopic, Value: []byte(m.Topic)},
	)
	names := make([]string, 0, len(m.Headers))
	for name := range m.Headers {
		if !strings.EqualFold(name, HeaderID) && !strings.EqualFold(name, HeaderTopic) {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	for _, name := range names {
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: name, Value: []byte(m.Headers[name])})
	}
	return r
}

// produce hands the non-nil records to the client and waits until each is
// acknowledged or failed, or until ctx ends, setting errs[i] for records[i].
func (p *Publisher) produce(ctx context.Context, records []*kgo.Record, errs []error) {
	w := &waiter{settled: make([]bool, len(records)), errs: make([]error, len(records)), done: make(chan struct{})}
	for _, r := range records {
		if r != nil {
			w.left++
		}
	}
	if w.left == 0 {
		return
	}
	p.mu.RLock()
	if p.closed {
		p.mu.RUnlock()
		for i, r := range records {
			if r != nil {
				errs[i] = ErrClosed
			}
		}
		return
	}
	for i, r := range records {
		if r != nil {
			// The record's context bounds its life in the client: it
			// fails once ctx ends unless it is already on the wire, when
			// the idempotent producer must learn its fate first.
			p.client.Produce(ctx, r, func(_ *kgo.Record, err error) { w.settle(i, err) })
		}
	}
	p.mu.RUnlock()
	select {
	case <-w.done:
	case <-ctx.Done():
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for i, r := range records {
		switch {
		case r == nil:
		case w.settled[i]:
			errs[i] = w.errs[i]
		default:
			errs[i] = fmt.Errorf("not acknowledged before the context ended: %w", ctx.Err())
		}
	}
}

// waiter collects the outcomes of one produce call's records. Promises may
// still arrive after the call stopped waiting; they are recorded and ignored.
type waiter struct {
	done chan struct{}

	mu      sync.Mutex
	errs    []error
	left    int
	settled []bool
}

func (w *waiter) settle(i int, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.errs[i], w.settled[i] = err, true
	if w.left--; w.left == 0 {
		close(w.done)
	}
}

// configFix returns what an operator must do about err, a failure to produce
// to topic, if it comes from the cluster's configuration rather than from
// the message; "" otherwise. Such failures stay retryable: the fix often
// comes within the relay's backoff, and if it never comes the messages are
// dead-lettered after Config.MaxAttempts of the relay, not retried forever.
func (p *Publisher) configFix(err error, topic string) string {
	switch {
	case (errors.Is(err, kerr.UnknownTopicOrPartition) || errors.Is(err, kerr.UnknownTopicID)) && p.autoCreate:
		return fmt.Sprintf("create Kafka topic %q, or enable auto.create.topics.enable on the brokers", topic)
	case errors.Is(err, kerr.UnknownTopicOrPartition), errors.Is(err, kerr.UnknownTopicID):
		return fmt.Sprintf("create Kafka topic %q, or enable auto-creation: auto.create.topics.enable on the brokers and kgo.AllowAutoTopicCreation() in the client", topic)
	case errors.Is(err, kerr.TopicAuthorizationFailed):
		return fmt.Sprintf("grant the client's principal WRITE and DESCRIBE on Kafka topic %q", topic)
	case errors.Is(err, kerr.ClusterAuthorizationFailed):
		return "grant the client's principal IDEMPOTENT_WRITE on the Kafka cluster (the producer is idempotent)"
	case errors.Is(err, kerr.SaslAuthenticationFailed), errors.Is(err, kerr.UnsupportedSaslMechanism):
		return "check the SASL mechanism, user and password of the Kafka client"
	}
	return ""
}

// logConfigError logs err, a configuration error, with its fix, unless it
// was logged for topic within ConfigErrorLogInterval.
func (p *Publisher) logConfigError(topic string, err error, fix string) {
	if p.configLog.Allow(topic + "\x00" + fix) {
		p.cfg.Logger.Error("outboxkafka: cannot produce until the configuration is fixed; the messages are retried with backoff and dead-lettered after the relay's MaxAttempts",
			slog.String("topic", topic), slog.String("fix", fix), slog.Any("error", err))
	}
}

// classify marks the errors no retry can fix as permanent.
func classify(err error) error {
	switch {
	// These end the wait, whatever broker error they carry along: the
	// same record can still succeed later.
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded),
		errors.Is(err, kgo.ErrRecordTimeout), errors.Is(err, kgo.ErrRecordRetries),
		errors.Is(err, kgo.ErrClientClosed), errors.Is(err, kgo.ErrMaxBuffered),
		errors.Is(err, ErrClosed):
		return err
	// A missing topic is not among them: creating it fixes the message.
	case refusesBatch(err), errors.Is(err, kerr.InvalidTopicException):
		return outbox.Permanent(err)
	}
	return err
}

// refusesBatch reports whether err is a broker's permanent verdict on a
// record batch, which may hold records that are not at fault.
func refusesBatch(err error) bool {
	return errors.Is(err, kerr.MessageTooLarge) || errors.Is(err, kerr.RecordListTooLarge) || errors.Is(err, kerr.InvalidRecord)
}

// ValidateTopic reports whether Kafka accepts name as a topic: 1 to
// MaxTopicLength characters from letters, digits, '.', '_' and '-', and
// neither "." nor "..". The error wraps kerr.InvalidTopicException.
func ValidateTopic(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("empty topic name: %w", kerr.InvalidTopicException)
	case len(name) > MaxTopicLength:
		return fmt.Errorf("topic name of %d bytes, over Kafka's limit of %d: %w", len(name), MaxTopicLength, kerr.InvalidTopicException)
	case name == "." || name == "..":
		return fmt.Errorf("topic name %q: %w", name, kerr.InvalidTopicException)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Errorf("topic name %q has the character %q at %d; Kafka topics use letters, digits, '.', '_' and '-': %w", name, c, i, kerr.InvalidTopicException)
		}
	}
	return nil
}
