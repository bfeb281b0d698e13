package outboxamqp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/backoff"
	"github.com/go-outbox/outbox/internal/loglimit"
)

// Names the publisher gives a message besides the application headers.
const (
	// HeaderKey is the header carrying Message.Key; it is absent when the
	// key is empty. An application header of that name is replaced.
	HeaderKey = "Outbox-Key"
	// ContentTypeHeader is the application header that becomes the AMQP
	// content-type property instead of a header (matched in any case), and
	// that FromDelivery restores, in lower case.
	ContentTypeHeader = "content-type"
)

// Defaults of Config.
const (
	// ConfirmTimeoutDefault bounds the wait for a batch's confirms. RabbitMQ
	// confirms a persistent message once its queues have it on disk, which
	// takes milliseconds; a longer wait means a blocked or overloaded
	// broker, and the messages are better retried than left leased.
	ConfirmTimeoutDefault = 10 * time.Second
	// DialTimeoutDefault bounds connecting: TCP, TLS and the AMQP handshake.
	DialTimeoutDefault = 10 * time.Second
)

// maxShortString is AMQP's limit for exchange names and routing keys.
const maxShortString = 255

// ConfigErrorLogInterval is the shortest time between two ERROR logs of the
// same configuration error (refused credentials, a missing exchange): every
// batch fails until an operator fixes it, and one line a minute tells them
// without flooding the log.
const ConfigErrorLogInterval = time.Minute

// sendGrace is how long sending may go on after the context ended before
// the connection is torn down: writes block when the broker stops reading
// (a resource alarm), and nothing else would unblock them.
const sendGrace = 2 * time.Second

// ErrClosed is returned, for every message, by Publish after Close. It
// matches outbox.ErrClosed with errors.Is and is retryable: another relay
// instance, or this one after a restart, publishes the messages.
var ErrClosed = outbox.ClosedError("outboxamqp: publisher closed")

// Causes of a *PublishError. Test for them with errors.Is.
var (
	// ErrNacked means the broker refused responsibility for the message
	// (basic.nack: an internal error, a queue with overflow reject-publish
	// that is full). Retryable.
	ErrNacked = errors.New("broker nacked the message")
	// ErrNotConfirmed means the channel or connection closed before the
	// broker confirmed the message: the broker may or may not have it, so
	// the message is retried (a duplicate is possible, a loss is not).
	ErrNotConfirmed = errors.New("channel closed before the broker confirmed the message")
	// ErrUnroutable means the broker returned the message (mandatory flag)
	// because no queue is bound to the exchange for its routing key.
	// Retryable, or permanent with Config.UnroutablePermanent.
	ErrUnroutable = errors.New("no queue bound for the routing key: the broker returned the message")
	// ErrInvalidRoutingKey means the routing key is longer than AMQP allows
	// (255 bytes). Permanent.
	ErrInvalidRoutingKey = errors.New("invalid routing key")
	// ErrTooLarge means the message's body is over the broker's
	// max_message_size. Permanent. The broker closes the channel over such
	// a message; the other messages of its batch are published again on a
	// fresh channel, and later batches on the same connection check the
	// size before sending.
	ErrTooLarge = errors.New("message body over the broker's max_message_size")
)

// errNoID is the cause for a message without id: consumers could not tell
// it from the next one without id.
var errNoID = errors.New("message has no id; write messages through an outbox Writer")

// PublishError is the outcome of a message the broker did not confirm, or
// returned. A permanent one is wrapped by outbox.Permanent (test with
// outbox.IsPermanent); errors.As finds the *PublishError either way.
type PublishError struct {
	// ID is the outbox message id.
	ID uuid.UUID
	// Broker is the broker's address without password, e.g.
	// amqp://guest@127.0.0.1:5672/.
	Broker string
	// Exchange and RoutingKey are where the message was (or would have
	// been) published.
	Exchange, RoutingKey string
	// Err is the cause: ErrNacked, ErrNotConfirmed, ErrUnroutable,
	// ErrInvalidRoutingKey, ErrClosed, a connection error or the context's
	// error.
	Err error
}

func (e *PublishError) Error() string {
	return fmt.Sprintf("outboxamqp: message %s to exchange %q with routing key %q at %s: %v",
		e.ID, e.Exchange, e.RoutingKey, e.Broker, e.Err)
}

// Unwrap returns the cause.
func (e *PublishError) Unwrap() error { return e.Err }

