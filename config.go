package outbox

import (
	"fmt"
	"log/slog"
	"math"
	"time"
)

// Defaults for Config. A zero field in Config takes its default.
const (
	// ActivePollIntervalDefault is how soon the relay looks again for work
	// after it last found some. Each empty look doubles the wait, up to
	// PollInterval: a busy outbox is polled often, an idle one rarely.
	ActivePollIntervalDefault = 10 * time.Millisecond
	// BackoffBaseDefault is the cap of the first retry delay.
	BackoffBaseDefault = time.Second
	// BackoffMaxDefault caps every retry delay.
	BackoffMaxDefault = 10 * time.Minute
	// BatchSizeDefault is how many messages a worker claims at once.
	BatchSizeDefault = 100
	// HeartbeatIntervalDefault is how often a relay refreshes its row in
	// the store's relay registry (outboxdriver.RelayRegistry); a row not
	// refreshed for three intervals counts as a relay that is gone.
	HeartbeatIntervalDefault = 10 * time.Second
	// LeaseDurationDefault is how long a claimed batch stays leased. A relay
	// that dies holding a lease delays those messages by at most this much.
	LeaseDurationDefault = 30 * time.Second
	// MaxAttemptsDefault is how many times a message is tried before it is
	// dead-lettered. With the default backoff the last retry comes about
	// 14 minutes after the first failure on average, 27 at most.
	MaxAttemptsDefault = 12
	// PauseCheckIntervalDefault is how often, at most, a relay with messages
	// to publish reads the paused topics.
	PauseCheckIntervalDefault = time.Second
	// PollIntervalDefault is the longest the relay waits between looks at
	// the table when nothing wakes it: the cost of an idle relay is one cheap
	// read-only query per PollInterval.
	PollIntervalDefault = time.Second
	// RetentionDefault keeps no published messages: they are deleted on
	// publish.
	RetentionDefault = 0
	// RetentionBatchDefault is how many published messages one cleanup
	// statement deletes at most.
	RetentionBatchDefault = 1000
	// WorkersDefault is how many batches one relay publishes concurrently.
	WorkersDefault = 2
)

// Config configures a Relay. The zero value takes every default.
type Config struct {
	// ActivePollInterval is the first wait after the relay found work; see
	// ActivePollIntervalDefault. Set it equal to PollInterval to poll at a
	// fixed rate.
	ActivePollInterval time.Duration
	// BackoffBase caps the delay before the first retry of a failed message;
	// the cap doubles with each further failure up to BackoffMax, and the
	// actual delay is drawn uniformly between zero and the cap (full jitter),
	// so a failed broker is not hit by every message at the same instant.
	BackoffBase time.Duration
	// BackoffMax caps every retry delay.
	BackoffMax time.Duration
	// BatchSize is how many messages a worker claims and publishes at once.
	BatchSize int
	// DisableListen stops the relay from using the store's cross-process
	// wake-up (PostgreSQL LISTEN), e.g. behind a connection pooler in
	// transaction mode that breaks LISTEN. The relay then polls.
	DisableListen bool
	// HeartbeatInterval is how often the relay refreshes its row in the
	// store's relay registry, which `outbox status` and the console list
	// as live relays; see HeartbeatIntervalDefault.
	HeartbeatInterval time.Duration
	// LeaseDuration is how long a claimed batch is reserved for its worker.
	// Publishing is cancelled before the lease ends, so a slow broker cannot
	// make two relays publish the same message at once.
	LeaseDuration time.Duration
	// Logger receives the relay's logs. Nil means slog.Default().
	Logger *slog.Logger
	// MaxAttempts is how many failed attempts dead-letter a message.
	MaxAttempts int
	// Observer is told of every exchange with the store, every batch
	// published and every message's outcome, for metrics and traces (see
	// the outboxotel module). Nil observes nothing.
	Observer Observer
	// PauseCheckInterval is how often, at most, a relay with messages to
	// publish reads the paused topics (`outbox pause`): a pause moves the
	// topic's pending messages out of reach at once, and a message written
	// after it may still be published by a relay for this long, or until
	// the end of a batch checked before the pause; see
	// PauseCheckIntervalDefault.
	PauseCheckInterval time.Duration
	// PollInterval is the longest wait between looks at the table; see
	// PollIntervalDefault.
	PollInterval time.Duration
	// Retention keeps published messages this long (status published) before
	// a cleanup job deletes them. Zero deletes each message as soon as it is
	// published.
	Retention time.Duration
	// RetentionBatch is how many published messages one cleanup statement
	// deletes at most.
	RetentionBatch int
	// TopicRateLimits caps how many messages a second of each topic named
	// this relay publishes (each relay keeps its own count): a message
	// over the limit is postponed, without counting an attempt, to when it
	// may go, and in key order the rest of its key waits behind it. Up to
	// one second's worth goes out in a burst. Topics not named are not
	// limited.
	TopicRateLimits map[string]float64
	// Workers is how many batches the relay publishes concurrently.
	Workers int
}

