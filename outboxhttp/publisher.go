package outboxhttp

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/go-outbox/outbox"
)

// Request headers the publisher sets. A message header of the same name (in
// any case) is dropped, except for the Webhook-* ones, which a message may
// not set at all; see the package documentation.
const (
	// HeaderID carries the message id (a UUID in text form).
	HeaderID = "Outbox-Message-Id"
	// HeaderIdempotencyKey carries the message id too, under the name many
	// HTTP APIs deduplicate on.
	HeaderIdempotencyKey = "Idempotency-Key"
	// HeaderKey carries the message key; it is absent when the key is empty.
	HeaderKey = "Outbox-Key"
	// HeaderTopic carries the message topic.
	HeaderTopic = "Outbox-Topic"
	// HeaderWebhookID is the Standard Webhooks webhook-id: the message id,
	// covered by the signature.
	HeaderWebhookID = "Webhook-Id"
	// HeaderWebhookSignature is the Standard Webhooks webhook-signature:
	// "v1,<base64 HMAC-SHA256>"; see Sign and Verify.
	HeaderWebhookSignature = "Webhook-Signature"
	// HeaderWebhookTimestamp is the Standard Webhooks webhook-timestamp: the
	// unix seconds of sending, covered by the signature.
	HeaderWebhookTimestamp = "Webhook-Timestamp"
)

// Defaults for Config.
const (
	// ConcurrencyDefault is how many requests one Publish call has in flight
	// at most.
	ConcurrencyDefault = 8
	// ContentTypeDefault is the Content-Type of a message without a
	// content-type header.
	ContentTypeDefault = "application/octet-stream"
	// MaxRetryAfterDefault caps the delay a Retry-After header can ask for,
	// so a misconfigured endpoint cannot park messages for days.
	MaxRetryAfterDefault = time.Hour
	// TimeoutDefault bounds one request, from connecting to reading the
	// response.
	TimeoutDefault = 10 * time.Second
)

// ErrClosed is the cause of the (retryable) errors of messages published after
// Close.
var ErrClosed = outbox.ClosedError("outboxhttp: publisher closed")

// Config configures a Publisher. Set URL, URLs or both, and Secret; the other
// fields have defaults.
type Config struct {
	// Client sends the requests; nil means a client of the publisher's own
	// (http.DefaultTransport's settings, proxies from the environment, enough
	// idle connections for Concurrency). A client whose CheckRedirect is nil
	// is copied with redirects turned off; see the package documentation.
	// Client.Timeout, if set, applies next to Timeout.
	Client *http.Client
	// Concurrency is how many requests one Publish call (one relay batch)
	// has in flight at most; zero means ConcurrencyDefault. Messages of
	// different keys (and those without a key) are therefore sent in no
	// particular order; the messages of one key go one at a time, in batch
	// order, and a failure holds back the later ones. See
	// Sequential.
	Concurrency int
	// Logger receives, at error level, one line per batch, endpoint and
	// status that blames the publisher's configuration (401, 403, 404...;
	// see the package documentation). Nil means slog.Default().
	Logger *slog.Logger
	// MaxRetryAfter caps the delay taken from a Retry-After header; zero
	// means MaxRetryAfterDefault.
	MaxRetryAfter time.Duration
	// Secret is the key of the HMAC-SHA256 signature every request carries
	// in HeaderWebhookSignature: the key bytes themselves, at least
	// SecretMinLength of them (32 random bytes are a good choice). A
	// receiver given the key as "whsec_<base64>" text uses the same bytes:
	// ParseSecret turns that text into them. It is required: a receiver
	// cannot tell a forged request from a real one without it. The
	// publisher copies it.
	Secret []byte
	// Sequential sends a batch's messages one at a time in batch order
	// (Concurrency is ignored), across keys too. Within a key the order is
	// kept either way: after a failure the later messages of the
	// same non-empty key in that batch are not sent, so a receiver never
	// gets a key's messages out of order from one batch.
	Sequential bool
	// Timeout bounds each request, from connecting to reading the response
	// headers and the start of the body; zero means TimeoutDefault. A
	// request that times out is retried.
	Timeout time.Duration
	// URL is the endpoint of every message whose topic is not in URLs:
	// http:// or https://, with an optional query. User information in it
	// (https://user:password@host/) is sent as basic authentication. The
	// publisher's errors show it without user information, query or
	// fragment.
	URL string
	// URLs maps message topics to their endpoints. A message whose topic is
	// not in URLs goes to URL, or fails permanently if URL is empty.
	URLs map[string]string
}

