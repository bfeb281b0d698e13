package outboxredis

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/consume"
)

// Defaults of ConsumerConfig.
const (
	MaxDeliverDefault  = 5
	ClaimAfterDefault  = 30 * time.Second
	ConcurrencyDefault = 4
	// ParkStreamSuffix makes ConsumerConfig.ParkStream's default: the
	// stream's name with it appended.
	ParkStreamSuffix = ":parked"
)

// Fields the consumer adds to an entry it parks on Redis (in
// ConsumerConfig.ParkStream), beside the entry's own fields.
const (
	// FieldParkedReason says why: the attempts and the last error.
	FieldParkedReason = "parked-reason"
	// FieldParkedFrom is the stream and entry id the message came from.
	FieldParkedFrom = "parked-from"
	// FieldParkedBy is the consumer group that gave up on it.
	FieldParkedBy = "parked-by"
)

// ConsumerConfig configures Consume. Stream and Group are required.
type ConsumerConfig struct {
	// Stream is the stream to read.
	Stream string
	// Group is the consumer group: Redis remembers which entries the group
	// was given and which it acknowledged, so a restarted process goes on
	// where the last one stopped. Keep it across releases.
	// It is also the consumer's identity in its database: Parked keeps
	// its messages under it, and outbox.ApplyOnce names its inbox after
	// it. Keep it the same in every process of the consumer and across
	// releases, and different from every outboxevents handler's name.
	Group string
	// Consumer names this process in the group. The entries the group gave
	// it and it has not acknowledged are its own: a process that starts
	// under the name of one that died handles those first. Default: the
	// host name and the process id, unique to the process; the entries of
	// a consumer that died are then taken by the others after ClaimAfter,
	// after later entries of their keys. For key order across restarts,
	// give each process a name it keeps (a StatefulSet's pod name, say).
	Consumer string
	// MaxDeliver is how many attempts a message gets before it is parked
	// (logged at ERROR level with its id and error, and written to Parked
	// if set, else appended to ParkStream and acknowledged), counting
	// deliveries to consumers that died. Default MaxDeliverDefault.
	// A failure marked outbox.Unavailable (or held back, as
	// outboxevents.Dispatcher.Deliver holds an event whose handler's
	// destination is down) counts no attempt in this process: the message
	// waits in place, its key with it, for as long as the outage lasts.
	MaxDeliver int
	// ClaimAfter is how long an entry given to a consumer stays
	// unacknowledged before another consumer of the group takes it
	// (XAUTOCLAIM): the time to wait for a consumer that died. A live
	// consumer keeps every entry it holds, queued, retried or handled, by
	// resetting their idle time every ClaimAfter/3, so only a process that
	// died or cannot reach Redis for that long loses its entries.
	// Default ClaimAfterDefault.
	ClaimAfter time.Duration
	// Concurrency is how many messages are handled at once. Messages of one
	// key are handled one at a time, in stream order; different keys
	// concurrently. Default ConcurrencyDefault.
	Concurrency int
	// BackoffBase and BackoffMax bound the pause between two attempts of a
	// failing message (doubling, jittered). Defaults 100ms and 5s, or half
	// of ClaimAfter if less; BackoffMax must be under ClaimAfter.
	BackoffBase, BackoffMax time.Duration
	// ParkStream is where parked messages go when Parked is not set, and
	// entries that are no outbox message (no id field) in any case: the
	// entry's fields and the FieldParked* fields are appended to it, then
	// the entry is acknowledged. Default Stream + ParkStreamSuffix.
	ParkStream string
	// Logger receives parked messages and failures. Default slog.Default().
	Logger *slog.Logger
	// Observer, if set, is told of every attempt to handle a message
	// (outboxotel.Observer continues the message's trace there).
	Observer outbox.ConsumeObserver
	// Parked, if set, keeps parked messages in the consumer's database
	// (e.g. the inbox table: outboxpg.InboxTable) instead of ParkStream: a
	// message is written there, then acknowledged, and an operator lists
	// and retries it with `outbox inbox parked`, as with any broker.
	// Consume then also polls the store for requested retries and hands
	// them to fn again. Parked messages are kept under Group.
	Parked outbox.ParkStore
	// Readiness, if set, tells whether Consume consumes: nil while it
	// reads the group, else why not (creating the group, Redis
	// unreachable, the stream key of another type, stopped). One per
	// Consume call.
	Readiness *Readiness
	// SkipParkedInKeyOrder applies the later messages of a key that has a
	// message in Parked as they come. By default (false) they are parked
	// too, as waiting behind it, and applied in order once it is retried
	// or discarded (`outbox inbox parked`), so that key order holds.
	SkipParkedInKeyOrder bool
}

