package outboxredis

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/loglimit"
)

// The fields of every stream entry. Consumers read the outbox id from
// FieldID and drop an entry whose id they have seen (the inbox does).
const (
	// FieldID carries Message.ID as text.
	FieldID = "id"
	// FieldKey carries Message.Key; it is absent when the key is empty.
	FieldKey = "key"
	// FieldPayload carries Message.Payload, unchanged.
	FieldPayload = "payload"
	// FieldTopic carries Message.Topic, which the stream name may not show
	// (Config.Stream, StreamPrefix or StreamFor).
	FieldTopic = "topic"
	// HeaderFieldPrefix is put before each header name to make its field:
	// the header "trace-id" is the field "h:trace-id". The prefix keeps
	// headers apart from the fields above, whatever their names.
	HeaderFieldPrefix = "h:"
)

// ConfigErrorLogInterval is the shortest time between two ERROR logs of the
// same configuration error (a stream key of another type, refused
// credentials): every batch fails until an operator fixes it, and one line a
// minute tells them without flooding the log.
const ConfigErrorLogInterval = time.Minute

// ErrClosed is returned, for every message, by Publish after Close. It
// matches outbox.ErrClosed with errors.Is and is retryable: another relay
// instance, or this one after a restart, publishes the messages.
var ErrClosed = outbox.ClosedError("outboxredis: publisher closed")

// ErrNotStream means the key a message's stream maps to holds another type
// (a string, a list...): Redis refuses XADD with WRONGTYPE. It is a
// configuration error: retryable (counting an attempt, as the operator's fix
// of deleting or renaming the key makes the same message publishable), and
// logged at ERROR level with the fix at most once per ConfigErrorLogInterval
// per stream.
var ErrNotStream = errors.New("the key exists and is not a stream")

// ErrCheckNotPermitted means Check could not run PING or TYPE: the ACL user
// may not (NOPERM). The credentials were accepted, and a user allowed only
// XADD on the streams publishes fine, so it is no reason to refuse to start:
// grant +ping +type to check, or go on without the check.
var ErrCheckNotPermitted = errors.New("the Redis user may not run the start check (PING, TYPE)")

// ErrTooLarge means a message's payload is over Config.MaxPayload. It is
// permanent.
var ErrTooLarge = errors.New("payload over Config.MaxPayload")

// errNoID is the cause for a message without id: consumers could not tell
// it from the others.
var errNoID = errors.New("message has no id; write messages through an outbox Writer")

// errNoReply is the cause for an XADD go-redis reports neither appended nor
// failed.
var errNoReply = errors.New("no reply with an entry id")

// errNoStream is the cause for a message Config.StreamFor maps to "".
var errNoStream = errors.New("no stream: Config.StreamFor returned an empty name")

// PublishError is the outcome of a message Redis did not append. A
// permanent one is wrapped by outbox.Permanent (test with
// outbox.IsPermanent); errors.As finds the *PublishError either way.
type PublishError struct {
	// ID is the outbox message id.
	ID uuid.UUID
	// Stream is the stream the message was (or would have been) appended to.
	Stream string
	// Err is the cause: a go-redis or network error, a Redis error reply,
	// ErrNotStream, ErrTooLarge, ErrClosed or the context's error.
	Err error
}

// Error names the message, its stream and the cause.
func (e *PublishError) Error() string {
	return fmt.Sprintf("outboxredis: message %s to stream %q: %v", e.ID, e.Stream, e.Err)
}

// Unwrap returns the cause.
func (e *PublishError) Unwrap() error { return e.Err }

// Publisher appends outbox messages to Redis streams; see the package
// documentation. It is safe for concurrent use by several relay workers.
type Publisher struct {
	cfg    Config
	client redis.UniversalClient
	owned  bool // Open made client: Close closes it

	mu     sync.RWMutex // held for reading by Publish, for writing by Close
	closed bool

	// configLog spaces out the ERROR logs of configuration errors.
	configLog loglimit.Limiter
}