func (c Config) withDefaults() (Config, error) {
	switch {
	case c.Concurrency < 0:
		return c, &outbox.ConfigError{Field: "outboxhttp.Config.Concurrency", Value: c.Concurrency, Fix: "use a positive number, or zero for the default " + strconv.Itoa(ConcurrencyDefault)}
	case c.MaxRetryAfter < 0:
		return c, &outbox.ConfigError{Field: "outboxhttp.Config.MaxRetryAfter", Value: c.MaxRetryAfter, Fix: "use a positive duration, or zero for the default " + MaxRetryAfterDefault.String()}
	case c.Timeout < 0:
		return c, &outbox.ConfigError{Field: "outboxhttp.Config.Timeout", Value: c.Timeout, Fix: "use a positive duration, or zero for the default " + TimeoutDefault.String()}
	case len(c.Secret) == 0:
		return c, &outbox.ConfigError{Field: "outboxhttp.Config.Secret", Value: "empty", Fix: secretFix}
	case len(c.Secret) < SecretMinLength:
		// The length only: the value is a secret.
		return c, &outbox.ConfigError{Field: "outboxhttp.Config.Secret", Value: fmt.Sprintf("of %d bytes", len(c.Secret)), Fix: secretFix}
	case c.URL == "" && len(c.URLs) == 0:
		return c, &outbox.ConfigError{Field: "outboxhttp.Config.URL", Value: "empty", Fix: "set URL to the webhook endpoint, e.g. https://example.com/hooks/outbox, or URLs per topic"}
	}
	if c.Concurrency == 0 {
		c.Concurrency = ConcurrencyDefault
	}
	if c.MaxRetryAfter == 0 {
		c.MaxRetryAfter = MaxRetryAfterDefault
	}
	if c.Timeout == 0 {
		c.Timeout = TimeoutDefault
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	c.Secret = slices.Clone(c.Secret)
	c.URLs = maps.Clone(c.URLs)
	return c, nil
}

// secretFix says how to set Config.Secret.
var secretFix = fmt.Sprintf("set the key shared with the receiver: at least %d random bytes, e.g. 32 random bytes, which receivers write as %s + base64 (ParseSecret reads that form)", SecretMinLength, SecretPrefix)

// endpoint is a validated destination URL.
type endpoint struct {
	// url is the URL requests go to.
	url string
	// safe is url without user information, query or fragment, for errors
	// and logs.
	safe string
}

func parseEndpoint(field, raw string) (*endpoint, error) {
	u, err := url.Parse(raw)
	if err != nil {
		// url.Parse's error quotes the URL, secrets and all.
		return nil, &outbox.ConfigError{Field: field, Value: "(not shown)", Fix: "use an absolute http:// or https:// URL; this one cannot be parsed"}
	}
	safe := SafeURL(u)
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return nil, &outbox.ConfigError{Field: field, Value: safe, Fix: "use an http:// or https:// URL"}
	case u.Host == "":
		return nil, &outbox.ConfigError{Field: field, Value: safe, Fix: "name the host, e.g. https://example.com/hooks/outbox"}
	}
	u.Fragment, u.RawFragment = "", ""
	return &endpoint{url: u.String(), safe: safe}, nil
}

// SafeURL returns u without user information, query and fragment: the form
// of a URL that errors and logs may show.
func SafeURL(u *url.URL) string {
	s := url.URL{Scheme: u.Scheme, Host: u.Host, Path: u.Path, RawPath: u.RawPath}
	return s.String()
}

