package outboxkafka

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/go-outbox/outbox/internal/consume"
	"github.com/go-outbox/outbox/internal/loglimit"
)

// unreachableChecks is how many checks in a row no broker must answer before
// that is logged at ERROR level: a broker restart passes by itself, an
// outage that lasts needs someone to look.
const unreachableChecks = 3

// health follows what keeps a consumer from reading and logs it by the rule
// of docs/consumers.md: at ERROR level, at most once per
// ConfigErrorLogInterval, what only an operator fixes (a missing topic,
// refused access or credentials, a cluster that stays unreachable); at WARN
// level, once per failure, what passes by itself (a lost connection, a group
// session broken); at INFO level that consuming is back. franz-go reports a
// missing or deleted topic nowhere (it waits for it quietly), so a check asks
// the cluster for the metadata of the topics every CheckInterval.
type health struct {
	client   *kgo.Client
	deadTo   string // the dead-letter topic, "" with ConsumerConfig.Parked
	interval time.Duration
	log      *slog.Logger
	seeds    []string
	topics   []string

	mu           sync.Mutex
	checkFailing bool      // the last check found something wrong
	dialErr      error     // the last failed connection to a broker
	failing      bool      // a failure was logged: say when consuming is back
	fetchErrAt   time.Time // the last fetch or group error
	missing      map[string]bool
	operator     *loglimit.Limiter
	unreachable  int             // checks in a row no broker answered
	warned       map[string]bool // WARN lines logged during this failure

	// ready is told what the logs tell: not ready from a failure on, ready
	// again where "back" would be logged (and from the first check that
	// finds nothing wrong).
	ready *consume.Readiness
}

func newHealth(cfg ConsumerConfig, seeds []string) *health {
	return &health{deadTo: cfg.DeadLetterTopic, interval: cfg.CheckInterval, log: cfg.Logger.With(slog.String("consumer", cfg.Group)),
		seeds: seeds, topics: cfg.Topics, missing: map[string]bool{},
		operator: &loglimit.Limiter{Interval: ConfigErrorLogInterval}, warned: map[string]bool{}, ready: cfg.Readiness.state()}
}

// OnBrokerConnect keeps the last failed connection, to say why a check got
// no answer (it only sees its own deadline pass).
func (h *health) OnBrokerConnect(_ kgo.BrokerMetadata, _ time.Duration, _ net.Conn, err error) {
	if err != nil {
		h.mu.Lock()
		h.dialErr = err
		h.mu.Unlock()
	}
}

// run checks the cluster at once, then every interval, until ctx ends.
func (h *health) run(ctx context.Context) {
	for {
		h.check(ctx)
		select {
		case <-ctx.Done():
			return
		case <-time.After(h.interval):
		}
	}
}

// check asks the cluster for the metadata of the topics once, logs what is
// wrong, and that consuming is back if nothing is any more.
func (h *health) check(ctx context.Context) {
	// At least a second: a metadata answer from a busy cluster may take
	// that, and a short interval must not make it an outage.
	timeout := min(max(h.interval, time.Second), 10*time.Second)
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req := kmsg.NewPtrMetadataRequest()
	req.AllowAutoTopicCreation = false // a check creates nothing
	topics := append([]string(nil), h.topics...)
	if h.deadTo != "" {
		topics = append(topics, h.deadTo)
	}
	for _, topic := range topics {
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr(topic)
		req.Topics = append(req.Topics, rt)
	}
	resp, err := req.RequestWith(rctx, h.client)
	if ctx.Err() != nil {
		return
	}
	if err != nil {
		h.unanswered(timeout, err)
		return
	}
	found := map[string]error{}
	for _, t := range resp.Topics {
		if t.Topic != nil {
			found[*t.Topic] = kerr.ErrorForCode(t.ErrorCode)
		}
	}
	wrong, refresh := false, false
	var why error // the first topic's failure, for the readiness
	for _, topic := range topics {
		err, ok := found[topic]
		if !ok {
			err = kerr.UnknownTopicOrPartition
		}
		if err == nil {
			h.mu.Lock()
			if h.missing[topic] {
				delete(h.missing, topic)
				refresh = true
			}
			h.mu.Unlock()
			continue
		}
		wrong = true
		if errors.Is(err, kerr.UnknownTopicOrPartition) {
			h.mu.Lock()
			h.missing[topic] = true
			h.mu.Unlock()
		}
		if kind, fix := h.operatorFix(topic, err); kind != "" {
			h.operatorFailed(kind, fix, err, slog.String("kafka_topic", topic))
			why = cmp.Or(why, fmt.Errorf("%s: %w", fix, err))
		} else {
			h.transient("metadata\x00"+topic, "outboxkafka: consumer cannot see a topic's partitions yet; waiting for the cluster", err, slog.String("kafka_topic", topic))
			why = cmp.Or(why, fmt.Errorf("cannot see the partitions of Kafka topic %q yet: %w", topic, err))
		}
	}
	if refresh {
		// franz-go refreshes its metadata of a missing topic slowly; a
		// topic created now is consumed sooner.
		h.client.ForceMetadataRefresh()
	}
	h.mu.Lock()
	h.unreachable = 0
	h.checkFailing = wrong
	quiet := time.Since(h.fetchErrAt) >= h.interval
	h.mu.Unlock()
	if wrong {
		h.ready.Failed(why)
	}
	if !wrong && quiet {
		h.ready.Consuming()
		h.back()
	}
}