// New returns a publisher using client, which the caller owns: Close stops
// the publisher but leaves the client open. Any go-redis client does
// (*redis.Client, *redis.ClusterClient, *redis.Ring, a failover client);
// give it ContextTimeoutEnabled so a batch's Timeout bounds its reads. The
// client's ReadTimeout and WriteTimeout (3 s by default) bound each read and
// write whatever the context allows, so they cap Config.Timeout: set them
// at least as long. New never connects, and returns a *outbox.ConfigError if
// cfg is invalid.
func New(client redis.UniversalClient, cfg Config) (*Publisher, error) {
	if client == nil {
		return nil, &outbox.ConfigError{Field: "outboxredis.New client", Value: "nil", Fix: "pass a go-redis client, e.g. redis.NewClient(opts), or use outboxredis.Open"}
	}
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	return &Publisher{cfg: cfg, client: client, configLog: loglimit.Limiter{Interval: ConfigErrorLogInterval}}, nil
}

// Open returns a publisher owning a client for the Redis server at url,
// redis://[user:password@]host[:port][/db] (rediss:// for TLS; go-redis's
// URL options such as ?dial_timeout=3s apply), which Close closes. It does
// not connect: the first Publish does, so a relay can start while Redis is
// down; call Check to find out at start whether the server answers. It sets
// no client name (CLIENT SETNAME needs an ACL permission a publishing user
// need not have): give ?client_name=outbox-relay in the URL to name it.
func Open(rawURL string, cfg Config) (*Publisher, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	opts, err := redis.ParseURL(rawURL)
	if err != nil {
		// The error may quote the URL, password and all.
		return nil, fmt.Errorf("outboxredis: %s is not a valid Redis URL: use redis://[user:password@]host[:port][/db] (percent-encode special characters)", RedactURL(rawURL))
	}
	opts.ContextTimeoutEnabled = true
	// go-redis's read and write timeouts (5 s from a URL) bound every socket
	// read and write whatever the context allows: raised to Config.Timeout,
	// they let it bound the batch as documented, unless the URL sets them.
	query := url.Values{}
	if u, err := url.Parse(rawURL); err == nil {
		query = u.Query()
	}
	if !query.Has("read_timeout") && opts.ReadTimeout >= 0 {
		opts.ReadTimeout = max(opts.ReadTimeout, cfg.Timeout)
	}
	if !query.Has("write_timeout") && opts.WriteTimeout >= 0 {
		opts.WriteTimeout = max(opts.WriteTimeout, cfg.Timeout)
	}
	if opts.MaxRetries == 0 {
		// go-redis would send a pipeline again after a broken connection,
		// appending twice what Redis had appended before the break, and
		// would report a failed redial as if nothing had been sent: the
		// relay retries instead, knowing what it did.
		opts.MaxRetries = -1
	}
	if opts.DialerRetries == 0 {
		// go-redis dials five times, 100 ms apart, before failing a
		// command: the relay's own pause on an unavailable publisher does
		// that job, and a batch fails fast while Redis is down.
		opts.DialerRetries = 1
	}
	p, err := New(redis.NewClient(opts), cfg)
	if err != nil {
		return nil, err
	}
	p.owned = true
	return p, nil
}

// RedactURL returns url without its user information and query, for logs
// and errors.
func RedactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return "(unparsable URL)"
	}
	u.User, u.RawQuery, u.Fragment = nil, "", ""
	return u.String()
}

// Client returns the go-redis client the publisher uses.
func (p *Publisher) Client() redis.UniversalClient { return p.client }

// Close stops the publisher: later calls of Publish fail with ErrClosed. It
// waits for the Publish calls in flight, then closes the client if Open made
// it; a client given to New stays open. Close is idempotent and returns nil
// once the publisher is closed.
func (p *Publisher) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil
	}
	p.closed = true
	if p.owned {
		if err := p.client.Close(); err != nil && !errors.Is(err, redis.ErrClosed) {
			return fmt.Errorf("outboxredis: close client: %w", err)
		}
	}
	return nil
}