// Config configures a Publisher. The zero value publishes to the default
// exchange, with each message's topic as routing key (so to the queue named
// like the topic), and every default.
type Config struct {
	// AMQP is the amqp091 connection configuration: TLS, SASL, heartbeat,
	// client properties. Vhost and credentials come from the URL unless
	// set here. Its Dial, if set, opens the TCP connection.
	AMQP amqp.Config
	// ConfirmTimeout bounds the wait for a batch's confirms, whatever the
	// context allows; unconfirmed messages are then retryable. Zero means
	// ConfirmTimeoutDefault.
	ConfirmTimeout time.Duration
	// DialTimeout bounds each connection attempt. Zero means
	// DialTimeoutDefault.
	DialTimeout time.Duration
	// Exchange is the exchange every message is published to. Empty means
	// the default exchange, which routes a message to the queue named by
	// its routing key. The exchange must exist: publishing to a missing one
	// fails the batch, retryably (counting attempts), with the broker's 404
	// NOT_FOUND, and logs the fix at ERROR level.
	Exchange string
	// Logger receives connection events (lost, re-established) and, at
	// ERROR level, the configuration errors an operator must fix (refused
	// credentials or virtual host, a missing exchange, no write
	// permission) with the fix, at most once per ConfigErrorLogInterval
	// each. Nil means slog.Default().
	Logger *slog.Logger
	// RoutingKey maps a message to its routing key. Nil means m.Topic. A
	// key over 255 bytes makes that message fail permanently.
	RoutingKey func(m outbox.Message) string
	// UnroutablePermanent makes an unroutable message (returned by the
	// broker because no queue is bound for its routing key) fail
	// permanently, so the relay dead-letters it at once. By default it is
	// retried with backoff: a missing binding is usually a deployment
	// order or configuration problem that an operator fixes, after which
	// the retries deliver; dead-lettering would need a manual retry. Set it
	// when unbound routing keys are expected and a dead letter is the
	// right record of them.
	UnroutablePermanent bool
}

// Validate reports the first invalid field of c as a *outbox.ConfigError, or
// nil. Open and Dial validate too.
func (c Config) Validate() error {
	_, err := c.withDefaults()
	return err
}

func (c Config) withDefaults() (Config, error) {
	bad := func(field string, value any, fix string) (Config, error) {
		return c, &outbox.ConfigError{Field: "outboxamqp.Config." + field, Value: value, Fix: fix}
	}
	switch {
	case c.ConfirmTimeout < 0:
		return bad("ConfirmTimeout", c.ConfirmTimeout, "use a positive duration, or 0 for the default "+ConfirmTimeoutDefault.String())
	case c.DialTimeout < 0:
		return bad("DialTimeout", c.DialTimeout, "use a positive duration, or 0 for the default "+DialTimeoutDefault.String())
	case len(c.Exchange) > maxShortString:
		return bad("Exchange", c.Exchange[:32]+"...", "exchange names are at most 255 bytes")
	}
	if c.ConfirmTimeout == 0 {
		c.ConfirmTimeout = ConfirmTimeoutDefault
	}
	if c.DialTimeout == 0 {
		c.DialTimeout = DialTimeoutDefault
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c, nil
}

// Publisher publishes outbox messages to a RabbitMQ (AMQP 0-9-1) broker with
// publisher confirms; see the package documentation. It is safe for
// concurrent use: each concurrent Publish call uses a channel of its own on
// one shared connection.
type Publisher struct {
	cfg    Config
	url    string // with credentials: never print it
	broker string // url without password, for errors and logs
	log    *slog.Logger

	mu      sync.Mutex
	closed  bool
	done    chan struct{} // closed by Close
	conn    *connection   // nil until connected, and after the connection is lost
	dialing *dialAttempt  // the connection attempt in progress, if any
	// After a failed dial, calls until nextDial fail at once with
	// dialErr instead of dialing: a broker that is down is not hammered
	// by every batch of every worker.
	dialErr      error
	dialFailures int
	nextDial     time.Time
	idle         []*channel // channels of conn free for the next batch

	// configLog spaces out the ERROR logs of configuration errors.
	configLog loglimit.Limiter
}

// Open returns a publisher for the broker at url
// (amqp://user:password@host:5672/vhost, or amqps:// for TLS) without
// connecting: the first Publish connects, as does every Publish after the
// connection was lost. Use it where the broker may be down at start, such as
// a relay process, which then starts anyway and retries. Close releases the
// connection.
func Open(url string, cfg Config) (*Publisher, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	uri, err := amqp.ParseURI(url)
	if err != nil {
		return nil, fmt.Errorf("outboxamqp: the URL is not an AMQP URI (amqp://user:password@host:5672/vhost): %v", uriError(err))
	}
	broker := redactURI(uri)
	return &Publisher{
		cfg:    cfg,
		url:    url,
		broker: broker,
		log:    cfg.Logger.With(slog.String("broker", broker)),
		done:   make(chan struct{}),

		configLog: loglimit.Limiter{Interval: ConfigErrorLogInterval},
	}, nil
}

// Dial is Open, then Ping within Config.DialTimeout: it fails if the broker
// cannot be reached, refuses the credentials or virtual host, or has no
// exchange named Config.Exchange. Later losses of the connection are
// repaired by Publish.
func Dial(url string, cfg Config) (*Publisher, error) {
	p, err := Open(url, cfg)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), p.cfg.DialTimeout)
	defer cancel()
	if err := p.Ping(ctx); err != nil {
		_ = p.Close()
		return nil, err
	}
	return p, nil
}

