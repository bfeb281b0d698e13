package outboxredis

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/go-outbox/outbox"
)

// Defaults of Config.
const (
	// ThrottleDelayDefault is how long the relay waits before trying a
	// message again after Redis refused it for a passing reason (OOM under
	// maxmemory, BUSY with a script running, a cluster failing over): long
	// enough for an eviction or a script to end, short next to an outage.
	ThrottleDelayDefault = time.Second
	// TimeoutDefault bounds one batch's pipeline. A pipeline of XADDs takes
	// a round trip; the margin covers a server pausing for a fork or a
	// failover.
	TimeoutDefault = 10 * time.Second
)

// Config configures a Publisher. The zero value appends each message to the
// stream named by its topic, untrimmed, with every default.
type Config struct {
	// Logger receives, at ERROR level, the configuration errors an operator
	// must fix (a stream key holding another type, refused credentials)
	// with the fix, at most once per ConfigErrorLogInterval each. Nil means
	// slog.Default().
	Logger *slog.Logger
	// MaxLen, if positive, trims every stream a message is appended to to
	// about MaxLen entries (XADD MAXLEN ~ MaxLen: Redis trims whole radix
	// tree nodes, so a stream keeps a little more). Entries go whether or
	// not a consumer group has read them: make it larger than the backlog
	// consumers may fall behind by. 0 means no trimming.
	MaxLen int64
	// MaxPayload, if positive, is the largest payload, in bytes, the
	// publisher appends: a larger message fails permanently without being
	// sent. 0 means no limit of the publisher's own (the outbox's, 1 MiB by
	// default, and Redis's 512 MB per value still apply).
	MaxPayload int
	// Stream, if set, is the one stream every message is appended to.
	// Set at most one of Stream, StreamFor and StreamPrefix.
	Stream string
	// StreamFor maps a message to its stream. A function returning "" makes
	// that message fail permanently.
	StreamFor func(m outbox.Message) string
	// StreamPrefix is put before every topic, verbatim: with "events:" the
	// topic "orders.created" goes to the stream "events:orders.created".
	StreamPrefix string
	// ThrottleDelay is the shortest wait before a message Redis refused for
	// a passing reason is tried again (outbox.RetryAfter). Zero means
	// ThrottleDelayDefault.
	ThrottleDelay time.Duration
	// Timeout bounds one batch's pipeline, whatever the context allows;
	// messages without a reply by then are retryable. Zero means
	// TimeoutDefault. Open raises its client's ReadTimeout and WriteTimeout
	// to Timeout (unless the URL sets them); a client given to New cuts a
	// batch at its own ReadTimeout or WriteTimeout if they are shorter.
	Timeout time.Duration
}

// Validate reports the first invalid field of c as a *outbox.ConfigError, or
// nil. New and Open validate too.
func (c Config) Validate() error {
	_, err := c.withDefaults()
	return err
}

func (c Config) withDefaults() (Config, error) {
	bad := func(field string, value any, fix string) (Config, error) {
		return c, &outbox.ConfigError{Field: "outboxredis.Config." + field, Value: value, Fix: fix}
	}
	set := 0
	for _, s := range []bool{c.Stream != "", c.StreamFor != nil, c.StreamPrefix != ""} {
		if s {
			set++
		}
	}
	switch {
	case c.MaxLen < 0:
		return bad("MaxLen", c.MaxLen, "use a positive number of entries to keep, or 0 for no trimming")
	case c.MaxPayload < 0:
		return bad("MaxPayload", c.MaxPayload, "use a positive number of bytes, or 0 for no limit of the publisher's own")
	case c.ThrottleDelay < 0:
		return bad("ThrottleDelay", c.ThrottleDelay, "use a positive duration, or 0 for the default "+ThrottleDelayDefault.String())
	case c.Timeout < 0:
		return bad("Timeout", c.Timeout, "use a positive duration, or 0 for the default "+TimeoutDefault.String())
	case set > 1:
		return bad("Stream", fmt.Sprintf("Stream %q, StreamPrefix %q, StreamFor set: %v", c.Stream, c.StreamPrefix, c.StreamFor != nil),
			"set at most one of Stream (one stream for all), StreamPrefix (prefix + topic) and StreamFor (a function)")
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
