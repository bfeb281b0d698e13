package outboxnats

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/loglimit"
)

// Header names the publisher sets on every message, besides the application
// headers. Consumers read the outbox id from HeaderMsgID.
const (
	// HeaderKey carries Message.Key; it is absent when the key is empty.
	HeaderKey = "Outbox-Key"
	// HeaderMsgID carries Message.ID as text; JetStream deduplicates on it.
	HeaderMsgID = jetstream.MsgIDHeader
	// HeaderTopic carries Message.Topic, which the subject may not show
	// (a prefix, a Subject function).
	HeaderTopic = "Outbox-Topic"
)

// Defaults of Config.
const (
	// AckTimeoutDefault is how long Publish waits for JetStream to
	// acknowledge a batch. Acknowledgements take milliseconds; the margin
	// covers a cluster electing a stream leader or a quick server restart.
	AckTimeoutDefault = 10 * time.Second
	// DrainTimeoutDefault bounds how long Close drains a Dial'ed connection.
	DrainTimeoutDefault = 5 * time.Second
)

// ConfigErrorLogInterval is the shortest time between two ERROR logs of the
// same configuration error (no stream for a subject, refused credentials)
// for the same subject: every batch fails until an operator fixes it, and
// one line a minute tells them without flooding the log.
const ConfigErrorLogInterval = time.Minute

// sendGrace is how long sending may go on after Publish's context ended
// before the network connection of a Dial'ed publisher is closed under
// nats.go: a write to a network path that stopped taking data blocks (up to
// nats.go's FlusherTimeout, a minute by default) while holding the
// connection's lock, and nothing else would end it.
const sendGrace = 2 * time.Second

// ErrClosed is returned, for every message, by Publish after Close. It
// matches outbox.ErrClosed with errors.Is and is retryable: another relay
// instance, or this one after a restart, publishes the messages.
var ErrClosed = outbox.ClosedError("outboxnats: publisher closed")

// ErrNoStream means no JetStream stream captures the message's subject. It is
// retryable, and counts an attempt: adding a stream, or fixing the stream's
// subjects or the publisher's subject mapping, within the relay's backoff
// loses nothing; left unfixed, the message is dead-lettered after the
// relay's MaxAttempts. The publisher logs the fix at ERROR level.
var ErrNoStream = errors.New("no JetStream stream captures the subject")

// ErrInvalidSubject means the subject a message maps to cannot be published
// to. It is permanent.
var ErrInvalidSubject = errors.New("invalid NATS subject")

// errNoID is the cause for a message without id: every such message would
// count as a duplicate of the first.
var errNoID = errors.New("message has no id; write messages through an outbox Writer")

// PublishError is the outcome of a message JetStream did not confirm. A
// permanent one is wrapped by outbox.Permanent (test with
// outbox.IsPermanent); errors.As finds the *PublishError either way.
type PublishError struct {
	// ID is the outbox message id.
	ID uuid.UUID
	// Subject is the subject the message was (or would have been) sent to.
	Subject string
	// Err is the cause: a nats.go or JetStream error, ErrNoStream,
	// ErrInvalidSubject, ErrClosed or the context's error.
	Err error
}

// Error names the message, its subject and the cause.
func (e *PublishError) Error() string {
	return fmt.Sprintf("outboxnats: message %s to subject %q: %v", e.ID, e.Subject, e.Err)
}

// Unwrap returns the cause.
func (e *PublishError) Unwrap() error { return e.Err }