// Publish appends the batch with one pipeline of XADDs (one round trip) and
// reports each message's outcome from its own reply, within Config.Timeout
// or the end of ctx; see the package documentation for the outcomes.
func (p *Publisher) Publish(ctx context.Context, batch []outbox.Message) []error {
	errs := make([]error, len(batch))
	if len(batch) == 0 {
		return errs
	}
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.closed {
		for i := range batch {
			errs[i] = &PublishError{ID: batch[i].ID, Stream: p.stream(&batch[i]), Err: ErrClosed}
		}
		return errs
	}
	ctx, cancel := context.WithTimeoutCause(ctx, p.cfg.Timeout,
		fmt.Errorf("Config.Timeout (%v) expired: %w", p.cfg.Timeout, context.DeadlineExceeded))
	defer cancel()

	streams := make([]string, len(batch))
	cmds := make([]*redis.StringCmd, len(batch))
	pipe := p.client.Pipeline()
	for i := range batch {
		m := &batch[i]
		streams[i] = p.stream(m)
		if ctx.Err() != nil {
			errs[i] = &PublishError{ID: m.ID, Stream: streams[i], Err: fmt.Errorf("not sent: %w", context.Cause(ctx))}
			continue
		}
		args, err := p.entry(m, streams[i])
		if err != nil {
			errs[i] = outbox.Permanent(&PublishError{ID: m.ID, Stream: streams[i], Err: err})
			continue
		}
		cmds[i] = pipe.XAdd(ctx, args)
	}
	if pipe.Len() == 0 {
		return errs
	}
	_, execErr := pipe.Exec(ctx)
	for i, cmd := range cmds {
		if cmd == nil {
			continue
		}
		// Only a reply with the entry's id proves the append. go-redis
		// sets no error on the commands when the connection could not be
		// set up (a refused password fails the whole Exec), so a command
		// without error or id takes Exec's.
		err := cmd.Err()
		if err == nil && cmd.Val() == "" {
			err = cmp.Or(execErr, errNoReply)
		}
		if err != nil {
			errs[i] = p.classify(ctx, &PublishError{ID: batch[i].ID, Stream: streams[i], Err: err})
		}
	}
	return errs
}

func (p *Publisher) stream(m *outbox.Message) string {
	switch {
	case p.cfg.Stream != "":
		return p.cfg.Stream
	case p.cfg.StreamFor != nil:
		return p.cfg.StreamFor(*m)
	}
	return p.cfg.StreamPrefix + m.Topic
}

// entry builds the XADD of m, or returns why m can never be appended.
func (p *Publisher) entry(m *outbox.Message, stream string) (*redis.XAddArgs, error) {
	switch {
	case m.ID == uuid.Nil:
		return nil, errNoID
	case stream == "":
		return nil, errNoStream
	case p.cfg.MaxPayload > 0 && len(m.Payload) > p.cfg.MaxPayload:
		return nil, fmt.Errorf("%w: %d bytes, the limit is %d", ErrTooLarge, len(m.Payload), p.cfg.MaxPayload)
	}
	values := make([]any, 0, 8+2*len(m.Headers))
	values = append(values, FieldID, m.ID.String(), FieldTopic, m.Topic)
	if m.Key != "" {
		values = append(values, FieldKey, m.Key)
	}
	values = append(values, FieldPayload, m.Payload)
	for name, v := range m.Headers {
		values = append(values, HeaderFieldPrefix+name, v)
	}
	args := &redis.XAddArgs{Stream: stream, ID: "*", Values: values}
	if p.cfg.MaxLen > 0 {
		args.MaxLen, args.Approx = p.cfg.MaxLen, true
	}
	return args, nil
}