// uriError drops the *url.Error wrapper of a parse error: it quotes the
// URL, password included.
func uriError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// redactURI returns the address of uri without password:
// scheme://user@host:port/vhost.
func redactURI(uri amqp.URI) string {
	var b strings.Builder
	b.WriteString(uri.Scheme)
	b.WriteString("://")
	if uri.Username != "" {
		b.WriteString(url.PathEscape(uri.Username))
		b.WriteString("@")
	}
	b.WriteString(net.JoinHostPort(uri.Host, strconv.Itoa(uri.Port)))
	b.WriteString("/")
	if uri.Vhost != "/" {
		b.WriteString(url.PathEscape(uri.Vhost))
	}
	return b.String()
}

// Broker returns the broker's address without password.
func (p *Publisher) Broker() string { return p.broker }

// Ping connects if the publisher is not connected, opens a channel and
// checks that Config.Exchange exists, returning why that failed: a
// connection error, or the broker's *amqp.Error (403 ACCESS_REFUSED for
// credentials, 404 NOT_FOUND for the exchange...). Publish connects by
// itself; Ping is for checking a configuration at start-up.
func (p *Publisher) Ping(ctx context.Context) error {
	c, err := p.channel(ctx)
	if err != nil {
		return fmt.Errorf("outboxamqp: %s: %w", p.broker, err)
	}
	p.release(c, false)
	if p.cfg.Exchange == "" {
		return nil
	}
	// A passive declare that fails closes its channel: use one of its own.
	closeChannel := func(ch *amqp.Channel) { _ = ch.Close() }
	ch, err := awaitRPC(ctx, p, c.conn, "opening a channel", c.conn.amqp.Channel, closeChannel)
	if err != nil {
		return fmt.Errorf("outboxamqp: %s: open channel: %w", p.broker, err)
	}
	_, err = awaitRPC(ctx, p, c.conn, "declaring the exchange", func() (struct{}, error) {
		err := ch.ExchangeDeclarePassive(p.cfg.Exchange, amqp.ExchangeDirect, false, false, false, false, nil)
		return struct{}{}, err
	}, nil)
	go closeChannel(ch) // an RPC too: Ping must not wait for it
	if err != nil {
		return fmt.Errorf("outboxamqp: %s: exchange %q: %w", p.broker, p.cfg.Exchange, err)
	}
	return nil
}

// Close closes the connection; Publish calls in flight report their
// unconfirmed messages as retryable, later calls fail with ErrClosed. Close
// is idempotent.
func (p *Publisher) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	close(p.done)
	conn := p.conn
	p.conn, p.idle = nil, nil
	p.mu.Unlock()
	if conn != nil {
		conn.close()
	}
	return nil
}

// Publish publishes the batch on a channel in confirm mode, every message
// with the mandatory flag, then waits for all the confirms (up to
// Config.ConfirmTimeout or the end of ctx). A message is reported published
// only when the broker acked it and did not return it. See the package
// documentation for the outcomes.
func (p *Publisher) Publish(ctx context.Context, batch []outbox.Message) []error {
	errs := make([]error, len(batch))
	if len(batch) == 0 {
		return errs
	}
	keys := make([]string, len(batch))
	for i := range batch {
		keys[i] = p.routingKey(&batch[i])
	}
	fail := func(i int, err error) {
		e := &PublishError{ID: batch[i].ID, Broker: p.broker, Exchange: p.cfg.Exchange, RoutingKey: keys[i], Err: err}
		if outbox.IsPermanent(err) {
			errs[i] = outbox.Permanent(e)
		} else {
			errs[i] = e
		}
	}
	if err := ctx.Err(); err != nil {
		for i := range batch {
			fail(i, fmt.Errorf("not sent: %w", context.Cause(ctx)))
		}
		return errs
	}
	ctx, cancel := context.WithTimeoutCause(ctx, p.cfg.ConfirmTimeout,
		fmt.Errorf("batch not done within Config.ConfirmTimeout (%v): %w", p.cfg.ConfirmTimeout, context.DeadlineExceeded))
	defer cancel()

	pending := make([]int, len(batch))
	for i := range pending {
		pending[i] = i
	}
	for round := 0; len(pending) > 0; round++ {
		c, err := p.channel(ctx)
		if err != nil {
			var ce *configError
			if round == 0 && !errors.As(err, &ce) {
				// No connection or channel: nothing of the batch left, and
				// the relay must not count the broker's outage against the
				// messages. (A later round re-publishes messages that may
				// have reached the broker, and refused credentials do not
				// get better by waiting: those failures count.)
				err = outbox.Unavailable(err)
			}
			for _, i := range pending {
				fail(i, err)
			}
			return errs
		}
		pending = p.send(ctx, c, batch, keys, pending, errs, fail)
		for _, i := range pending {
			errs[i] = nil
		}
	}
	return errs
}