// Config configures a Publisher. The zero value publishes each message to
// the subject named by its topic, with every default.
type Config struct {
	// AckTimeout bounds the wait for a batch's acknowledgements, whatever
	// the context allows; unacknowledged messages are then retryable. Zero
	// means AckTimeoutDefault.
	AckTimeout time.Duration
	// ConnectOptions are nats.go options Dial applies after its own
	// (nats.MaxReconnects(-1), a client name, handlers logging connection
	// events to Logger), to add credentials, TLS, nats.RetryOnFailedConnect
	// or to replace the defaults. New ignores them.
	ConnectOptions []nats.Option
	// DrainTimeout bounds how long Close drains a Dial'ed connection. Zero
	// means DrainTimeoutDefault.
	DrainTimeout time.Duration
	// Logger receives the connection events of a Dial'ed connection
	// (disconnected, reconnected, closed, asynchronous errors such as
	// permission violations) and, at ERROR level, the configuration errors
	// an operator must fix (no stream for a subject, refused credentials)
	// with the fix, at most once per ConfigErrorLogInterval each. Nil means
	// slog.Default().
	Logger *slog.Logger
	// Stream, if set, names the stream every message must land in: JetStream
	// rejects a message whose subject another stream captures instead of
	// storing it there. That is a configuration error (logged at ERROR
	// level with the fix), retryable like ErrNoStream.
	Stream string
	// Subject maps a message to its subject. Nil means SubjectPrefix +
	// m.Topic. A function returning an invalid subject (empty, with spaces,
	// empty tokens or wildcards) makes that message fail permanently.
	Subject func(m outbox.Message) string
	// SubjectPrefix is put before every topic, verbatim: with "events." the
	// topic "orders.created" goes to "events.orders.created". Set Subject or
	// SubjectPrefix, not both.
	SubjectPrefix string
}

// Validate reports the first invalid field of c as a *outbox.ConfigError, or
// nil. New and Dial validate too; call Validate to check a configuration
// before connecting.
func (c Config) Validate() error {
	_, err := c.withDefaults()
	return err
}