// Publisher posts outbox messages to webhook endpoints; see the package
// documentation. It is safe for concurrent use by several relay workers.
type Publisher struct {
	cfg     Config
	client  *http.Client
	owned   bool // the client is the publisher's own: Close closes its idle connections
	def     *endpoint
	byTopic map[string]*endpoint
	closed  atomic.Bool
}

// New returns a publisher for cfg, or a *outbox.ConfigError if cfg is
// invalid. It does not connect.
func New(cfg Config) (*Publisher, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	p := &Publisher{cfg: cfg, byTopic: map[string]*endpoint{}}
	if cfg.URL != "" {
		if p.def, err = parseEndpoint("outboxhttp.Config.URL", cfg.URL); err != nil {
			return nil, err
		}
	}
	for _, topic := range slices.Sorted(maps.Keys(cfg.URLs)) {
		ep, err := parseEndpoint(fmt.Sprintf("outboxhttp.Config.URLs[%q]", topic), cfg.URLs[topic])
		if err != nil {
			return nil, err
		}
		p.byTopic[topic] = ep
	}
	switch {
	case cfg.Client == nil:
		tr := http.DefaultTransport.(*http.Transport).Clone()
		// One batch per relay worker is in flight at a time.
		tr.MaxIdleConnsPerHost = cfg.Concurrency * outbox.WorkersDefault
		p.client = &http.Client{Transport: tr, CheckRedirect: noRedirect}
		p.owned = true
	case cfg.Client.CheckRedirect == nil:
		c := *cfg.Client
		c.CheckRedirect = noRedirect
		p.client = &c
	default:
		p.client = cfg.Client
	}
	return p, nil
}