// send publishes batch[i], for each i of idx in order, on c and waits for
// their confirms, reporting failures through fail. It returns the messages
// to publish again on a fresh channel: the broker closes the channel when a
// message is over its max_message_size, and drops what follows on it; that
// message then fails permanently alone, and the others it did not confirm
// are returned (those published before it may reach consumers twice).
func (p *Publisher) send(ctx context.Context, c *channel, batch []outbox.Message, keys []string, idx []int, errs []error, fail func(int, error)) (again []int) {
	failRest := func(from int, err error) {
		for _, i := range idx[from:] {
			if errs[i] == nil {
				fail(i, err)
			}
		}
	}
	// Sending blocks when the broker stops reading; only closing the
	// connection unblocks it.
	sent := make(chan struct{})
	stopWatch := context.AfterFunc(ctx, func() {
		t := time.NewTimer(sendGrace)
		defer t.Stop()
		select {
		case <-sent:
		case <-t.C:
			p.log.Warn("outboxamqp: publishing still blocked after the context ended (broker not reading, a resource alarm?); closing the connection",
				slog.Duration("grace", sendGrace))
			c.conn.abort()
		}
	})
	maxSize := c.conn.maxSize.Load()
	confirms := make([]*amqp.DeferredConfirmation, len(batch))
	for n, i := range idx {
		if ctx.Err() != nil {
			failRest(n, fmt.Errorf("not sent: %w", context.Cause(ctx)))
			break
		}
		m := &batch[i]
		if m.ID == uuid.Nil {
			fail(i, outbox.Permanent(errNoID))
			continue
		}
		if err := steeringHeader(m); err != nil {
			fail(i, err)
			continue
		}
		if len(keys[i]) > maxShortString {
			fail(i, outbox.Permanent(fmt.Errorf("%w: %d bytes; AMQP allows 255", ErrInvalidRoutingKey, len(keys[i]))))
			continue
		}
		if maxSize > 0 && int64(len(m.Payload)) > maxSize {
			fail(i, outbox.Permanent(fmt.Errorf("%w: body of %d bytes, limit %d bytes (as the broker reported on this connection)", ErrTooLarge, len(m.Payload), maxSize)))
			continue
		}
		dc, err := c.ch.PublishWithDeferredConfirm(p.cfg.Exchange, keys[i], true, false, publishing(m))
		if err != nil {
			failRest(n, fmt.Errorf("not sent: %w", c.closeReason(err)))
			break
		}
		confirms[i] = dc
	}
	close(sent)
	stopWatch()

	// Wait for every confirm, or the end of ctx; a confirm already in when
	// ctx ends still counts.
wait:
	for _, dc := range confirms {
		if dc == nil {
			continue
		}
		select {
		case <-dc.Done():
		case <-ctx.Done():
			break wait
		}
	}
	abandoned := false
	acked := false
	for i, dc := range confirms {
		if dc == nil {
			continue
		}
		select {
		case <-dc.Done():
		default:
			abandoned = true
			fail(i, fmt.Errorf("not confirmed: %w", context.Cause(ctx)))
			continue
		}
		switch {
		case dc.Acked():
			acked = true
		case c.ch.IsClosed():
			fail(i, fmt.Errorf("%w: %v", ErrNotConfirmed, c.closeReason(amqp.ErrClosed)))
		default:
			fail(i, ErrNacked)
		}
	}
	if acked {
		// A return comes before its message's ack, so every return of an
		// acked message of the batch is in by now.
		returned := c.takeReturns()
		for i, dc := range confirms {
			if dc == nil || errs[i] != nil {
				continue
			}
			if r, ok := returned[batch[i].ID.String()]; ok {
				err := fmt.Errorf("%w (%d %s)", ErrUnroutable, r.ReplyCode, r.ReplyText)
				if p.cfg.UnroutablePermanent {
					err = outbox.Permanent(err)
				}
				fail(i, err)
			}
		}
	}
	// A channel with confirms still pending would mix them (and their
	// returns) into the next batch: close it instead of reusing it.
	p.release(c, abandoned)
	if !c.ch.IsClosed() || ctx.Err() != nil {
		return nil
	}
	reason := c.closeReason(nil)
	if fix := p.channelFix(reason); fix != "" {
		p.logConfigError("exchange\x00"+p.cfg.Exchange, reason, fix)
		for _, i := range idx {
			var pe *PublishError
			if errs[i] != nil && !outbox.IsPermanent(errs[i]) && errors.As(errs[i], &pe) {
				pe.Err = fmt.Errorf("%w; fix: %s", pe.Err, fix)
			}
		}
		return nil
	}
	maxSize, ok := overMaxSize(reason)
	if !ok {
		return nil
	}
	c.conn.maxSize.Store(maxSize)
	singled := false
	for _, i := range idx {
		switch {
		case errs[i] == nil || outbox.IsPermanent(errs[i]):
		case confirms[i] != nil && int64(len(batch[i].Payload)) > maxSize:
			fail(i, outbox.Permanent(fmt.Errorf("%w: body of %d bytes, limit %d bytes: %v", ErrTooLarge, len(batch[i].Payload), maxSize, reason)))
			singled = true
		default:
			again = append(again, i)
		}
	}
	if !singled {
		return nil // the limit changed under the batch: leave it retryable
	}
	return again
}