func (c Config) withDefaults() (Config, error) {
	bad := func(field string, value any, fix string) (Config, error) {
		return c, &outbox.ConfigError{Field: "outboxnats.Config." + field, Value: value, Fix: fix}
	}
	switch {
	case c.AckTimeout < 0:
		return bad("AckTimeout", c.AckTimeout, "use a positive duration, or 0 for the default "+AckTimeoutDefault.String())
	case c.DrainTimeout < 0:
		return bad("DrainTimeout", c.DrainTimeout, "use a positive duration, or 0 for the default "+DrainTimeoutDefault.String())
	case c.Subject != nil && c.SubjectPrefix != "":
		return bad("SubjectPrefix", c.SubjectPrefix, "leave it empty when Config.Subject is set, or put the prefix in Subject")
	case c.SubjectPrefix != "" && validSubject(c.SubjectPrefix+"x") != nil:
		return bad("SubjectPrefix", c.SubjectPrefix, "use subject tokens separated by dots, without spaces or wildcards, usually ending with a dot, e.g. \"events.\"")
	case c.Stream != "" && strings.ContainsAny(c.Stream, " \t\r\n.*>/\\"):
		return bad("Stream", c.Stream, "use a stream name without spaces, dots, wildcards or path separators")
	}
	if c.AckTimeout == 0 {
		c.AckTimeout = AckTimeoutDefault
	}
	if c.DrainTimeout == 0 {
		c.DrainTimeout = DrainTimeoutDefault
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c, nil
}

// Publisher publishes outbox messages to JetStream; see the package
// documentation. It is safe for concurrent use by several relay workers.
type Publisher struct {
	cfg Config
	js  jetstream.JetStream
	nc  *nats.Conn // set when Dial owns the connection
	// ncClosed is closed once nc's closed handler has run: the last of the
	// connection's callbacks.
	ncClosed <-chan struct{}
	// raw is the network connection under nc, which a stuck write is ended
	// by closing; nil for a connection given to New.
	raw     *rawConn
	pubOpts []jetstream.PublishOpt

	mu     sync.RWMutex // held for reading by Publish, for writing by Close
	closed bool

	// configLog spaces out the ERROR logs of configuration errors.
	configLog loglimit.Limiter

	// onAck, if set (by tests), sees every acknowledgement.
	onAck func(m *outbox.Message, ack *jetstream.PubAck)
}

// New returns a publisher using js, whose connection the caller owns: Close
// stops the publisher but leaves the connection open. Give the connection
// nats.MaxReconnects(-1), so it outlives broker outages, and js
// jetstream.WithPublishAsyncTimeout, so acknowledgements that never come do
// not stay pending. New returns a *outbox.ConfigError if cfg is invalid.
func New(js jetstream.JetStream, cfg Config) (*Publisher, error) {
	if js == nil {
		return nil, &outbox.ConfigError{Field: "outboxnats.New js", Value: "nil", Fix: "pass a JetStream context, e.g. jetstream.New(nc), or use outboxnats.Open"}
	}
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	p := &Publisher{cfg: cfg, js: js, configLog: loglimit.Limiter{Interval: ConfigErrorLogInterval}}
	if cfg.Stream != "" {
		p.pubOpts = append(p.pubOpts, jetstream.WithExpectStream(cfg.Stream))
	}
	return p, nil
}

// Open returns a publisher owning a connection to the NATS servers at url,
// as Dial does, but does not fail when no server answers yet: the connection
// keeps trying in the background (nats.RetryOnFailedConnect), and until it
// is up every Publish fails with an unavailable error, so a relay can start
// while NATS is down.
func Open(url string, cfg Config) (*Publisher, error) {
	cfg.ConnectOptions = append(slices.Clip(cfg.ConnectOptions), nats.RetryOnFailedConnect(true))
	return Dial(url, cfg)
}

// Dial connects to the NATS servers at url (comma-separated for several;
// user:password@ or token@ in the URL authenticate) and returns a publisher
// owning the connection, which Close drains and closes. The connection
// reconnects forever. Dial fails if no server answers (Open does not).
func Dial(url string, cfg Config) (*Publisher, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	log := cfg.Logger
	opts := []nats.Option{
		nats.Name("outbox relay"),
		nats.MaxReconnects(-1),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil { // nil when Close closed the connection
				log.Warn("outboxnats: disconnected from NATS; reconnecting", slog.Any("error", err))
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			log.Info("outboxnats: reconnected to NATS", slog.String("server", nc.ConnectedAddr()))
		}),
		nats.ClosedHandler(func(*nats.Conn) {
			log.Debug("outboxnats: NATS connection closed")
		}),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			log.Error("outboxnats: NATS error", slog.Any("error", err))
		}),
	}
	opts = append(opts, cfg.ConnectOptions...)
	// Last, so that it wraps whatever closed handler and dialer the options
	// set. Close waits for the closed handler, so no callback runs after
	// Close returns.
	closed := make(chan struct{})
	var once sync.Once
	raw := &rawConn{}
	opts = append(opts, func(o *nats.Options) error {
		prev := o.ClosedCB
		o.ClosedCB = func(nc *nats.Conn) {
			if prev != nil {
				prev(nc)
			}
			once.Do(func() { close(closed) })
		}
		o.CustomDialer = trackingDialer{inner: innerDialer(o), raw: raw}
		return nil
	})
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		// The error never quotes the URL, which may hold a password.
		return nil, fmt.Errorf("outboxnats: connect to %s: %w", redactURL(url), err)
	}
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncTimeout(cfg.AckTimeout))
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("outboxnats: jetstream: %w", err)
	}
	p, err := New(js, cfg)
	if err != nil {
		nc.Close()
		return nil, err
	}
	p.nc, p.ncClosed, p.raw = nc, closed, raw
	return p, nil
}

// rawConn is the latest network connection a Dial'ed publisher's nats.Conn
// made.
type rawConn struct {
	mu   sync.Mutex
	conn net.Conn
}

func (r *rawConn) set(c net.Conn) {
	r.mu.Lock()
	r.conn = c
	r.mu.Unlock()
}