// unanswered logs a check that got no metadata: refused credentials need an
// operator at once, silence only after unreachableChecks checks in a row.
func (h *health) unanswered(timeout time.Duration, err error) {
	h.mu.Lock()
	h.unreachable++
	h.checkFailing = true
	n, dialErr := h.unreachable, h.dialErr
	h.mu.Unlock()
	attrs := []slog.Attr{slog.Any("seeds", h.seeds)}
	if dialErr != nil {
		attrs = append(attrs, slog.Any("last_dial_error", dialErr))
	}
	if kind, fix := h.operatorFix("", err); kind != "" {
		h.ready.Failed(fmt.Errorf("%s: %w", fix, err))
		h.operatorFailed(kind, fix, err, attrs...)
		return
	}
	h.ready.Failed(fmt.Errorf("no Kafka broker answered the last check (seeds %v, %d check(s) in a row): %w", h.seeds, n, err))
	if n >= unreachableChecks {
		h.operatorFailed("unreachable", fmt.Sprintf("no Kafka broker answered %d checks in a row, %v apart (seeds %v); check the seed addresses, the network and the brokers, consuming resumes once one answers",
			n, h.interval, h.seeds), err, attrs...)
		return
	}
	h.transient("unreachable", "outboxkafka: consumer cannot reach the Kafka cluster; trying again (franz-go reconnects by itself)", err,
		append(attrs, slog.Duration("answer_timeout", timeout))...)
}

// fetchFailed logs an error PollFetches returned for topic and partition
// (topic "" for the group session: the coordinator, a join or a heartbeat).
func (h *health) fetchFailed(topic string, partition int32, err error) {
	if errors.Is(err, context.Canceled) {
		return
	}
	h.mu.Lock()
	h.fetchErrAt = time.Now()
	h.mu.Unlock()
	attrs := []slog.Attr{slog.String("kafka_topic", topic), slog.Int("partition", int(partition))}
	if kind, fix := h.operatorFix(topic, err); kind != "" {
		h.ready.Failed(fmt.Errorf("%s: %w", fix, err))
		h.operatorFailed(kind, fix, err, attrs...)
		return
	}
	if topic == "" {
		h.ready.Failed(fmt.Errorf("the group session failed; franz-go rejoins: %w", err))
	} else {
		h.ready.Failed(fmt.Errorf("fetching Kafka topic %q partition %d failed; franz-go reconnects: %w", topic, partition, err))
	}
	h.transient("fetch\x00"+topic+"\x00"+strconv.Itoa(int(partition)),
		"outboxkafka: consumer fetch failed; franz-go reconnects and rejoins the group by itself (records not committed come again, the inbox skips them)", err, attrs...)
}

// consumed is told that records came: consuming is back, unless a check
// still finds something wrong.
func (h *health) consumed() {
	h.mu.Lock()
	back, fine := h.failing && !h.checkFailing, !h.checkFailing
	h.mu.Unlock()
	if fine {
		h.ready.Consuming()
	}
	if back {
		h.back()
	}
}