// maxSizeReason is RabbitMQ's reason for closing a channel over a message
// larger than its max_message_size (the body's size is compared).
var maxSizeReason = regexp.MustCompile(`message size \d+ is larger than (?:configured )?max size (\d+)`)

// overMaxSize reports whether err is a broker's channel close over a message
// larger than its max_message_size, and that limit.
func overMaxSize(err error) (int64, bool) {
	var ae *amqp.Error
	if !errors.As(err, &ae) || ae.Code != amqp.PreconditionFailed {
		return 0, false
	}
	m := maxSizeReason.FindStringSubmatch(ae.Reason)
	if m == nil {
		return 0, false
	}
	n, err := strconv.ParseInt(m[1], 10, 64)
	return n, err == nil && n > 0
}

// configError is a failure the broker's configuration causes, which an
// operator fixes: it counts an attempt instead of being unavailable.
type configError struct {
	err error
	fix string
}

func (e *configError) Error() string { return e.err.Error() + "; fix: " + e.fix }
func (e *configError) Unwrap() error { return e.err }

// connectFix returns what an operator must do when the broker refused a
// connection attempt with err for its credentials or virtual host; ""
// otherwise. It never quotes the password.
func connectFix(err error) string {
	var ae *amqp.Error
	if !errors.As(err, &ae) {
		return ""
	}
	switch {
	case ae.Code == amqp.AccessRefused && strings.Contains(ae.Reason, "SASL"):
		return "use a SASL mechanism the broker enables (Config.AMQP.SASL)"
	case ae.Code == amqp.AccessRefused && strings.Contains(strings.ToLower(ae.Reason), "vhost"),
		ae.Code == amqp.NotAllowed:
		return "check that the virtual host in the URL exists and that the user has permissions on it (rabbitmqctl set_permissions -p VHOST USER ...), or the connection limit the broker names"
	case ae.Code == amqp.AccessRefused:
		return "check the user and password in the URL (percent-encoded), and that the user may connect from this host"
	}
	return ""
}

// channelFix returns what an operator must do when the broker closed a
// publishing channel with err for its configuration; "" otherwise.
func (p *Publisher) channelFix(err error) string {
	var ae *amqp.Error
	if !errors.As(err, &ae) {
		return ""
	}
	switch ae.Code {
	case amqp.NotFound:
		return fmt.Sprintf("declare exchange %q on the broker (of the type your bindings need), or fix Config.Exchange", p.cfg.Exchange)
	case amqp.AccessRefused:
		return fmt.Sprintf("grant the user write permission on exchange %q in its virtual host (rabbitmqctl set_permissions)", p.cfg.Exchange)
	}
	return ""
}

// logConfigError logs err, a configuration error, with its fix at ERROR
// level, unless it was logged for key within ConfigErrorLogInterval.
func (p *Publisher) logConfigError(key string, err error, fix string) {
	if p.configLog.Allow(key + "\x00" + fix) {
		p.log.Error("outboxamqp: cannot publish until the configuration is fixed; the messages are retried with backoff and dead-lettered after the relay's MaxAttempts",
			slog.String("fix", fix), slog.Any("error", err))
	}
}