// close closes the network connection: a write blocked on it fails, and
// nats.go reconnects.
func (r *rawConn) close() {
	r.mu.Lock()
	c := r.conn
	r.mu.Unlock()
	if c != nil {
		_ = c.Close()
	}
}

// trackingDialer dials with inner and remembers the connection.
type trackingDialer struct {
	inner nats.CustomDialer
	raw   *rawConn
}

func (d trackingDialer) Dial(network, address string) (net.Conn, error) {
	c, err := d.inner.Dial(network, address)
	if err == nil {
		d.raw.set(c)
	}
	return c, err
}

// SkipTLSHandshake passes on the answer of the inner dialer, if it has one
// (nats.go asks custom dialers that dial TLS themselves).
func (d trackingDialer) SkipTLSHandshake() bool {
	s, ok := d.inner.(interface{ SkipTLSHandshake() bool })
	return ok && s.SkipTLSHandshake()
}

// innerDialer is the dialer nats.go would use with o: its CustomDialer, else
// its Dialer, else a net.Dialer with its Timeout; with its multipath TCP
// setting, which nats.go applies to a Dialer only.
func innerDialer(o *nats.Options) nats.CustomDialer {
	if o.CustomDialer != nil {
		return o.CustomDialer
	}
	d := &net.Dialer{Timeout: o.Timeout}
	if o.Dialer != nil {
		c := *o.Dialer
		d = &c
	}
	if o.AllowMultipathTCP != nil {
		d.SetMultipathTCP(*o.AllowMultipathTCP)
	}
	return d
}

// redactURL keeps the scheme, hosts and path of a NATS URL list, dropping
// user information and query.
func redactURL(raw string) string {
	parts := strings.Split(raw, ",")
	for i, part := range parts {
		u, err := url.Parse(strings.TrimSpace(part))
		if err != nil || u.Host == "" {
			parts[i] = "(unparsable URL)"
			continue
		}
		u.User, u.RawQuery, u.Fragment = nil, "", ""
		parts[i] = u.String()
	}
	return strings.Join(parts, ",")
}

// JetStream returns the JetStream context the publisher uses, e.g. to create
// streams or consumers on a Dial'ed connection.
func (p *Publisher) JetStream() jetstream.JetStream { return p.js }

// Close stops the publisher: later calls of Publish fail with ErrClosed. It
// waits for the Publish calls in flight. A Dial'ed connection is drained
// (within Config.DrainTimeout) and closed; a connection given to New stays
// open. Close is idempotent and always returns nil once the publisher is
// closed.
func (p *Publisher) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	p.mu.Unlock()
	if p.nc == nil {
		return nil
	}
	// Drain and Close take the connection's lock, which a write stuck on a
	// stalled network holds: at the deadline, close the network connection
	// under them, which ends the write.
	timer := time.NewTimer(p.cfg.DrainTimeout)
	defer timer.Stop()
	unstick := time.AfterFunc(p.cfg.DrainTimeout, p.raw.close)
	defer unstick.Stop()
	if err := p.nc.Drain(); err != nil {
		// Drain refuses a reconnecting or closed connection: nothing is in
		// flight that draining could save, so just close it.
		p.nc.Close()
	}
	select {
	case <-p.ncClosed:
	case <-timer.C:
		p.raw.close()
		p.nc.Close()
		// The closed handler runs soon after; wait a little for it, so
		// it does not log after Close returned.
		select {
		case <-p.ncClosed:
		case <-time.After(time.Second):
		}
	}
	return nil
}