func (c ConsumerConfig) withDefaults() (ConsumerConfig, error) {
	switch {
	case c.Stream == "":
		return c, &outbox.ConfigError{Field: "outboxredis.ConsumerConfig.Stream", Value: `""`, Fix: "name the stream the relay publishes to"}
	case c.Group == "":
		return c, &outbox.ConfigError{Field: "outboxredis.ConsumerConfig.Group", Value: `""`, Fix: "name the consumer group, e.g. \"billing\"; keep it across releases"}
	}
	for _, f := range []struct {
		name     string
		negative bool
		value    any
	}{
		{"MaxDeliver", c.MaxDeliver < 0, c.MaxDeliver},
		{"ClaimAfter", c.ClaimAfter < 0, c.ClaimAfter},
		{"Concurrency", c.Concurrency < 0, c.Concurrency},
		{"BackoffBase", c.BackoffBase < 0, c.BackoffBase},
		{"BackoffMax", c.BackoffMax < 0, c.BackoffMax},
	} {
		if f.negative {
			return c, &outbox.ConfigError{Field: "outboxredis.ConsumerConfig." + f.name, Value: fmt.Sprint(f.value), Fix: "use a positive value, or 0 for the default"}
		}
	}
	if c.Consumer == "" {
		host, _ := os.Hostname()
		c.Consumer = fmt.Sprintf("%s-%d", host, os.Getpid())
	}
	if c.MaxDeliver == 0 {
		c.MaxDeliver = MaxDeliverDefault
	}
	if c.ClaimAfter == 0 {
		c.ClaimAfter = ClaimAfterDefault
	}
	if c.Concurrency == 0 {
		c.Concurrency = ConcurrencyDefault
	}
	if c.BackoffBase == 0 {
		c.BackoffBase = 100 * time.Millisecond
	}
	if c.BackoffMax == 0 {
		c.BackoffMax = min(5*time.Second, c.ClaimAfter/2)
	}
	if c.BackoffMax >= c.ClaimAfter {
		// Redis is told a message is still worked on once per pause: a
		// longer pause than ClaimAfter lets another consumer take it.
		return c, &outbox.ConfigError{Field: "outboxredis.ConsumerConfig.BackoffMax", Value: fmt.Sprintf("%v (ClaimAfter %v)", c.BackoffMax, c.ClaimAfter),
			Fix: "keep BackoffMax under ClaimAfter, e.g. at most half of it"}
	}
	if c.ParkStream == "" {
		c.ParkStream = c.Stream + ParkStreamSuffix
	}
	if c.ParkStream == c.Stream {
		// A parked entry would be read again, fail again and be parked
		// again, without end, filling Redis's memory.
		return c, &outbox.ConfigError{Field: "outboxredis.ConsumerConfig.ParkStream", Value: fmt.Sprintf("%q (the Stream read)", c.ParkStream),
			Fix: "park on another stream than the one read, e.g. the default Stream + \"" + ParkStreamSuffix + "\""}
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c, nil
}

// FromEntry returns the outbox message a stream entry carries, as the
// Publisher appended it: id, topic and key from their fields, the payload,
// and the headers from the fields named HeaderFieldPrefix + name. The topic
// is the stream's name when the entry has none.
func FromEntry(stream string, x redis.XMessage) (outbox.Message, error) {
	str := func(name string) string { s, _ := x.Values[name].(string); return s }
	id, err := uuid.Parse(str(FieldID))
	if err != nil {
		return outbox.Message{}, fmt.Errorf("outboxredis: entry %s of %s has no outbox id in its %q field (%q): %w", x.ID, stream, FieldID, str(FieldID), err)
	}
	m := outbox.Message{ID: id, Topic: str(FieldTopic), Key: str(FieldKey), Payload: []byte(str(FieldPayload)), Headers: map[string]string{}}
	if m.Topic == "" {
		m.Topic = stream
	}
	for name, v := range x.Values {
		if h, ok := strings.CutPrefix(name, HeaderFieldPrefix); ok {
			m.Headers[h], _ = v.(string)
		}
	}
	return m, nil
}

// Consume reads cfg.Stream as consumer cfg.Consumer of group cfg.Group and
// hands each message to fn, until ctx ends; then it returns nil. An entry is
// acknowledged (XACK) only after fn returned nil: with fn =
// inbox.Apply(apply) (outbox.Inbox) that is after the consumer's
// transaction committed, so a crash between the commit and the
// acknowledgement means a redelivery that the inbox skips. A failing message
// is retried in place (its key waits, so key order holds in the process)
// with a backoff, and parked after cfg.MaxDeliver attempts: appended to
// cfg.ParkStream, or written to cfg.Parked.
//
// Consume creates the group if it does not exist, at the stream's first
// entry (and the stream, empty, if there is none yet), so a new group reads
// what the stream holds; it creates the group again if it is deleted (the
// stream's entries then come again from the first; the inbox skips those
// already applied). Entries a consumer of the group was given and did not
// acknowledge within cfg.ClaimAfter (it died) are taken over (XAUTOCLAIM).
//
// Key order holds within one process: Redis gives each entry to one
// consumer, so with several processes in a group two messages of a key may
// be handled at once in two of them, and an entry taken over from a dead
// consumer comes after the later ones of its key. Run one process per
// group for key order across processes.
//
// Redis unreachable, refusing the credentials or permissions, or the stream
// key holding another type: Consume logs it (what an operator fixes at
// ERROR level, at most once per ConfigErrorLogInterval) and tries again with
// a backoff; the return to normal is logged at INFO level. Consume returns
// an error only when it cannot go on: the client is closed
// (redis.ErrClosed). See docs/consumers.md for the rule every consumer
// adapter follows.
func Consume(ctx context.Context, client redis.UniversalClient, cfg ConsumerConfig, fn func(ctx context.Context, m outbox.Message) error) error {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return err
	}
	read := readCount(cfg)
	lanesCfg := consume.Config{
		Consumer: cfg.Group, Concurrency: cfg.Concurrency, MaxDeliver: cfg.MaxDeliver,
		BackoffBase: cfg.BackoffBase, BackoffMax: cfg.BackoffMax, Logger: cfg.Logger, Observer: cfg.Observer, Parked: cfg.Parked,
		SkipParkedInKeyOrder: cfg.SkipParkedInKeyOrder,
		// A read asks for at most what the lanes have room for
		// (reader.free); the reader keeps what they hold from other
		// consumers (reader.keep).
		MaxHeld: read * 2,
	}
	// When Consume gives up (a closed client), the messages queued in the
	// lanes could not be acknowledged anyway: stop them.
	ctx, cancel := context.WithCancel(ctx)
	lanes := consume.Start(ctx, lanesCfg, fn)
	defer lanes.Close()
	stopRetrying := consume.StartRetrying(ctx, lanesCfg, fn)
	defer stopRetrying()
	defer cancel() // before the lanes close, so that they do not wait for handlers
	r := newReader(client, cfg, read)
	r.ready.Start("outboxredis", cfg.Group, fmt.Errorf("creating consumer group %s on stream %s", cfg.Group, cfg.Stream))
	err = r.run(ctx, lanes)
	r.ready.Stop(err)
	return err
}