func (p *Publisher) routingKey(m *outbox.Message) string {
	if p.cfg.RoutingKey != nil {
		return p.cfg.RoutingKey(*m)
	}
	return m.Topic
}

// steeringHeader returns a permanent error naming the first header (in name
// order) of m that would steer RabbitMQ instead of travelling with the
// message: CC or BCC in any case (RabbitMQ routes copies to the queues they
// name, and closes the channel, failing the whole batch, when they are not
// arrays), or one posing, in another case, as HeaderKey. A header named
// exactly HeaderKey is replaced, as it always was. outbox.Writer refuses all
// of these when the message is written; this catches messages written
// before it did.
func steeringHeader(m *outbox.Message) error {
	bad, why := "", ""
	for name := range m.Headers {
		var reason string
		switch {
		case name == HeaderKey:
			continue
		case strings.EqualFold(name, "CC"), strings.EqualFold(name, "BCC"):
			reason = "RabbitMQ routes on CC and BCC, so a message must not set them"
		case strings.EqualFold(name, HeaderKey):
			reason = "it would pose as the header the publisher sets"
		default:
			continue
		}
		if bad == "" || name < bad {
			bad, why = name, reason
		}
	}
	if bad == "" {
		return nil
	}
	return outbox.Permanent(fmt.Errorf("header %q is reserved: %s; rename it and write the message again (outbox.Writer refuses it)", bad, why))
}

// publishing builds the AMQP message for m.
func publishing(m *outbox.Message) amqp.Publishing {
	headers := make(amqp.Table, len(m.Headers)+1)
	var contentType string
	for k, v := range m.Headers {
		if strings.EqualFold(k, ContentTypeHeader) {
			contentType = v
			continue
		}
		headers[k] = v
	}
	if m.Key != "" {
		headers[HeaderKey] = m.Key
	} else {
		delete(headers, HeaderKey) // an application header must not pose as the key
	}
	ts := m.CreatedAt
	if ts.IsZero() {
		ts = time.Now()
	}
	return amqp.Publishing{
		Headers:      headers,
		ContentType:  contentType,
		DeliveryMode: amqp.Persistent,
		MessageId:    m.ID.String(),
		Timestamp:    ts,
		Type:         m.Topic,
		Body:         m.Payload,
	}
}

// connection is one AMQP connection and the raw network connection under
// it, which abort closes when the AMQP connection is stuck.
type connection struct {
	amqp *amqp.Connection
	net  net.Conn
	lost chan struct{} // closed when the connection is gone
	// maxSize is the broker's max_message_size once a channel was closed
	// over a larger message, else 0. A new connection learns it again, so
	// a limit changed with a broker restart is not held against messages.
	maxSize atomic.Int64
}

func (c *connection) isLost() bool {
	select {
	case <-c.lost:
		return true
	default:
		// The library knows before the goroutine that closes lost runs: a
		// channel opened on a connection that just dropped fails with 504
		// while lost is still open.
		return c.amqp.IsClosed()
	}
}

func (c *connection) close() {
	// Close sends connection.close and waits for the broker's reply: bound
	// it, the broker may be the reason for closing.
	if err := c.amqp.CloseDeadline(time.Now().Add(5 * time.Second)); err != nil && c.net != nil {
		_ = c.net.Close()
	}
}

// abort closes the network connection under the AMQP connection, which then
// shuts down with an error: blocked writes and waits return.
func (c *connection) abort() {
	if c.net != nil && !c.isLost() {
		_ = c.net.Close()
	}
}

// dialAttempt is a connection attempt that Publish calls wait for together.
type dialAttempt struct {
	done chan struct{}
	err  error // set before done is closed
}

// connect returns the current connection, dialing if there is none. Calls
// arriving during a dial wait for it; a dial goes on when ctx ends and its
// connection serves later calls.
func (p *Publisher) connect(ctx context.Context) (*connection, error) {
	p.mu.Lock()
	for {
		if p.closed {
			p.mu.Unlock()
			return nil, ErrClosed
		}
		if p.conn != nil && !p.conn.isLost() {
			conn := p.conn
			p.mu.Unlock()
			return conn, nil
		}
		if p.dialing == nil {
			if wait := time.Until(p.nextDial); wait > 0 && p.dialErr != nil {
				err := p.dialErr
				p.mu.Unlock()
				return nil, fmt.Errorf("%w (next attempt in %v)", err, wait.Round(time.Millisecond))
			}
			p.dialing = &dialAttempt{done: make(chan struct{})}
			go p.dial(p.dialing)
		}
		d := p.dialing
		p.mu.Unlock()
		select {
		case <-d.done:
		case <-ctx.Done():
			return nil, fmt.Errorf("connect: %w", context.Cause(ctx))
		case <-p.done:
			return nil, ErrClosed
		}
		if d.err != nil {
			return nil, d.err
		}
		p.mu.Lock()
	}
}