// noRedirect stops the client at a redirect: following a 301, 302 or 303
// would turn the POST into a GET without body, and a 2xx to that GET would
// count a message as delivered that no endpoint received.
func noRedirect(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

// Close makes later Publish calls fail (retryably) with ErrClosed and closes
// the idle connections of the publisher's own client. Requests in flight
// finish. Close is idempotent and always returns nil.
func (p *Publisher) Close() error {
	if p.closed.Swap(true) || !p.owned {
		return nil
	}
	p.client.CloseIdleConnections()
	return nil
}

// KeepsKeyOrder marks the publisher as an outbox.KeyOrderKeeper: it sends a
// key's messages one at a time and holds back the rest after a failure.
func (p *Publisher) KeepsKeyOrder() {}

// Publish posts the batch, Config.Concurrency requests at a time (one at a
// time with Config.Sequential), and returns each message's outcome; see the
// package documentation. The messages of one non-empty key go one after the
// other in batch order, and a failure holds back the batch's later
// messages of its key: they are not sent, and fail with an error marked
// outbox.HeldBack, so the relay counts no attempt for them.
func (p *Publisher) Publish(ctx context.Context, batch []outbox.Message) []error {
	errs := make([]error, len(batch))
	if p.closed.Load() {
		for i := range batch {
			errs[i] = p.notSent(&batch[i], ErrClosed)
		}
		return errs
	}
	th := &throttle{}
	rej := &rejections{}
	defer rej.log(p.cfg.Logger)
	if p.cfg.Sequential {
		all := make([]int, len(batch))
		for i := range all {
			all[i] = i
		}
		p.publishInOrder(ctx, batch, all, errs, th, rej)
		return errs
	}
	lanes := lanesOf(batch)
	var (
		next    atomic.Int64
		senders sync.WaitGroup
	)
	for range min(p.cfg.Concurrency, len(lanes)) {
		senders.Go(func() {
			for {
				l := int(next.Add(1)) - 1
				if l >= len(lanes) {
					return
				}
				p.publishInOrder(ctx, batch, lanes[l], errs, th, rej)
			}
		})
	}
	senders.Wait()
	return errs
}

// lanesOf splits a batch into what may go concurrently: each message
// without a key alone, and the messages of each key together, in batch
// order. Lanes come in the order of their first message.
func lanesOf(batch []outbox.Message) [][]int {
	var lanes [][]int
	byKey := map[string]int{} // key -> its lane
	for i := range batch {
		k := batch[i].Key
		if k == "" {
			lanes = append(lanes, []int{i})
			continue
		}
		l, ok := byKey[k]
		if !ok {
			l = len(lanes)
			byKey[k] = l
			lanes = append(lanes, nil)
		}
		lanes[l] = append(lanes[l], i)
	}
	return lanes
}

// publishInOrder sends batch[i] for each i of idx, one at a time; a
// failure, permanent or not, holds back the later messages of its key.
func (p *Publisher) publishInOrder(ctx context.Context, batch []outbox.Message, idx []int, errs []error, th *throttle, rej *rejections) {
	failed := map[string]int{} // key -> index of its first failure
	for _, i := range idx {
		m := &batch[i]
		if first, ok := failed[m.Key]; ok && m.Key != "" {
			errs[i] = p.heldBack(m, &batch[first], errs[first])
			continue
		}
		errs[i] = p.send(ctx, m, th, rej)
		if errs[i] != nil {
			failed[m.Key] = i
		}
	}
}

// heldBack is the error of m, not sent because first, a message of its key
// before it in the batch, failed with firstErr: marked HeldBack, so no
// attempt counts, with first's Retry-After, or marked Unavailable like
// first's, so an outage pauses the relay for it too.
func (p *Publisher) heldBack(m, first *outbox.Message, firstErr error) error {
	var err error = p.notSent(m, fmt.Errorf("held back to keep the key's order: message %s of the same key failed before it", first.ID))
	if d, ok := outbox.RetryAfterOf(firstErr); ok {
		err = outbox.RetryAfter(err, d)
	}
	if outbox.IsUnavailable(firstErr) {
		return outbox.Unavailable(err)
	}
	return outbox.HeldBack(err)
}

// send posts one message and classifies the outcome.
func (p *Publisher) send(ctx context.Context, m *outbox.Message, th *throttle, rej *rejections) error {
	ep := p.def
	if e, ok := p.byTopic[m.Topic]; ok {
		ep = e
	}
	if ep == nil {
		return outbox.Permanent(&PublishError{ID: m.ID, Topic: m.Topic, Err: fmt.Errorf("no URL for topic %q: add it to Config.URLs or set Config.URL", m.Topic)})
	}
	pe := &PublishError{ID: m.ID, Topic: m.Topic, URL: ep.safe}
	if err := ctx.Err(); err != nil {
		pe.Err = fmt.Errorf("not sent: %w", err)
		return pe
	}
	if d, ok := th.wait(ep.url); ok {
		// Not sent: no attempt counts, and the message waits as asked.
		pe.Err = fmt.Errorf("not sent: the endpoint asked to retry after %v", d.Round(time.Millisecond))
		return outbox.HeldBack(outbox.RetryAfter(pe, d))
	}
	reqCtx, cancel := context.WithTimeout(ctx, p.cfg.Timeout)
	defer cancel()
	// The request carries an Idempotency-Key, so net/http may send it again
	// on a new connection after a reused one failed; a dial error then
	// hides that the endpoint may have got it. wrote tells.
	var wrote atomic.Bool
	reqCtx = httptrace.WithClientTrace(reqCtx, &httptrace.ClientTrace{WroteHeaders: func() { wrote.Store(true) }})
	req, err := p.request(reqCtx, ep, m)
	if err != nil {
		pe.Err = err
		return outbox.Permanent(pe)
	}
	resp, err := p.client.Do(req)
	if err != nil {
		pe.Err = p.transportError(ctx, reqCtx, err)
		if neverConnected(err) && !wrote.Load() {
			return outbox.Unavailable(pe) // the request never left: no attempt
		}
		return pe
	}
	defer resp.Body.Close()
	pe.StatusCode = resp.StatusCode
	code := resp.StatusCode
	if code >= 200 && code < 300 {
		// Read the rest so the connection can be reused; the endpoint has
		// answered already, so a failure here changes nothing.
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, drainLimit))
		return nil
	}
	pe.Body = bodySnippet(resp.Body)
	switch {
	case code == http.StatusTooManyRequests || code == http.StatusServiceUnavailable:
		if d, ok := parseRetryAfter(resp.Header.Get("Retry-After"), time.Now()); ok {
			pe.RetryAfter = min(d, p.cfg.MaxRetryAfter)
			th.hold(ep.url, pe.RetryAfter)
			return outbox.RetryAfter(pe, pe.RetryAfter)
		}
		return pe
	case code == http.StatusRequestTimeout || code >= 500:
		return pe
	case configurationFix[code] != "":
		// The endpoint blames the publisher's setup, not this message:
		// retried (counting an attempt), so fixing the URL or the secret
		// within the backoff loses nothing.
		pe.Err = errors.New(configurationFix[code])
		rej.add(ep.safe, code, m.ID)
		return pe
	case code >= 300 && code < 400:
		where := "elsewhere"
		if loc, err := resp.Location(); err == nil {
			where = "to " + SafeURL(loc)
		}
		pe.Err = fmt.Errorf("redirected %s, which the publisher does not follow: configure the final URL", where)
		return outbox.Permanent(pe)
	default:
		// Other 4xx (400, 413, 422... and anything unexpected, 1xx
		// included): the endpoint rejects this message; sending it again
		// cannot help.
		return outbox.Permanent(pe)
	}
}

