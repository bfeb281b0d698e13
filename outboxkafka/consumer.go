package outboxkafka

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/backoff"
	"github.com/go-outbox/outbox/internal/consume"
)

// MaxDeliverDefault is ConsumerConfig.MaxDeliver when zero.
const MaxDeliverDefault = 5

// CheckIntervalDefault is ConsumerConfig.CheckInterval when zero.
const CheckIntervalDefault = 10 * time.Second

// HeaderParkReason is the header of a parked record in the dead-letter
// topic that says why it was parked.
const HeaderParkReason = "Outbox-Park-Reason"

// ConsumerConfig configures Consume. Group, Topics, and DeadLetterTopic or
// Parked are required.
type ConsumerConfig struct {
	// Group is the consumer group: its committed offsets are where a
	// restarted process goes on. Keep it across releases.
	// It is also the consumer's identity in its database: Parked keeps
	// its messages under it, and outbox.ApplyOnce names its inbox after
	// it. Keep it the same in every process of the consumer (not a
	// per-process name) and across releases, and different from every
	// outboxevents handler's name.
	Group string
	// Topics are the topics to read.
	Topics []string
	// DeadLetterTopic receives the records parked after MaxDeliver
	// attempts, unchanged but for HeaderParkReason. With Parked set it
	// receives only the records that are not outbox messages (and may be
	// empty: they are then logged and skipped).
	DeadLetterTopic string
	// MaxDeliver is how many attempts a record gets before it is parked.
	// Kafka does not count deliveries: attempts before a crash are not
	// counted. Default MaxDeliverDefault.
	// A failure marked outbox.Unavailable (or held back, as
	// outboxevents.Dispatcher.Deliver holds an event whose handler's
	// destination is down) counts no attempt: the message waits in place,
	// its key with it, for as long as the outage lasts (in this process:
	// a redelivery after a reconnection or a restart is counted by the
	// broker where it counts deliveries).
	MaxDeliver int
	// BackoffBase and BackoffMax bound the pause between two attempts of a
	// failing record (doubling, jittered). Defaults 100ms and 5s.
	BackoffBase, BackoffMax time.Duration
	// CheckInterval is how often Consume asks the cluster for the metadata
	// of Topics and DeadLetterTopic, so that a missing topic, refused
	// access or a cluster that stopped answering is logged even while no
	// record comes. Default CheckIntervalDefault.
	CheckInterval time.Duration
	// Logger receives parked records, retries and what keeps Consume from
	// reading (see Consume). Default slog.Default().
	Logger *slog.Logger
	// Observer, if set, is told of every attempt to handle a message
	// (outboxotel.Observer continues the message's trace there).
	Observer outbox.ConsumeObserver
	// Parked, if set, keeps parked messages in the consumer's database
	// (e.g. the inbox table: outboxpg.InboxTable, outboxsqlite.InboxTable)
	// instead of DeadLetterTopic: a message is written there, then its
	// offset marked for commit, and an operator lists and retries it with
	// `outbox inbox parked`, as with any broker. Consume then also polls
	// the store for requested retries and hands them to fn again. Parked
	// messages are kept under Group.
	Parked outbox.ParkStore
	// Readiness, if set, tells whether Consume consumes: nil while the
	// cluster answers its checks and every topic is there, else why not
	// (the first check under way, a topic missing or refused, the cluster
	// not answering, a fetch or the group session failing, stopped). Serve
	// its Ready as the consumer's readiness check. One per Consume call.
	Readiness *Readiness
	// SkipParkedInKeyOrder applies the later messages of a key that has a
	// message in Parked as they come. By default (false) they are parked
	// too, as waiting behind it, and applied in order once it is retried
	// or discarded (`outbox inbox parked`), so that key order holds. Each
	// message applied past a parked one is counted on it, and retrying it
	// then needs --force. Messages with no key are never held.
	SkipParkedInKeyOrder bool
}