func (p *Publisher) dial(d *dialAttempt) {
	conn, err := p.dialBroker()
	p.mu.Lock()
	p.dialing = nil
	failures := p.dialFailures
	switch {
	case err != nil:
		if fix := connectFix(err); fix != "" {
			err = &configError{err: err, fix: fix}
		}
		d.err = fmt.Errorf("connect: %w", err)
		p.dialErr = d.err
		p.dialFailures++
		p.nextDial = time.Now().Add(backoff.Cap(redialMin, redialMax, p.dialFailures))
	case p.closed:
		d.err = ErrClosed
	default:
		p.conn, p.idle = conn, nil
		p.dialErr, p.dialFailures = nil, 0
	}
	p.mu.Unlock()
	var ce *configError
	switch {
	case errors.As(err, &ce):
		p.logConfigError("connect", ce.err, ce.fix)
	case err != nil && failures == 0:
		p.log.Warn("outboxamqp: cannot connect to RabbitMQ; batches fail as unavailable (no attempt counted) until it answers", slog.Any("error", err))
	case err == nil && d.err != nil:
		conn.close()
	case err == nil:
		if failures > 0 {
			p.log.Info("outboxamqp: connected to RabbitMQ", slog.Int("failed_attempts", failures))
		} else {
			p.log.Info("outboxamqp: connected to RabbitMQ")
		}
	}
	close(d.done)
}

// Bounds of the pause after failed dials in a row: 100ms after the first,
// doubling up to 2s, so a broker coming back is found within 2s.
const (
	redialMin = 100 * time.Millisecond
	redialMax = 2 * time.Second
)

// dialBroker dials the broker and watches the new connection.
func (p *Publisher) dialBroker() (*connection, error) {
	cfg := p.cfg.AMQP
	if cfg.Properties == nil {
		cfg.Properties = amqp.NewConnectionProperties()
		cfg.Properties.SetClientConnectionName("outbox relay")
	}
	var raw net.Conn
	dial := cfg.Dial
	if dial == nil {
		dial = amqp.DefaultDial(p.cfg.DialTimeout)
	}
	cfg.Dial = func(network, addr string) (net.Conn, error) {
		c, err := dial(network, addr)
		raw = c
		return c, err
	}
	cfg.Recovery = nil // this publisher reconnects by itself, and never republishes in-flight messages
	ac, err := amqp.DialConfig(p.url, cfg)
	if err != nil {
		return nil, uriError(err)
	}
	conn := &connection{amqp: ac, net: raw, lost: make(chan struct{})}
	closes := ac.NotifyClose(make(chan *amqp.Error, 1))
	go func() {
		err, ok := <-closes
		close(conn.lost)
		p.mu.Lock()
		if p.conn == conn {
			p.conn, p.idle = nil, nil
		}
		closed := p.closed
		p.mu.Unlock()
		if ok && err != nil && !closed {
			p.log.Warn("outboxamqp: connection to RabbitMQ lost; the next batch reconnects", slog.Any("error", err))
		}
	}()
	return conn, nil
}

// channel returns a channel in confirm mode on the current connection: an
// idle one, or a new one.
func (p *Publisher) channel(ctx context.Context) (*channel, error) {
	for attempt := 0; ; attempt++ {
		conn, err := p.connect(ctx)
		if err != nil {
			return nil, err
		}
		p.mu.Lock()
		for len(p.idle) > 0 {
			c := p.idle[len(p.idle)-1]
			p.idle = p.idle[:len(p.idle)-1]
			if c.conn == conn && !c.ch.IsClosed() {
				p.mu.Unlock()
				return c, nil
			}
		}
		p.mu.Unlock()
		c, err := awaitRPC(ctx, p, conn, "opening a channel", func() (*channel, error) { return openChannel(conn) },
			func(c *channel) { p.release(c, false) })
		if err == nil {
			return c, nil
		}
		if attempt == 0 && conn.isLost() && ctx.Err() == nil {
			continue // lost just now: reconnect once
		}
		return nil, fmt.Errorf("open channel: %w", err)
	}
}