// Publish sends the batch and waits for JetStream's acknowledgement of each
// message, up to Config.AckTimeout or the end of ctx; see the package
// documentation for the outcomes.
func (p *Publisher) Publish(ctx context.Context, batch []outbox.Message) []error {
	errs := make([]error, len(batch))
	if len(batch) == 0 {
		return errs
	}
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.closed {
		for i := range batch {
			errs[i] = &PublishError{ID: batch[i].ID, Subject: p.subject(&batch[i]), Err: ErrClosed}
		}
		return errs
	}
	if nc := p.js.Conn(); nc != nil && !nc.IsConnected() {
		// While nats.go reconnects it would buffer the batch and maybe send
		// it later: fail it unsent instead, as unavailable, so the relay
		// counts no attempt and pauses until the server is back. Unless
		// waiting cannot help: the server refused the credentials, or the
		// connection is closed for good. Then the failure counts an
		// attempt, so a setup never fixed ends in dead letters rather
		// than in an endless pause.
		cause := fmt.Errorf("not sent: not connected to a NATS server (connection %s)", nc.Status())
		mark := outbox.Unavailable
		if fix := connectionFix(nc); fix != "" {
			cause = fmt.Errorf("%w: %v; fix: %s", cause, nc.LastError(), fix)
			mark = func(err error) error { return err }
			p.logConfigError("", cause, fix)
		}
		for i := range batch {
			errs[i] = mark(&PublishError{ID: batch[i].ID, Subject: p.subject(&batch[i]), Err: cause})
		}
		return errs
	}
	ctx, cancel := context.WithTimeoutCause(ctx, p.cfg.AckTimeout,
		fmt.Errorf("Config.AckTimeout (%v) expired: %w", p.cfg.AckTimeout, context.DeadlineExceeded))
	defer cancel()

	// Sending blocks when the network path stops taking data; only closing
	// the connection unblocks it.
	sent := make(chan struct{})
	stopWatch := context.AfterFunc(ctx, func() {
		if p.raw == nil {
			return // the caller's connection: its FlusherTimeout bounds a write
		}
		t := time.NewTimer(sendGrace)
		defer t.Stop()
		select {
		case <-sent:
		case <-t.C:
			p.cfg.Logger.Warn("outboxnats: publishing still blocked after the context ended (a stalled network?); closing the connection",
				slog.Duration("grace", sendGrace))
			p.raw.close()
		}
	})
	subjects := make([]string, len(batch))
	futures := make([]jetstream.PubAckFuture, len(batch))
	for i := range batch {
		m := &batch[i]
		subjects[i] = p.subject(m)
		fail := func(err error) { errs[i] = classify(&PublishError{ID: m.ID, Subject: subjects[i], Err: err}) }
		if ctx.Err() != nil {
			fail(fmt.Errorf("not sent: %w", context.Cause(ctx)))
			continue
		}
		msg, err := p.message(m, subjects[i])
		if err != nil {
			fail(err)
			continue
		}
		f, err := p.js.PublishMsgAsync(msg, p.pubOpts...)
		if err != nil {
			fail(err)
			continue
		}
		futures[i] = f
	}
	close(sent)
	stopWatch()

	var noResponders []int
	for i, f := range futures {
		if f == nil {
			continue
		}
		ack, err := await(ctx, f)
		if err == nil {
			if p.onAck != nil {
				p.onAck(&batch[i], ack)
			}
			continue
		}
		if errors.Is(err, jetstream.ErrNoStreamResponse) {
			noResponders = append(noResponders, i)
		}
		if fix := p.streamFix(err, subjects[i]); fix != "" {
			p.logConfigError(subjects[i], err, fix)
			err = fmt.Errorf("%w; fix: %s", err, fix)
		}
		errs[i] = classify(&PublishError{ID: batch[i].ID, Subject: subjects[i], Err: err})
	}
	if len(noResponders) > 0 {
		p.checkStreams(ctx, batch, subjects, noResponders, errs)
	}
	return errs
}