// configurationFix maps the statuses that blame the publisher's
// configuration rather than the message to what to check.
var configurationFix = map[int]string{
	http.StatusUnauthorized:      "the endpoint refuses the publisher: check the webhook URL and secret",
	http.StatusForbidden:         "the endpoint refuses the publisher: check the webhook URL and secret",
	http.StatusNotFound:          "no webhook at this URL: check the webhook URL and secret",
	http.StatusMethodNotAllowed:  "the URL does not take POST: check the webhook URL and secret",
	http.StatusProxyAuthRequired: "the HTTP proxy asks for credentials: check the webhook URL and secret, and the proxy settings",
	http.StatusGone:              "the endpoint is gone: check the webhook URL and secret",
}

// rejections collects, for one batch, the responses that blame the
// publisher's configuration, so that each endpoint and status is logged once
// per batch rather than once per message.
type rejections struct {
	mu   sync.Mutex
	seen map[rejection]*rejected
}

type rejection struct {
	url    string
	status int
}

type rejected struct {
	first    uuid.UUID
	messages int
}

func (r *rejections) add(url string, status int, id uuid.UUID) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.seen == nil {
		r.seen = map[rejection]*rejected{}
	}
	k := rejection{url, status}
	if r.seen[k] == nil {
		r.seen[k] = &rejected{first: id}
	}
	r.seen[k].messages++
}

func (r *rejections) log(l *slog.Logger) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, k := range slices.SortedFunc(maps.Keys(r.seen), func(a, b rejection) int {
		return cmp.Or(strings.Compare(a.url, b.url), cmp.Compare(a.status, b.status))
	}) {
		v := r.seen[k]
		l.Error("outboxhttp: webhook status blames the publisher's configuration: "+configurationFix[k.status]+"; the messages are retried and count attempts",
			slog.String("url", k.url), slog.Int("status", k.status), slog.Int("messages", v.messages), slog.String("first_message_id", v.first.String()))
	}
}

const (
	// drainLimit is the most of a response body read to reuse its connection.
	drainLimit = 64 << 10
	// snippetLimit is the most of an error response body kept in the error.
	snippetLimit = 256
)