// awaitRPC runs call, which makes AMQP RPCs on conn (channel.open,
// confirm.select, exchange.declare...), and returns its result, or the
// context's error when ctx ends first. amqp091 waits for an RPC's reply
// without a deadline: a broker, or a network path, that stops answering
// would hold the caller until the heartbeat timeout (three heartbeat
// intervals: 30s with amqp091's default, longer with ?heartbeat=; never
// with heartbeats off), past the relay's lease. On giving up, the call
// goes on in the background: a late result is handed to late; if there is
// none within sendGrace the connection is torn down, since every other
// call on it is as stuck, and that makes call return.
func awaitRPC[T any](ctx context.Context, p *Publisher, conn *connection, what string, call func() (T, error), late func(T)) (T, error) {
	type result struct {
		v   T
		err error
	}
	done := make(chan result, 1)
	go func() {
		v, err := call()
		done <- result{v, err}
	}()
	select {
	case r := <-done:
		return r.v, r.err
	case <-ctx.Done():
	}
	go func() {
		t := time.NewTimer(sendGrace)
		defer t.Stop()
		var r result
		select {
		case r = <-done:
		case <-t.C:
			p.log.Warn("outboxamqp: RabbitMQ did not answer "+what+" before the context ended; closing the connection",
				slog.Duration("grace", sendGrace))
			conn.abort()
			r = <-done
		}
		if r.err == nil && late != nil {
			late(r.v)
		}
	}()
	var zero T
	return zero, fmt.Errorf("%s: %w", what, context.Cause(ctx))
}

// release makes c available to the next batch, or closes it if it may still
// receive confirms of this one (discard), or its connection is gone.
func (p *Publisher) release(c *channel, discard bool) {
	p.mu.Lock()
	if !discard && !p.closed && p.conn == c.conn && !c.ch.IsClosed() {
		p.idle = append(p.idle, c)
		p.mu.Unlock()
		return
	}
	p.mu.Unlock()
	if !c.ch.IsClosed() {
		go func() { _ = c.ch.Close() }() // an RPC: must not hold up Publish
	}
}

// channel is an AMQP channel in confirm mode and the messages the broker
// returned on it, by message id. One Publish call uses it at a time.
type channel struct {
	conn     *connection
	ch       *amqp.Channel
	closes   chan *amqp.Error
	closeErr *amqp.Error

	returns  chan amqp.Return
	collect  chan chan map[string]amqp.Return
	done     chan struct{}          // closed when collectReturns ends
	returned map[string]amqp.Return // owned by collectReturns until done
}

func openChannel(conn *connection) (*channel, error) {
	ch, err := conn.amqp.Channel()
	if err != nil {
		return nil, err
	}
	if err := ch.Confirm(false); err != nil {
		_ = ch.Close()
		return nil, fmt.Errorf("enable publisher confirms: %w", err)
	}
	c := &channel{
		conn:     conn,
		ch:       ch,
		closes:   ch.NotifyClose(make(chan *amqp.Error, 1)),
		returns:  ch.NotifyReturn(make(chan amqp.Return, 64)),
		collect:  make(chan chan map[string]amqp.Return),
		done:     make(chan struct{}),
		returned: map[string]amqp.Return{},
	}
	go c.collectReturns()
	return c, nil
}

// collectReturns receives the channel's returned messages until it closes.
// The library delivers them from the connection's reader, which must never
// wait for a batch to look at them.
func (c *channel) collectReturns() {
	defer close(c.done)
	for {
		select {
		case r, ok := <-c.returns:
			if !ok {
				return
			}
			c.returned[r.MessageId] = r
		case reply := <-c.collect:
			// Whatever the reader delivered before the request was sent is
			// in the buffer or taken already.
			open := true
		drain:
			for {
				select {
				case r, ok := <-c.returns:
					if !ok {
						open = false
						break drain
					}
					c.returned[r.MessageId] = r
				default:
					break drain
				}
			}
			reply <- c.returned
			c.returned = map[string]amqp.Return{}
			if !open {
				return
			}
		}
	}
}

// takeReturns returns the messages returned since the last call.
func (c *channel) takeReturns() map[string]amqp.Return {
	reply := make(chan map[string]amqp.Return, 1)
	select {
	case c.collect <- reply:
		return <-reply
	case <-c.done:
		return c.returned
	}
}

// closeReason returns why the channel closed, or fallback if it did not say.
func (c *channel) closeReason(fallback error) error {
	if c.closeErr == nil && c.ch.IsClosed() {
		// The library marks the channel closed, then hands out the reason
		// and closes the notification channel: wait for that moment.
		t := time.NewTimer(time.Second)
		defer t.Stop()
		select {
		case e, ok := <-c.closes:
			if ok && e != nil {
				c.closeErr = e
			}
		case <-t.C:
		}
	}
	if c.closeErr != nil {
		return c.closeErr
	}
	return fallback
}