// Validate reports the first invalid field of c as a *ConfigError, or nil.
// NewRelay validates too; call Validate to check a configuration early, for
// example before opening connections.
func (c Config) Validate() error {
	_, err := c.withDefaults()
	return err
}

// withDefaults validates c and returns a copy with every zero field set to
// its default.
func (c Config) withDefaults() (Config, error) {
	type check struct {
		field string
		bad   bool
		value any
		fix   string
	}
	checks := []check{
		{"Config.ActivePollInterval", c.ActivePollInterval < 0, c.ActivePollInterval, "use a positive duration, or 0 for the default " + ActivePollIntervalDefault.String()},
		{"Config.BackoffBase", c.BackoffBase < 0, c.BackoffBase, "use a positive duration, or 0 for the default " + BackoffBaseDefault.String()},
		{"Config.BackoffMax", c.BackoffMax < 0, c.BackoffMax, "use a positive duration, or 0 for the default " + BackoffMaxDefault.String()},
		{"Config.BatchSize", c.BatchSize < 0 || c.BatchSize > 10000, c.BatchSize, fmt.Sprintf("use 1 to 10000, or 0 for the default %d", BatchSizeDefault)},
		{"Config.HeartbeatInterval", c.HeartbeatInterval < 0 || (c.HeartbeatInterval > 0 && c.HeartbeatInterval < 10*time.Millisecond), c.HeartbeatInterval, "use at least 10ms, or 0 for the default " + HeartbeatIntervalDefault.String()},
		{"Config.LeaseDuration", c.LeaseDuration < 0 || (c.LeaseDuration > 0 && c.LeaseDuration < 100*time.Millisecond), c.LeaseDuration, "use at least 100ms (longer than a publish takes), or 0 for the default " + LeaseDurationDefault.String()},
		{"Config.MaxAttempts", c.MaxAttempts < 0, c.MaxAttempts, fmt.Sprintf("use a positive count, or 0 for the default %d", MaxAttemptsDefault)},
		{"Config.PauseCheckInterval", c.PauseCheckInterval < 0, c.PauseCheckInterval, "use a positive duration, or 0 for the default " + PauseCheckIntervalDefault.String()},
		{"Config.PollInterval", c.PollInterval < 0, c.PollInterval, "use a positive duration, or 0 for the default " + PollIntervalDefault.String()},
		{"Config.Retention", c.Retention < 0, c.Retention, "use a positive duration to keep published messages, or 0 to delete them on publish"},
		{"Config.RetentionBatch", c.RetentionBatch < 0, c.RetentionBatch, fmt.Sprintf("use a positive count, or 0 for the default %d", RetentionBatchDefault)},
		{"Config.Workers", c.Workers < 0 || c.Workers > 1000, c.Workers, fmt.Sprintf("use 1 to 1000, or 0 for the default %d", WorkersDefault)},
	}
	for _, ch := range checks {
		if ch.bad {
			return c, &ConfigError{Field: ch.field, Value: ch.value, Fix: ch.fix}
		}
	}
	setDefault(&c.ActivePollInterval, ActivePollIntervalDefault)
	setDefault(&c.BackoffBase, BackoffBaseDefault)
	setDefault(&c.BackoffMax, BackoffMaxDefault)
	setDefault(&c.BatchSize, BatchSizeDefault)
	setDefault(&c.HeartbeatInterval, HeartbeatIntervalDefault)
	setDefault(&c.LeaseDuration, LeaseDurationDefault)
	setDefault(&c.MaxAttempts, MaxAttemptsDefault)
	setDefault(&c.PauseCheckInterval, PauseCheckIntervalDefault)
	setDefault(&c.PollInterval, PollIntervalDefault)
	setDefault(&c.RetentionBatch, RetentionBatchDefault)
	setDefault(&c.Workers, WorkersDefault)
	if c.Observer == nil {
		c.Observer = noObserver{}
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	for topic, rate := range c.TopicRateLimits {
		if topic == "" || !(rate > 0) || math.IsInf(rate, 1) {
			return c, &ConfigError{Field: fmt.Sprintf("Config.TopicRateLimits[%q]", topic), Value: rate,
				Fix: "name a topic and give it a positive number of messages per second, or leave the topic out to publish it unlimited"}
		}
	}
	switch {
	case c.BackoffMax < c.BackoffBase:
		return c, &ConfigError{Field: "Config.BackoffMax", Value: c.BackoffMax, Fix: "must be at least Config.BackoffBase (" + c.BackoffBase.String() + ")"}
	case c.ActivePollInterval > c.PollInterval:
		return c, &ConfigError{Field: "Config.ActivePollInterval", Value: c.ActivePollInterval, Fix: "must be at most Config.PollInterval (" + c.PollInterval.String() + ")"}
	}
	return c, nil
}

func setDefault[T comparable](field *T, def T) {
	var zero T
	if *field == zero {
		*field = def
	}
}