// request builds the POST for m: the message's headers, then the publisher's.
func (p *Publisher) request(ctx context.Context, ep *endpoint, m *outbox.Message) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, ep.url, bytes.NewReader(m.Payload))
	if err != nil {
		return nil, err
	}
	h := req.Header
	h.Set("User-Agent", "go-outbox")
	contentType := ContentTypeDefault
	for _, name := range slices.Sorted(maps.Keys(m.Headers)) {
		value := m.Headers[name]
		canonical := http.CanonicalHeaderKey(name)
		if canonical == "Content-Type" {
			contentType = value
			continue
		}
		if why, ok := forbidden[canonical]; ok {
			return nil, fmt.Errorf("header %q cannot be set by a message: %s", name, why)
		}
		if reserved[canonical] {
			continue
		}
		if !validHeaderValue(value) {
			return nil, fmt.Errorf("header %q has a control character, which HTTP headers cannot carry", name)
		}
		h.Set(canonical, value)
	}
	if !validHeaderValue(contentType) {
		return nil, fmt.Errorf("header \"content-type\" has a control character, which HTTP headers cannot carry")
	}
	h.Set("Content-Type", contentType)
	h.Set(HeaderID, m.ID.String())
	h.Set(HeaderIdempotencyKey, m.ID.String())
	h.Set(HeaderTopic, m.Topic) // topics have no control characters (outbox validates them)
	if m.Key != "" {
		if !validHeaderValue(m.Key) {
			return nil, fmt.Errorf("the key has a control character, which the %s header cannot carry", HeaderKey)
		}
		h.Set(HeaderKey, m.Key)
	}
	// The id is the message id: it is signed, so a captured request cannot
	// be replayed under another id. The timestamp is the sending time, so
	// each retry carries a fresh one.
	id, now := m.ID.String(), time.Now()
	h.Set(HeaderWebhookID, id)
	h.Set(HeaderWebhookTimestamp, strconv.FormatInt(now.Unix(), 10))
	h.Set(HeaderWebhookSignature, Sign(p.cfg.Secret, id, now, m.Payload))
	return req, nil
}

// reserved lists the header names a message cannot set: the publisher's own,
// and those that belong to the connection or the framing of the request. A
// message header of one of these names is dropped.
var reserved = map[string]bool{
	HeaderID: true, HeaderIdempotencyKey: true, HeaderKey: true, HeaderTopic: true,
	HeaderWebhookID: true, HeaderWebhookSignature: true, HeaderWebhookTimestamp: true,
	"Connection": true, "Content-Length": true, "Host": true, "Keep-Alive": true, "Proxy-Connection": true,
	"Te": true, "Trailer": true, "Transfer-Encoding": true, "Upgrade": true,
}

// forbidden lists the header names whose presence in a message fails it
// permanently, with why: dropping them silently would hide a message that
// tries to speak for the publisher. They are checked before reserved.
var forbidden = map[string]string{
	HeaderWebhookID:        "the publisher signs the message id under this name",
	HeaderWebhookSignature: "the publisher signs every request under this name",
	HeaderWebhookTimestamp: "the publisher signs the sending time under this name",
	"Authorization":        "credentials belong in the webhook URL or Config.Client, not in messages",
	"Cookie":               "credentials belong in the webhook URL or Config.Client, not in messages",
	"Host":                 "the webhook URL names the host",
	"Proxy-Authorization":  "proxy credentials belong in the proxy settings, not in messages",
}

// validHeaderValue mirrors net/http's check: no control characters but tab.
func validHeaderValue(v string) bool {
	for i := 0; i < len(v); i++ {
		if c := v[i]; (c < ' ' && c != '\t') || c == 0x7f {
			return false
		}
	}
	return true
}

// transportError explains a request that got no response.
func (p *Publisher) transportError(ctx, reqCtx context.Context, err error) error {
	// *url.Error quotes the whole URL, query secrets included: keep only its
	// cause; PublishError names the URL in its safe form.
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	switch {
	case ctx.Err() != nil:
		return fmt.Errorf("not delivered: %w", ctx.Err())
	case reqCtx.Err() != nil:
		return fmt.Errorf("no response within %v (Config.Timeout): %w", p.cfg.Timeout, reqCtx.Err())
	}
	return err
}