// FromRecord returns the outbox message a record carries, as the Publisher
// sent it: the id, topic and key from its headers (the Kafka topic and the
// record key when absent), the value as payload, and the other headers.
func FromRecord(r *kgo.Record) (outbox.Message, error) {
	m := outbox.Message{Topic: r.Topic, Key: string(r.Key), Payload: r.Value, Headers: map[string]string{}}
	var id string
	for _, h := range r.Headers {
		switch h.Key {
		case HeaderID:
			id = string(h.Value)
		case HeaderTopic:
			m.Topic = string(h.Value)
		default:
			m.Headers[h.Key] = string(h.Value)
		}
	}
	parsed, err := uuid.Parse(id)
	if err != nil {
		return outbox.Message{}, fmt.Errorf("outboxkafka: record %s/%d@%d has no outbox id in %s (%q): %w", r.Topic, r.Partition, r.Offset, HeaderID, id, err)
	}
	m.ID = parsed
	return m, nil
}

// Consume reads cfg.Topics as member of the consumer group cfg.Group and
// hands each record to fn, until ctx ends; then it commits what was handled
// and returns nil. A record's offset is committed only after fn returned
// nil: with fn = inbox.Apply(apply) (outbox.Inbox), after the consumer's
// transaction committed, so a crash in between means a redelivery that the
// inbox skips. The records of one partition are handled one after the
// other, so the order of a key (which picks the partition) holds; partitions
// are handled concurrently, each at its own pace. A failing record is
// retried in place and, after cfg.MaxDeliver attempts, parked in
// cfg.DeadLetterTopic or cfg.Parked; while it cannot be written there (the
// topic is missing, the broker or the database refuses), it is tried again
// with the same backoff. Either way it holds back its own partition only:
// no later offset of that partition is committed before it, while the other
// partitions go on being handled and committed. A partition held back keeps
// at most a few hundred fetched records; past that its fetching pauses
// until it moves.
//
// Consume recovers by itself from what passes (franz-go reconnects, rejoins
// the group and waits for a topic) and says what needs an operator, by the
// rule of docs/consumers.md: a check asks the cluster for the metadata of
// cfg.Topics and cfg.DeadLetterTopic at start and every cfg.CheckInterval,
// so that a missing or deleted topic, refused access or SASL credentials, or
// a cluster no broker of which answers three checks in a row,
// is logged at ERROR level with the fix, at most once per
// ConfigErrorLogInterval while it lasts; a dead-letter topic that refuses a
// parked record too. A lost connection or group session is logged at WARN
// level, and the return of consuming at INFO level. Consume keeps trying
// meanwhile, so a fix needs no restart.
//
// opts configure the client (TLS, SASL...); they must not
// set the OnPartitionsRevoked or OnPartitionsLost callbacks, which Consume
// uses to stop handling a partition before another member takes it.
func Consume(ctx context.Context, seeds []string, cfg ConsumerConfig, fn func(ctx context.Context, m outbox.Message) error, opts ...kgo.Opt) error {
	switch {
	case cfg.Group == "":
		return &outbox.ConfigError{Field: "outboxkafka.ConsumerConfig.Group", Value: `""`, Fix: "name the consumer group, e.g. \"billing\"; keep it across releases"}
	case len(cfg.Topics) == 0:
		return &outbox.ConfigError{Field: "outboxkafka.ConsumerConfig.Topics", Value: "none", Fix: "name the topics the relay publishes to"}
	case cfg.DeadLetterTopic == "" && cfg.Parked == nil:
		return &outbox.ConfigError{Field: "outboxkafka.ConsumerConfig.DeadLetterTopic", Value: `""`, Fix: "name a topic for the records that keep failing, e.g. \"orders.dead\", or set Parked to keep them in the consumer's database"}
	}
	if cfg.MaxDeliver <= 0 {
		cfg.MaxDeliver = MaxDeliverDefault
	}
	if cfg.BackoffBase <= 0 {
		cfg.BackoffBase = 100 * time.Millisecond
	}
	if cfg.BackoffMax <= 0 {
		cfg.BackoffMax = 5 * time.Second
	}
	if cfg.CheckInterval <= 0 {
		cfg.CheckInterval = CheckIntervalDefault
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	h := newHealth(cfg, seeds)
	lanes := consume.Config{Consumer: cfg.Group, MaxDeliver: cfg.MaxDeliver, BackoffBase: cfg.BackoffBase, BackoffMax: cfg.BackoffMax,
		Logger: cfg.Logger, Observer: cfg.Observer, Parked: cfg.Parked, SkipParkedInKeyOrder: cfg.SkipParkedInKeyOrder}
	ps := &partitions{cfg: cfg, fn: fn, health: h, lanes: lanes, running: map[topicPartition]*partition{}}
	client, err := kgo.NewClient(append(append([]kgo.Opt{
		kgo.SeedBrokers(seeds...),
		kgo.ConsumerGroup(cfg.Group),
		kgo.ConsumeTopics(cfg.Topics...),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		// Offsets are committed for the records marked, and a record is
		// marked only once handled.
		kgo.AutoCommitMarks(),
		// Records are handed to the partitions' queues between a poll
		// and AllowRebalance, so none reaches the queue of a partition
		// being revoked.
		kgo.BlockRebalanceOnPoll(),
	}, opts...),
		// After opts: a partition must stop being handled here before
		// another member of the group gets it.
		kgo.OnPartitionsRevoked(ps.revoked),
		kgo.OnPartitionsLost(ps.lost),
		kgo.WithHooks(h),
	)...)
	if err != nil {
		return fmt.Errorf("outboxkafka: consumer group %s: %w", cfg.Group, err)
	}
	defer client.Close()
	h.ready.Start("outboxkafka", cfg.Group, errors.New("joining: the first check of the cluster is under way"))
	defer h.ready.Stop(nil)
	ps.client = client
	h.client = client
	checking := make(chan struct{})
	go func() { defer close(checking); h.run(ctx) }()
	// Before the client closes: a check under way uses it.
	defer func() { <-checking }()
	stopRetrying := consume.StartRetrying(ctx, lanes, fn)
	defer stopRetrying()
	for {
		fetches := client.PollFetches(ctx)
		if ctx.Err() != nil {
			break
		}
		fetches.EachError(h.fetchFailed)
		fetched := false
		fetches.EachPartition(func(p kgo.FetchTopicPartition) {
			fetched = fetched || len(p.Records) > 0
			ps.push(ctx, p.Topic, p.Partition, p.Records)
		})
		if fetched {
			h.consumed()
		}
		client.AllowRebalance()
	}
	// The partitions' contexts ended with ctx: wait for their handlers, so
	// that what they finished is marked before the last commit.
	ps.stop(nil)
	// A poll blocks rebalances until AllowRebalance; leaving the group is
	// one. Commit what was handled before leaving.
	client.AllowRebalance()
	commitCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := client.CommitMarkedOffsets(commitCtx); err != nil {
		cfg.Logger.Warn("outboxkafka: committing the last offsets failed; those records come again and the inbox skips them", slog.String("consumer", cfg.Group), slog.Any("error", err))
	}
	return nil
}

// pauseAt is how many records a partition's queue holds before its fetching
// pauses (a failing record holds them back); it resumes once the queue is
// down to half. Records the client had fetched for it by then are fetched
// again after the pause.
const pauseAt = 512

// partitions runs one goroutine per assigned partition, each handling its
// partition's records one after the other, so that a record retrying holds
// back its own partition and no other.
type partitions struct {
	cfg    ConsumerConfig
	client *kgo.Client
	fn     func(ctx context.Context, m outbox.Message) error
	health *health
	lanes  consume.Config

	mu      sync.Mutex
	running map[topicPartition]*partition
}

type topicPartition struct {
	partition int32
	topic     string
}

// partition is the queue of one partition's fetched records and the
// goroutine that handles them.
type partition struct {
	cancel context.CancelFunc
	done   chan struct{}
	tp     topicPartition
	wake   chan struct{} // a record was queued

	mu     sync.Mutex
	paused bool
	queue  []*kgo.Record
}

// push queues records behind those of their partition, starting its
// goroutine if it has none, and pauses its fetching when the queue is long.
func (ps *partitions) push(ctx context.Context, topic string, number int32, records []*kgo.Record) {
	if len(records) == 0 {
		return
	}
	tp := topicPartition{partition: number, topic: topic}
	ps.mu.Lock()
	p := ps.running[tp]
	if p == nil {
		pctx, cancel := context.WithCancel(ctx)
		p = &partition{cancel: cancel, done: make(chan struct{}), tp: tp, wake: make(chan struct{}, 1)}
		ps.running[tp] = p
		go ps.run(pctx, p)
	}
	ps.mu.Unlock()
	p.mu.Lock()
	p.queue = append(p.queue, records...)
	if !p.paused && len(p.queue) >= pauseAt {
		// Under p.mu, as resuming is: a pause and a resume that
		// crossed would leave the partition paused for good.
		p.paused = true
		ps.client.PauseFetchPartitions(map[string][]int32{topic: {number}})
	}
	p.mu.Unlock()
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// run handles p's records in order until its context ends (Consume ends,
// or the partition was revoked or lost); a record left unhandled then
// holds back the rest, unmarked, for whoever owns the partition next.
func (ps *partitions) run(ctx context.Context, p *partition) {
	defer close(p.done)
	for {
		p.mu.Lock()
		var r *kgo.Record
		if len(p.queue) > 0 {
			r = p.queue[0]
			p.queue[0] = nil
			p.queue = p.queue[1:]
		}
		if p.paused && len(p.queue) <= pauseAt/2 {
			p.paused = false
			ps.client.ResumeFetchPartitions(map[string][]int32{p.tp.topic: {p.tp.partition}})
		}
		p.mu.Unlock()
		if r == nil {
			select {
			case <-p.wake:
				continue
			case <-ctx.Done():
				return
			}
		}
		if !ps.handle(ctx, r) {
			return
		}
	}
}

// handle hands r to fn through consume.Handle, or parks it if it is not an
// outbox message. It reports whether r was marked (handled or parked); it
// was not only when ctx ended: marking a later record would then commit an
// offset past r, and r would never come again.
func (ps *partitions) handle(ctx context.Context, r *kgo.Record) bool {
	cfg := ps.cfg
	d := &consumed{backoffBase: cfg.BackoffBase, backoffMax: cfg.BackoffMax, client: ps.client, deadLetters: cfg.DeadLetterTopic,
		health: ps.health, log: cfg.Logger.With(slog.String("consumer", cfg.Group)), r: r}
	if ctx.Err() != nil {
		return false
	}
	m, err := FromRecord(r)
	if err != nil {
		if d.deadLetters == "" {
			cfg.Logger.Error("outboxkafka: record skipped: not an outbox message (set DeadLetterTopic to keep such records)", slog.String("consumer", cfg.Group), slog.Any("error", err))
			_ = d.Ack(ctx)
			return true
		}
		cfg.Logger.Error("outboxkafka: record parked: not an outbox message", slog.String("consumer", cfg.Group), slog.Any("error", err))
		return d.park(ctx, err.Error()) == nil
	}
	d.m = m
	consume.Handle(ctx, ps.lanes, d, ps.fn)
	// Handle returns with d neither acknowledged nor parked only when the
	// context ended (parking retries until then).
	return d.done
}

// stop ends the goroutines of the partitions of which (all when nil) and
// waits for them, a handler under way included; their queued records are
// dropped unmarked and fetching them resumes, for whoever owns them next.
func (ps *partitions) stop(which map[string][]int32) {
	ps.mu.Lock()
	var stopping []*partition
	for tp, p := range ps.running {
		if which == nil || slices.Contains(which[tp.topic], tp.partition) {
			stopping = append(stopping, p)
			delete(ps.running, tp)
		}
	}
	ps.mu.Unlock()
	for _, p := range stopping {
		p.cancel()
	}
	for _, p := range stopping {
		<-p.done
		p.mu.Lock()
		if p.paused {
			p.paused = false
			ps.client.ResumeFetchPartitions(map[string][]int32{p.tp.topic: {p.tp.partition}})
		}
		p.mu.Unlock()
	}
}

// revoked stops the revoked partitions' handling, then commits what they
// marked: the member that gets them next starts after it.
func (ps *partitions) revoked(ctx context.Context, cl *kgo.Client, revoked map[string][]int32) {
	ps.stop(revoked)
	if err := cl.CommitMarkedOffsets(ctx); err != nil && !errors.Is(err, context.Canceled) {
		ps.cfg.Logger.Warn("outboxkafka: committing the offsets of revoked partitions failed; their records come again and the inbox skips them",
			slog.String("consumer", ps.cfg.Group), slog.Any("error", err))
	}
}

// lost stops the lost partitions' handling; their offsets cannot be
// committed any more.
func (ps *partitions) lost(_ context.Context, _ *kgo.Client, lost map[string][]int32) {
	ps.stop(lost)
}

// consumed is a Kafka record for consume.Handle.
type consumed struct {
	backoffBase, backoffMax time.Duration // between two attempts to park
	client                  *kgo.Client
	deadLetters             string
	done                    bool // acknowledged or parked
	health                  *health
	log                     *slog.Logger
	m                       outbox.Message
	r                       *kgo.Record
}

func (d *consumed) Message() outbox.Message { return d.m }
func (d *consumed) Attempt() int            { return 1 }
func (d *consumed) Working()                {}

func (d *consumed) Ack(context.Context) error {
	d.client.MarkCommitRecords(d.r)
	d.done = true
	return nil
}

// Park copies the record to the dead-letter topic, then marks it handled.
func (d *consumed) Park(ctx context.Context, attempts int, cause error) error {
	return d.park(ctx, consume.Reason(attempts, cause))
}

// park copies the record to the dead-letter topic with reason, then marks it
// handled. Until the copy is written it tries again, with a backoff, and
// returns an error only once ctx ended. It must not give up earlier: the
// partition would go on with the next records and, marking them, commit an
// offset past this one, which then never comes again. Retrying in place
// keeps the order of the partition and calls the handler no more; seeking
// back to the record instead would run its MaxDeliver attempts again each
// round.
func (d *consumed) park(ctx context.Context, reason string) error {
	wait := backoff.NewJittered(d.backoffBase, d.backoffMax)
	failed := false // a failure was logged: say when the record is parked
	for {
		err := d.produce(ctx, reason)
		if err == nil {
			d.client.MarkCommitRecords(d.r)
			d.done = true
			if failed {
				d.log.LogAttrs(ctx, slog.LevelInfo, "outboxkafka: record parked in the dead-letter topic after all; its partition goes on", d.where()...)
			}
			return nil
		}
		err = fmt.Errorf("outboxkafka: park record %s/%d@%d in %s: %w", d.r.Topic, d.r.Partition, d.r.Offset, d.deadLetters, err)
		if ctx.Err() != nil {
			return err
		}
		attrs := append(d.where(), slog.Duration("retry_in", wait.Next()), slog.Any("error", err))
		switch kind, fix := d.health.operatorFix(d.deadLetters, err); {
		case kind != "" && d.health.allowOperator(kind):
			d.log.LogAttrs(ctx, slog.LevelError, "outboxkafka: cannot park a record: "+fix+" (its partition waits meanwhile, its offset uncommitted)", attrs...)
		case kind != "" || failed:
			d.log.LogAttrs(ctx, slog.LevelDebug, "outboxkafka: parking a record in the dead-letter topic failed again; trying again (logged once at WARN or ERROR level)", attrs...)
		default:
			d.log.LogAttrs(ctx, slog.LevelWarn, "outboxkafka: parking a record in the dead-letter topic failed; trying again (its partition waits meanwhile, its offset uncommitted)", attrs...)
		}
		failed = true
		if !wait.Sleep(ctx, nil) {
			return err
		}
	}
}

// where returns the attributes that name the record and its dead-letter
// topic.
func (d *consumed) where() []slog.Attr {
	return []slog.Attr{slog.String("kafka_topic", d.r.Topic), slog.Int("partition", int(d.r.Partition)), slog.Int64("offset", d.r.Offset),
		slog.String("dead_letter_topic", d.deadLetters)}
}

// produce writes the copy of the record with reason to the dead-letter topic
// once. The copy is a new kgo.Record each time: the client keeps the context
// of a produced record in it and fails a record whose context ended. A write
// under way when ctx ends is let finish (within a bound), so that a record
// copied to the dead-letter topic is also marked rather than parked twice.
func (d *consumed) produce(ctx context.Context, reason string) error {
	parked := &kgo.Record{Topic: d.deadLetters, Key: d.r.Key, Value: d.r.Value,
		Headers: append(append([]kgo.RecordHeader(nil), d.r.Headers...), kgo.RecordHeader{Key: HeaderParkReason, Value: []byte(reason)})}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	return d.client.ProduceSync(ctx, parked).FirstErr()
}
