package outboxpubsub

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"github.com/google/uuid"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/loglimit"
)

// ConfigErrorLogInterval is the shortest time between two ERROR logs of the
// same configuration error (a missing topic, a denied permission): every
// batch fails until an operator fixes it, and one line a minute tells them
// without flooding the log.
const ConfigErrorLogInterval = time.Minute

// ErrClosed is returned, for every message, by Publish after Close. It
// matches outbox.ErrClosed with errors.Is and is retryable: another relay
// instance, or this one after a restart, publishes the messages.
var ErrClosed = outbox.ClosedError("outboxpubsub: publisher closed")

// ErrTopicNotFound means a message's Pub/Sub topic does not exist. It is a
// configuration error: retryable (counting an attempt, as creating the topic
// makes the same message publishable), and logged at ERROR level with the
// fix at most once per ConfigErrorLogInterval per topic. Check reports it
// at start.
var ErrTopicNotFound = errors.New("the Pub/Sub topic does not exist")

// ErrPermissionDenied means Pub/Sub refused the credentials or their
// permission on a topic (PERMISSION_DENIED, UNAUTHENTICATED). It is a
// configuration error, retryable and logged like ErrTopicNotFound.
var ErrPermissionDenied = errors.New("Pub/Sub refused the credentials or their permission")

// ErrCheckNotPermitted means Check could not read a topic
// (pubsub.topics.get): the credentials may publish (roles/pubsub.publisher
// grants pubsub.topics.publish only) but not look, so it is no reason to
// refuse to start.
var ErrCheckNotPermitted = errors.New("the credentials may not read the topic for the start check (pubsub.topics.get)")

// PublishError is the outcome of a message Pub/Sub did not accept. A
// permanent one is wrapped by outbox.Permanent (test with
// outbox.IsPermanent); errors.As finds the *PublishError either way.
type PublishError struct {
	// ID is the outbox message id.
	ID uuid.UUID
	// Topic is the Pub/Sub topic the message was (or would have been)
	// published to.
	Topic string
	// Err is the cause: a gRPC status error from Pub/Sub or the client,
	// ErrHeaderRefused, ErrTooLarge, ErrTopicNotFound, ErrPermissionDenied,
	// ErrClosed or the context's error.
	Err error
}

// Error names the message, its topic and the cause.
func (e *PublishError) Error() string {
	return fmt.Sprintf("outboxpubsub: message %s to topic %q: %v", e.ID, e.Topic, e.Err)
}

// Unwrap returns the cause.
func (e *PublishError) Unwrap() error { return e.Err }

// Publisher publishes outbox messages to Google Cloud Pub/Sub; see the
// package documentation. It is safe for concurrent use by several relay
// workers.
type Publisher struct {
	cfg    Config
	client *pubsub.Client
	owned  bool // Open made client: Close closes it

	mu     sync.RWMutex // held for reading by Publish, for writing by Close
	closed bool

	topicsMu sync.Mutex
	topics   map[string]*topicPublishers // by the name Config maps to

	// queued counts, per topic and ordering key, the messages handed to
	// the client whose result is not in yet: a paused key is resumed only
	// when none is left, so that no later message of the key can go out
	// after one that failed.
	queued keyCounts

	// configLog spaces out the ERROR logs of configuration errors.
	configLog loglimit.Limiter
}

// topicPublishers are the client's publishers of one topic: all sends the
// batches; alone, made when first needed, sends one message per request, to
// tell which message of a refused request was the invalid one.
type topicPublishers struct {
	all, alone *pubsub.Publisher
}

// New returns a publisher using client, which the caller owns: Close stops
// the topics' publishers it made but leaves the client open. The client's
// call options for Publish (its retries) apply within Config.Timeout: a
// code it retries until the timeout ends is reported as the timeout,
// retryable, rather than by its own outcome. New never connects, and
// returns a *outbox.ConfigError if cfg is invalid.
func New(client *pubsub.Client, cfg Config) (*Publisher, error) {
	if client == nil {
		return nil, &outbox.ConfigError{Field: "outboxpubsub.New client", Value: "nil",
			Fix: "pass a Pub/Sub client, e.g. pubsub.NewClient(ctx, project), or use outboxpubsub.Open"}
	}
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	return &Publisher{
		cfg: cfg, client: client, topics: map[string]*topicPublishers{},
		configLog: loglimit.Limiter{Interval: ConfigErrorLogInterval},
	}, nil
}

// Client returns the Pub/Sub client the publisher uses.
func (p *Publisher) Client() *pubsub.Client { return p.client }

// Close stops the publisher: later calls of Publish fail with ErrClosed. It
// waits for the Publish calls in flight, stops the topics' publishers (each
// sends what it holds, within Config.Timeout), then closes the client if
// Open made it; a client given to New stays open. Close is idempotent and
// returns nil once the publisher is closed.
func (p *Publisher) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil
	}
	p.closed = true
	p.topicsMu.Lock()
	for _, tp := range p.topics {
		tp.all.Stop()
		if tp.alone != nil {
			tp.alone.Stop()
		}
	}
	p.topicsMu.Unlock()
	if p.owned {
		if err := p.client.Close(); err != nil {
			return fmt.Errorf("outboxpubsub: close client: %w", err)
		}
	}
	return nil
}

