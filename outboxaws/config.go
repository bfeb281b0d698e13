package outboxaws

import (
	"log/slog"
	"time"

	"github.com/go-outbox/outbox"
)

// Defaults of Config.
const (
	// DefaultGroupIDDefault is the message group of messages without a key
	// on a FIFO queue or topic. The relay keeps no order among messages
	// without a key, and one group is consumed one message at a time: a
	// slow or failing keyless message holds back the others.
	DefaultGroupIDDefault = "outbox"
	// MaxMessageSizeDefault is the largest message, body and attributes
	// counted as SQS and SNS count them: 256 KiB, SNS's limit and the
	// limit of SQS queues made before 2025 (SQS now allows up to 1 MiB on a
	// queue whose MaximumMessageSize says so).
	MaxMessageSizeDefault = 256 << 10
	// ThrottleDelayDefault is how long the relay waits before trying a
	// message again after AWS throttled it: long enough for a request
	// rate to fall back under its quota, short next to an outage.
	ThrottleDelayDefault = time.Second
	// TimeoutDefault bounds one Publish call: its batch requests go at once
	// and take a round trip each.
	TimeoutDefault = 10 * time.Second
)

// Config configures an SQSPublisher or an SNSPublisher. The zero value has
// every default.
type Config struct {
	// DefaultGroupID is the MessageGroupId of messages without a key on a
	// FIFO queue or topic. Empty means DefaultGroupIDDefault.
	DefaultGroupID string
	// Logger receives, at ERROR level, the configuration errors an operator
	// must fix (a missing queue or topic, access denied) with the fix, at
	// most once per ConfigErrorLogInterval each. Nil means slog.Default().
	Logger *slog.Logger
	// MaxMessageSize is the largest message, in bytes, the publisher sends,
	// counting the body and every attribute's name, type and value as AWS
	// does: a larger one fails permanently with ErrTooLarge, unsent. Zero
	// means MaxMessageSizeDefault; at most 1 MiB for SQS.
	MaxMessageSize int
	// ThrottleDelay is the shortest wait before a message AWS throttled is
	// tried again (outbox.RetryAfter). Zero means ThrottleDelayDefault.
	ThrottleDelay time.Duration
	// Timeout bounds one Publish call, whatever the context allows;
	// messages without a reply by then are retryable. Zero means
	// TimeoutDefault.
	Timeout time.Duration
}

// Validate reports the first invalid field of c as a *outbox.ConfigError, or
// nil. The constructors validate too.
func (c Config) Validate() error {
	_, err := c.withDefaults()
	return err
}

func (c Config) withDefaults() (Config, error) {
	bad := func(field string, value any, fix string) (Config, error) {
		return c, &outbox.ConfigError{Field: "outboxaws.Config." + field, Value: value, Fix: fix}
	}
	switch {
	case c.MaxMessageSize < 0 || c.MaxMessageSize > 1<<20:
		return bad("MaxMessageSize", c.MaxMessageSize, "use a number of bytes up to 1 MiB (SQS's largest; SNS allows 256 KiB), or 0 for the default 256 KiB")
	case c.ThrottleDelay < 0:
		return bad("ThrottleDelay", c.ThrottleDelay, "use a positive duration, or 0 for the default "+ThrottleDelayDefault.String())
	case c.Timeout < 0:
		return bad("Timeout", c.Timeout, "use a positive duration, or 0 for the default "+TimeoutDefault.String())
	case c.DefaultGroupID != "" && !validDedupOrGroup(c.DefaultGroupID):
		return bad("DefaultGroupID", c.DefaultGroupID, "use 1 to 128 characters of letters, digits and punctuation")
	}
	if c.DefaultGroupID == "" {
		c.DefaultGroupID = DefaultGroupIDDefault
	}
	if c.MaxMessageSize == 0 {
		c.MaxMessageSize = MaxMessageSizeDefault
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