// neverConnected reports whether err is a failure to connect (refused, no
// route, name not found): the endpoint did not get the request, unless an
// earlier try on another connection wrote it.
func neverConnected(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// bodySnippet returns the start of an error response's body as one readable
// line, and drains the rest for the connection's reuse.
func bodySnippet(body io.Reader) string {
	b, _ := io.ReadAll(io.LimitReader(body, snippetLimit+1))
	_, _ = io.Copy(io.Discard, io.LimitReader(body, drainLimit))
	cut := len(b) > snippetLimit
	if cut {
		b = b[:snippetLimit]
	}
	// Dropping invalid UTF-8 also drops a character the cut split.
	s := strings.ToValidUTF8(string(b), "")
	s = strings.Join(strings.FieldsFunc(s, func(r rune) bool { return r < ' ' || r == 0x7f || r == ' ' }), " ")
	if cut {
		s += "..."
	}
	return s
}

// parseRetryAfter reads a Retry-After value, delay-seconds or an HTTP date.
// It reports false for a missing, invalid or past value.
func parseRetryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if n, err := strconv.ParseUint(v, 10, 64); err == nil {
		if n == 0 {
			return 0, false
		}
		if n > uint64(maxDuration/time.Second) {
			return maxDuration, true
		}
		return time.Duration(n) * time.Second, true
	}
	if t, err := http.ParseTime(v); err == nil {
		if d := t.Sub(now); d > 0 {
			return d, true
		}
	}
	return 0, false
}

const maxDuration = time.Duration(1<<63 - 1)

// throttle remembers, for one batch, the endpoints that asked to be left
// alone for a while, so the rest of the batch does not hammer them.
type throttle struct {
	mu    sync.Mutex
	until map[string]time.Time
}

func (t *throttle) hold(url string, d time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.until == nil {
		t.until = map[string]time.Time{}
	}
	if u := time.Now().Add(d); u.After(t.until[url]) {
		t.until[url] = u
	}
}

// wait returns how long url asked to be left alone still, if at all.
func (t *throttle) wait(url string) (time.Duration, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if d := time.Until(t.until[url]); d > 0 {
		return d, true
	}
	return 0, false
}

// notSent is the error of a message the publisher did not try to send.
func (p *Publisher) notSent(m *outbox.Message, cause error) *PublishError {
	pe := &PublishError{ID: m.ID, Topic: m.Topic, Err: fmt.Errorf("not sent: %w", cause)}
	ep := p.def
	if e, ok := p.byTopic[m.Topic]; ok {
		ep = e
	}
	if ep != nil {
		pe.URL = ep.safe
	}
	return pe
}

// PublishError is the error of one message. Publish returns it as is when a
// retry may succeed, wrapped with outbox.Permanent when none can, and wrapped
// with outbox.RetryAfter when the endpoint said when to come back. Find it
// with errors.As.
type PublishError struct {
	// ID is the message id.
	ID uuid.UUID
	// Topic is the message topic.
	Topic string
	// URL is the endpoint without user information, query or fragment
	// (empty if the topic has none).
	URL string
	// StatusCode is the response's status code, or zero when there was no
	// response.
	StatusCode int
	// Body is the start of an error response's body, on one line.
	Body string
	// RetryAfter is the delay the response asked for (429 or 503 with
	// Retry-After), capped by Config.MaxRetryAfter.
	RetryAfter time.Duration
	// Err is the cause when there was no response (network error, timeout,
	// cancelled context, message not sent), the response cannot be
	// accepted (a redirect), or its status blames the publisher's
	// configuration (401, 403, 404, 405, 407, 410: Err says what to check);
	// nil otherwise.
	Err error
}

func (e *PublishError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "outboxhttp: message %s (topic %q)", e.ID, e.Topic)
	if e.URL != "" {
		b.WriteString(": POST " + e.URL)
	}
	if e.StatusCode != 0 {
		fmt.Fprintf(&b, ": %d %s", e.StatusCode, http.StatusText(e.StatusCode))
		if e.RetryAfter > 0 {
			fmt.Fprintf(&b, " (retry after %v)", e.RetryAfter.Round(time.Millisecond))
		}
	}
	if e.Err != nil {
		b.WriteString(": " + e.Err.Error())
	}
	if e.Body != "" {
		fmt.Fprintf(&b, ": response %q", e.Body)
	}
	return b.String()
}

// Unwrap returns Err.
func (e *PublishError) Unwrap() error { return e.Err }