// topic returns the Pub/Sub topic m maps to.
func (p *Publisher) topic(m *outbox.Message) string {
	switch {
	case p.cfg.Topic != "":
		return p.cfg.Topic
	case p.cfg.TopicFor != nil:
		return p.cfg.TopicFor(*m)
	}
	return p.cfg.TopicPrefix + m.Topic
}

// publishers returns the client's publishers of topic, made on first use
// and reused: each holds its bundler and goroutines.
func (p *Publisher) publishers(topic string) *topicPublishers {
	p.topicsMu.Lock()
	defer p.topicsMu.Unlock()
	tp, ok := p.topics[topic]
	if !ok {
		tp = &topicPublishers{all: p.newTopicPublisher(topic, false)}
		p.topics[topic] = tp
	}
	return tp
}

// alonePublisher returns topic's publisher that sends one message per
// request.
func (p *Publisher) alonePublisher(topic string) *pubsub.Publisher {
	tp := p.publishers(topic)
	p.topicsMu.Lock()
	defer p.topicsMu.Unlock()
	if tp.alone == nil {
		tp.alone = p.newTopicPublisher(topic, true)
	}
	return tp.alone
}

func (p *Publisher) newTopicPublisher(topic string, alone bool) *pubsub.Publisher {
	t := p.client.Publisher(topic)
	if p.cfg.PublishSettings != nil {
		t.PublishSettings = *p.cfg.PublishSettings
	}
	// The client sends a bundle in the background, with a context of its
	// own: bounded by Timeout, a bundle the relay gave up on cannot land
	// much later.
	t.PublishSettings.Timeout = p.cfg.Timeout
	if alone {
		t.PublishSettings.CountThreshold = 1
	}
	t.EnableMessageOrdering = p.cfg.OrderingKeys
	return t
}

// logConfigError logs err, a configuration error, with its fix at ERROR
// level, unless it was logged for topic within ConfigErrorLogInterval.
func (p *Publisher) logConfigError(topic string, err error, fix string) {
	if !p.configLog.Allow(topic + "\x00" + fix) {
		return
	}
	p.cfg.Logger.Error("outboxpubsub: cannot publish until the configuration is fixed",
		slog.String("topic", topic), slog.String("fix", fix), slog.Any("error", err))
}

// fullName returns the full name of topic, a topic id of the client's
// project or a full name already.
func (p *Publisher) fullName(topic string) string {
	if strings.Contains(topic, "/") {
		return topic
	}
	return "projects/" + p.client.Project() + "/topics/" + topic
}

// Check tells at start whether publishing can work: Config.Topic and each
// of topics exists. Pub/Sub does not create topics on publish, so a missing
// one is an error matching ErrTopicNotFound that names the fix; credentials
// that may publish but not read a topic give ErrCheckNotPermitted.
func (p *Publisher) Check(ctx context.Context, topics ...string) error {
	if p.cfg.Topic != "" {
		topics = append([]string{p.cfg.Topic}, topics...)
	}
	for _, t := range topics {
		name := p.fullName(t)
		_, err := p.client.TopicAdminClient.GetTopic(ctx, &pubsubpb.GetTopicRequest{Topic: name})
		switch status.Code(err) {
		case codes.OK:
			continue
		case codes.NotFound:
			return fmt.Errorf("outboxpubsub: topic %s: %w; create it (gcloud pubsub topics create %s --project %s) or publish to another topic",
				name, ErrTopicNotFound, topicID(name), projectOf(name))
		case codes.PermissionDenied:
			return fmt.Errorf("outboxpubsub: topic %s: %w (%v); grant roles/pubsub.viewer on it to check at start", name, ErrCheckNotPermitted, err)
		case codes.Unauthenticated:
			return fmt.Errorf("outboxpubsub: topic %s: %w (%v); check GOOGLE_APPLICATION_CREDENTIALS or the metadata server's service account", name, ErrPermissionDenied, err)
		}
		return fmt.Errorf("outboxpubsub: topic %s: %w", name, err)
	}
	return nil
}

// projectOf returns the project of a full topic name.
func projectOf(name string) string {
	parts := strings.Split(name, "/")
	if len(parts) == 4 {
		return parts[1]
	}
	return "PROJECT"
}

// ForRelay returns the publisher to give the relay: with
// Config.OrderingKeys and Config.Topic (one Pub/Sub topic for every
// message), p marked as an outbox.KeyOrderKeeper (the client pauses a key
// after a failure, so the relay can hand a key's messages over together);
// otherwise p itself, which is not one (the relay then hands a key's
// messages over in waves, a round trip apart). The client keeps a key's
// order per Pub/Sub topic, the relay per outbox key: with TopicPrefix or
// TopicFor one key may go to several topics, where the client would send
// them side by side and a failure on one would not hold the other back.
// Either way Close and Publish are p's.
func (p *Publisher) ForRelay() outbox.Publisher {
	if p.cfg.OrderingKeys && p.cfg.Topic != "" {
		return orderKeeper{p}
	}
	return p
}

// orderKeeper is a Publisher with ordering keys, marked as keeping key
// order.
type orderKeeper struct{ *Publisher }

// KeepsKeyOrder marks the publisher as an outbox.KeyOrderKeeper.
func (orderKeeper) KeepsKeyOrder() {}