// await waits for one acknowledgement. A message already acknowledged when
// ctx ends counts as published: the stream has it.
func await(ctx context.Context, f jetstream.PubAckFuture) (*jetstream.PubAck, error) {
	ok, failed := f.Ok(), f.Err()
	select {
	case ack := <-ok:
		return ack, nil // PubAck.Duplicate too: the stream holds the message
	case err := <-failed:
		return nil, err
	default:
	}
	select {
	case ack := <-ok:
		return ack, nil
	case err := <-failed:
		return nil, err
	case <-ctx.Done():
		return nil, fmt.Errorf("no acknowledgement: %w", context.Cause(ctx))
	}
}

// checkStreams decides, for messages the server found no responder for,
// between "no stream captures the subject" (ErrNoStream, logged with its
// fix) and "JetStream not answering yet" (a server starting up, a stream
// leader moving), by asking the JetStream API which stream captures each
// subject. Both are retryable.
func (p *Publisher) checkStreams(ctx context.Context, batch []outbox.Message, subjects []string, idx []int, errs []error) {
	missing := map[string]bool{}
	for _, i := range idx {
		subj := subjects[i]
		gone, seen := missing[subj]
		if !seen {
			_, err := p.js.StreamNameBySubject(ctx, subj)
			gone = errors.Is(err, jetstream.ErrStreamNotFound)
			missing[subj] = gone
		}
		if gone {
			fix := fmt.Sprintf("add a stream whose subjects cover %q (e.g. nats stream add NAME --subjects '%s'), or fix the publisher's subject mapping", subj, subj)
			if !seen {
				p.logConfigError(subj, ErrNoStream, fix)
			}
			errs[i] = &PublishError{ID: batch[i].ID, Subject: subj, Err: fmt.Errorf("%w; fix: %s", ErrNoStream, fix)}
		}
	}
}

func (p *Publisher) subject(m *outbox.Message) string {
	if p.cfg.Subject != nil {
		return p.cfg.Subject(*m)
	}
	return p.cfg.SubjectPrefix + m.Topic
}

// message builds the NATS message for m, or returns a permanent cause.
func (p *Publisher) message(m *outbox.Message, subject string) (*nats.Msg, error) {
	if m.ID == uuid.Nil {
		return nil, errNoID
	}
	if err := validSubject(subject); err != nil {
		return nil, err
	}
	if err := steeringHeader(m); err != nil {
		return nil, err
	}
	h := make(nats.Header, len(m.Headers)+3)
	for k, v := range m.Headers {
		h.Set(k, v)
	}
	h.Set(HeaderMsgID, m.ID.String())
	h.Set(HeaderTopic, m.Topic)
	if m.Key != "" {
		h.Set(HeaderKey, m.Key)
	} else {
		h.Del(HeaderKey) // an application header must not pose as the key
	}
	return &nats.Msg{Subject: subject, Data: m.Payload, Header: h}, nil
}