// back logs that consuming is back, if a failure was logged.
func (h *health) back() {
	h.mu.Lock()
	if !h.failing {
		h.mu.Unlock()
		return
	}
	h.failing = false
	h.warned = map[string]bool{}
	// The next failure is a new one: log it at once.
	h.operator = &loglimit.Limiter{Interval: ConfigErrorLogInterval}
	h.mu.Unlock()
	h.log.Info("outboxkafka: consumer is back: the cluster answers and every topic is there")
}

// allowOperator reports whether a failure of kind that only an operator
// fixes may be logged at ERROR level now (at most once per
// ConfigErrorLogInterval), and if so counts it as logged.
func (h *health) allowOperator(kind string) bool {
	h.mu.Lock()
	limiter := h.operator
	h.mu.Unlock()
	return limiter.Allow(kind)
}

// operatorFailed logs a failure only an operator fixes, at ERROR level at
// most once per ConfigErrorLogInterval and kind, at DEBUG level otherwise.
func (h *health) operatorFailed(kind, fix string, err error, attrs ...slog.Attr) {
	h.mu.Lock()
	h.failing = true
	h.mu.Unlock()
	attrs = append(attrs, slog.Any("error", err))
	if h.allowOperator(kind) {
		h.log.LogAttrs(context.Background(), slog.LevelError, "outboxkafka: consumer cannot go on: "+fix, attrs...)
		return
	}
	h.log.LogAttrs(context.Background(), slog.LevelDebug, "outboxkafka: consumer still cannot go on (logged at ERROR level at most once per ConfigErrorLogInterval): "+fix, attrs...)
}

// transient logs a failure that passes by itself: at WARN level the first
// time during a failure, at DEBUG level after that.
func (h *health) transient(key, msg string, err error, attrs ...slog.Attr) {
	h.mu.Lock()
	h.failing = true
	first := !h.warned[key]
	h.warned[key] = true
	h.mu.Unlock()
	level := slog.LevelDebug
	if first {
		level = slog.LevelWarn
	}
	h.log.LogAttrs(context.Background(), level, msg, append(attrs, slog.Any("error", err))...)
}

// operatorFix returns the kind of a failure about topic ("" for the cluster
// or the group) that only an operator fixes, and the fix; "" for a failure
// that passes by itself.
func (h *health) operatorFix(topic string, err error) (kind, fix string) {
	dead := topic != "" && topic == h.deadTo
	switch {
	case errors.Is(err, kerr.SaslAuthenticationFailed), errors.Is(err, kerr.UnsupportedSaslMechanism), errors.Is(err, kerr.IllegalSaslState):
		return "sasl", "the cluster refused the client's SASL credentials; check the mechanism, user and password given in the options (kgo.SASL)"
	case errors.Is(err, kerr.GroupAuthorizationFailed):
		return "group-access", "the cluster refused access to the consumer group; grant the client's principal READ on it"
	case errors.Is(err, kerr.ClusterAuthorizationFailed):
		return "cluster-access", "the cluster refused an operation on the cluster; grant the client's principal IDEMPOTENT_WRITE on it (records are parked with an idempotent producer)"
	case topic == "":
		return "", ""
	case (errors.Is(err, kerr.UnknownTopicOrPartition) || errors.Is(err, kerr.UnknownTopicID)) && dead:
		return "missing\x00" + topic, fmt.Sprintf("dead-letter topic %q not found; create it: a record that keeps failing waits until it can be parked there, holding back its partition", topic)
	case errors.Is(err, kerr.UnknownTopicOrPartition), errors.Is(err, kerr.UnknownTopicID):
		return "missing\x00" + topic, fmt.Sprintf("Kafka topic %q not found; create it (the relay publishes to it), consuming starts once it exists", topic)
	case errors.Is(err, kerr.TopicAuthorizationFailed) && dead:
		return "access\x00" + topic, fmt.Sprintf("the cluster refused access to dead-letter topic %q; grant the client's principal WRITE and DESCRIBE on it", topic)
	case errors.Is(err, kerr.TopicAuthorizationFailed):
		return "access\x00" + topic, fmt.Sprintf("the cluster refused access to Kafka topic %q; grant the client's principal READ and DESCRIBE on it", topic)
	case errors.Is(err, kerr.InvalidTopicException):
		return "invalid\x00" + topic, fmt.Sprintf("%q is not a valid Kafka topic name; fix the consumer's configuration", topic)
	}
	return "", ""
}