// readCount is how many entries one read asks for.
func readCount(cfg ConsumerConfig) int { return cfg.Concurrency * 8 }

// delivery is a stream entry for the consumer lanes.
type delivery struct {
	r       *reader
	id      string
	values  map[string]any
	m       outbox.Message
	attempt int
}

func (d *delivery) Message() outbox.Message { return d.m }
func (d *delivery) Attempt() int            { return d.attempt }

// Ack acknowledges the entry. Whether it succeeds or not the lanes are done
// with it: an entry whose XACK failed stays pending for this consumer and
// is taken over after ClaimAfter (by this consumer too), or read with the
// own pending entries when the read starts again.
func (d *delivery) Ack(ctx context.Context) error {
	defer d.r.done(d.id)
	err := d.r.client.XAck(ctx, d.r.cfg.Stream, d.r.cfg.Group, d.id).Err()
	if err != nil {
		d.r.operatorError("acknowledge entries (XACK)", err)
	}
	return err
}

// Park appends the entry to ParkStream, then acknowledges it: see
// reader.park.
func (d *delivery) Park(ctx context.Context, attempts int, cause error) error {
	defer d.r.done(d.id)
	return d.r.park(ctx, d.id, d.values, consume.Reason(attempts, cause))
}

// Working does nothing: the reader keeps every entry the process holds,
// queued or handled, with one XCLAIM per pass (reader.keep), so that no
// other consumer takes it over while it waits here.
func (d *delivery) Working() {}