// steeringHeader returns a permanent error naming the first header (in name
// order) of m that would steer JetStream instead of travelling with the
// message: a Nats-* header in any case (JetStream acts on Nats-Rollup,
// Nats-Expected-*, Nats-TTL, Nats-Msg-Id...), or one posing, in another
// case, as a header the publisher sets (consumers may read names in any
// case). A header of exactly a name the publisher sets is replaced, as it
// always was. outbox.Writer refuses all of these when the message is
// written; this catches messages written before it did.
func steeringHeader(m *outbox.Message) error {
	bad, why := "", ""
	for name := range m.Headers {
		var reason string
		switch {
		case name == HeaderKey, name == HeaderMsgID, name == HeaderTopic:
			continue
		case len(name) >= len("Nats-") && strings.EqualFold(name[:len("Nats-")], "Nats-"):
			reason = "JetStream acts on Nats-* headers, so a message must not set one"
		case strings.EqualFold(name, HeaderKey), strings.EqualFold(name, HeaderTopic):
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

// validSubject accepts what a NATS server routes as a literal subject:
// non-empty dot-separated tokens without whitespace, and no wildcard token.
func validSubject(s string) error {
	if s == "" {
		return fmt.Errorf("%w: empty", ErrInvalidSubject)
	}
	if strings.ContainsAny(s, " \t\r\n\f\v") {
		return fmt.Errorf("%w: contains whitespace", ErrInvalidSubject)
	}
	for tok := range strings.SplitSeq(s, ".") {
		switch tok {
		case "":
			return fmt.Errorf("%w: empty token (a leading, trailing or double dot)", ErrInvalidSubject)
		case "*", ">":
			return fmt.Errorf("%w: wildcard token %q; messages go to literal subjects", ErrInvalidSubject, tok)
		}
	}
	return nil
}

// retryable400 are JetStream rejections with status 400 that an operator
// fixes without touching the message: account limits, streams.
var retryable400 = map[jetstream.ErrorCode]bool{
	10002:               true, // resource limits exceeded for account
	errStreamNotMatched: true,
	10120:               true, // no JetStream default or applicable tiered limit present
}

// errStreamNotMatched is JetStream's "expected stream does not match": the
// subject is captured by another stream than Config.Stream.
const errStreamNotMatched jetstream.ErrorCode = 10060

// streamFix returns what an operator must do about err, JetStream's refusal
// of a message to subject, when the streams' configuration causes it; ""
// otherwise.
func (p *Publisher) streamFix(err error, subject string) string {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && apiErr.ErrorCode == errStreamNotMatched {
		return fmt.Sprintf("subject %q is captured by another stream than Config.Stream %q: add it to the subjects of stream %q (and remove it from the other's), or fix Config.Stream or the subject mapping", subject, p.cfg.Stream, p.cfg.Stream)
	}
	return ""
}

// connectionFix returns what an operator must do when nc, not connected,
// cannot get better by waiting: the server refused the credentials, or the
// connection is closed and never reconnects; "" otherwise.
func connectionFix(nc *nats.Conn) string {
	last := nc.LastError()
	switch {
	case errors.Is(last, nats.ErrAuthorization):
		return "check the user and password (or token, or credentials file) given for the NATS server, and its authorization settings"
	case errors.Is(last, nats.ErrAuthExpired), errors.Is(last, nats.ErrAuthRevoked), errors.Is(last, nats.ErrAccountAuthExpired):
		return "renew the NATS credentials (user JWT or credentials file)"
	case nc.IsClosed():
		return "the NATS connection is closed and never reconnects: restart the relay (or, for a connection given to outboxnats.New, give it nats.MaxReconnects(-1))"
	}
	return ""
}

// logConfigError logs err, a configuration error, with its fix at ERROR
// level, unless it was logged for subject within ConfigErrorLogInterval.
func (p *Publisher) logConfigError(subject string, err error, fix string) {
	if !p.configLog.Allow(subject + "\x00" + fix) {
		return
	}
	attrs := []any{slog.String("fix", fix), slog.Any("error", err)}
	if subject != "" {
		attrs = append([]any{slog.String("subject", subject)}, attrs...)
	}
	p.cfg.Logger.Error("outboxnats: cannot publish until the configuration is fixed; the messages are retried with backoff and dead-lettered after the relay's MaxAttempts", attrs...)
}

// classify marks e permanent when no retry can deliver its message.
func classify(e *PublishError) error {
	var apiErr *jetstream.APIError
	switch {
	case outbox.IsPermanent(e.Err):
		return outbox.Permanent(e)
	case errors.Is(e.Err, errNoID),
		errors.Is(e.Err, ErrInvalidSubject),
		errors.Is(e.Err, nats.ErrMaxPayload),
		errors.Is(e.Err, nats.ErrBadSubject),
		errors.Is(e.Err, nats.ErrBadHeaderMsg):
		return outbox.Permanent(e)
	case errors.As(e.Err, &apiErr):
		if apiErr.Code == 400 && !retryable400[apiErr.ErrorCode] {
			return outbox.Permanent(e)
		}
	}
	return e
}