// classify marks e by what a retry can do: permanent when none can deliver
// its message, unavailable when the message certainly did not leave (no
// connection could be made), delayed when Redis asked to wait, plainly
// retryable otherwise. Configuration errors are logged with their fix.
func (p *Publisher) classify(ctx context.Context, e *PublishError) error {
	err := e.Err
	switch {
	case isDialError(err):
		return outbox.Unavailable(e)
	case redis.HasErrorPrefix(err, "WRONGTYPE"):
		fix := fmt.Sprintf("key %q holds another type than a stream: rename or delete that key, or map the messages to another stream (Config.Stream, StreamPrefix or StreamFor)", e.Stream)
		p.logConfigError(e.Stream, err, fix)
		e.Err = fmt.Errorf("%w (%v); fix: %s", ErrNotStream, err, fix)
		// Retryable: deleting or renaming the key fixes it, and the same
		// message is then appended; dead-lettering it would lose it for a
		// mistake that is not the message's.
		return e
	case redis.HasErrorPrefix(err, "LOADING"):
		// The server is loading its data set and stores nothing yet.
		return outbox.Unavailable(e)
	case redis.HasErrorPrefix(err, "OOM"), redis.HasErrorPrefix(err, "BUSY"),
		redis.HasErrorPrefix(err, "TRYAGAIN"), redis.HasErrorPrefix(err, "CLUSTERDOWN"),
		redis.HasErrorPrefix(err, "MASTERDOWN"):
		return outbox.RetryAfter(e, p.cfg.ThrottleDelay)
	case redis.HasErrorPrefix(err, "NOAUTH"), redis.HasErrorPrefix(err, "WRONGPASS"), redis.HasErrorPrefix(err, "NOPERM"):
		p.logConfigError("", err, "check the user and password given for Redis (the URL's user information), and that the ACL user may run XADD on the streams")
		return e
	case ctxEnded(ctx, err) && !errors.Is(err, context.Cause(ctx)):
		e.Err = fmt.Errorf("%w (%v)", context.Cause(ctx), err)
	}
	return e
}

// ctxEnded reports whether ctx has ended, waiting a moment for it when err
// is a network timeout: go-redis sets the socket deadline to the context's,
// and the read can time out just before the context's own timer fires.
func ctxEnded(ctx context.Context, err error) bool {
	var ne net.Error
	if ctx.Err() == nil && errors.As(err, &ne) && ne.Timeout() {
		if _, ok := ctx.Deadline(); ok {
			select {
			case <-ctx.Done():
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	return ctx.Err() != nil
}

// isDialError reports whether err is a failure to open a connection, which
// proves nothing was sent on it.
func isDialError(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// logConfigError logs err, a configuration error, with its fix at ERROR
// level, unless it was logged for stream within ConfigErrorLogInterval.
func (p *Publisher) logConfigError(stream string, err error, fix string) {
	if !p.configLog.Allow(stream + "\x00" + fix) {
		return
	}
	attrs := []any{slog.String("fix", fix), slog.Any("error", err)}
	if stream != "" {
		attrs = append([]any{slog.String("stream", stream)}, attrs...)
	}
	p.cfg.Logger.Error("outboxredis: cannot publish until the configuration is fixed", attrs...)
}

// Check tells at start whether publishing can work: the server answers
// PING, and Config.Stream and each of streams, if it exists, is a stream (a
// stream that does not exist yet is fine: XADD creates it). The error says
// what is wrong and how to fix it; a key of another type matches
// ErrNotStream, and an ACL user without +ping or +type matches
// ErrCheckNotPermitted (publishing needs only +xadd on the stream keys).
func (p *Publisher) Check(ctx context.Context, streams ...string) error {
	if err := p.client.Ping(ctx).Err(); err != nil {
		if redis.HasErrorPrefix(err, "NOPERM") {
			return fmt.Errorf("outboxredis: PING: %w (%v); grant the user +ping +type to check at start", ErrCheckNotPermitted, err)
		}
		return fmt.Errorf("outboxredis: the Redis server does not answer PING: %w", err)
	}
	if p.cfg.Stream != "" {
		streams = append([]string{p.cfg.Stream}, streams...)
	}
	for _, s := range streams {
		typ, err := p.client.Type(ctx, s).Result()
		if redis.HasErrorPrefix(err, "NOPERM") {
			return fmt.Errorf("outboxredis: TYPE %q: %w (%v); grant the user +type on the stream keys to check at start", s, ErrCheckNotPermitted, err)
		}
		if err != nil {
			return fmt.Errorf("outboxredis: TYPE %q: %w", s, err)
		}
		if typ != "none" && typ != "stream" {
			return fmt.Errorf("outboxredis: stream %q: %w (it is a %s); rename or delete that key, or publish to another stream", s, ErrNotStream, strings.ToLower(typ))
		}
	}
	return nil
}
