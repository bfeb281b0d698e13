package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/outboxnats"
)

// natsDefaultPort is the port of a server address given without one.
const natsDefaultPort = "4222"

// natsStreamCheckTimeout bounds the start-up look-up of ?stream=.
const natsStreamCheckTimeout = 10 * time.Second

// natsTarget is a parsed nats:// (or tls://) --publisher URL:
//
//	nats://[user:password@|token@]host[:port][,host[:port]...][?stream=S&subject_prefix=P&creds=FILE&tls_ca=FILE&ack_timeout=D]
type natsTarget struct {
	ackTimeout    time.Duration
	creds         string
	password      string
	servers       []string
	stream        string
	subjectPrefix string
	tlsCA         string
	token         string
	user          string
}

// openNATS builds the publisher for a nats:// or tls:// --publisher URL.
// Credentials in the URL authenticate every server of the list and are kept
// out of logs and errors. The relay starts even while NATS is down (the
// connection keeps retrying); when it is up and ?stream= is given, a missing
// stream fails the start instead of dead-lettering every message.
func openNATS(raw string) (outbox.Publisher, error) {
	n, err := parseNATSURL(raw)
	// Remember the secrets before any error can quote them.
	secrets.add(n.password, n.token)
	if err != nil {
		return nil, usagef("--publisher %q: %v", redactNATSURL(raw), err)
	}
	cfg := outboxnats.Config{
		AckTimeout:     n.ackTimeout,
		ConnectOptions: n.options(),
		Stream:         n.stream,
		SubjectPrefix:  n.subjectPrefix,
	}
	p, err := outboxnats.Open(strings.Join(n.servers, ","), cfg)
	if err != nil {
		return nil, usagef("--publisher %q: %v", redactNATSURL(raw), err)
	}
	if err := checkNATSStream(p, n.stream); err != nil {
		_ = p.Close()
		return nil, err
	}
	return p, nil
}

// checkNATSStream fails if stream is set, the server answers and has no such
// stream (or no JetStream). It passes when the server cannot be asked yet.
func checkNATSStream(p *outboxnats.Publisher, stream string) error {
	if stream == "" || !p.JetStream().Conn().IsConnected() {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), natsStreamCheckTimeout)
	defer cancel()
	_, err := p.JetStream().Stream(ctx, stream)
	switch {
	case errors.Is(err, jetstream.ErrStreamNotFound):
		return fmt.Errorf("NATS: stream %q not found; create it (e.g. nats stream add %s --subjects '<prefix>.>') or fix ?stream= in --publisher", stream, stream)
	case errors.Is(err, jetstream.ErrJetStreamNotEnabled), errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount):
		return fmt.Errorf("NATS: JetStream is not enabled for this server or account; the nats publisher needs it")
	}
	return nil
}

// redactNATSURL hides the whole user information of a NATS URL (a token has
// no colon to find), even when the URL is malformed.
func redactNATSURL(raw string) string {
	if i := strings.Index(raw, "://"); i >= 0 {
		end := len(raw)
		if j := strings.IndexAny(raw[i+3:], "/?"); j >= 0 {
			end = i + 3 + j
		}
		if at := strings.LastIndex(raw[i+3:end], "@"); at >= 0 {
			raw = raw[:i+3] + "xxxxx" + raw[i+3+at:]
		}
	}
	return redact(raw)
}

func parseNATSURL(raw string) (natsTarget, error) {
	var n natsTarget
	scheme, rest, ok := strings.Cut(raw, "://")
	scheme = strings.ToLower(scheme)
	if !ok || scheme != "nats" && scheme != "tls" {
		return n, fmt.Errorf("use nats://host:4222[,host2:4222][?stream=S&subject_prefix=P], or tls:// for TLS")
	}
	rest, query, _ := strings.Cut(rest, "?")
	authority, path, _ := strings.Cut(rest, "/")
	if path != "" {
		return n, unexpectedPath(path, "the stream goes in ?stream= and the subject prefix in ?subject_prefix=")
	}
	if at := strings.LastIndex(authority, "@"); at >= 0 {
		user, pass, hasPass := strings.Cut(authority[:at], ":")
		authority = authority[at+1:]
		var err1, err2 error
		user, err1 = url.PathUnescape(user)
		pass, err2 = url.PathUnescape(pass)
		switch {
		case err1 != nil || err2 != nil || user == "":
			return n, fmt.Errorf("give credentials as user:password@ or token@ (percent-encode special characters)")
		case hasPass:
			n.user, n.password = user, pass
		default:
			n.token = user
		}
	}
	for h := range strings.SplitSeq(authority, ",") {
		h = strings.TrimSpace(h)
		if h == "" {
			continue
		}
		addr, err := natsServer(h)
		if err != nil {
			return n, err
		}
		n.servers = append(n.servers, scheme+"://"+addr)
	}
	if len(n.servers) == 0 {
		return n, fmt.Errorf("no server address; use nats://host:4222")
	}

	values, err := url.ParseQuery(query)
	if err != nil {
		return n, fmt.Errorf("query: %v", err)
	}
	for name, vs := range values {
		v := vs[len(vs)-1]
		switch name {
		case "ack_timeout":
			if n.ackTimeout, err = time.ParseDuration(v); err != nil || n.ackTimeout <= 0 {
				return n, fmt.Errorf("ack_timeout=%q: use a positive duration such as 10s", v)
			}
		case "creds":
			n.creds = v
		case "stream":
			n.stream = v
		case "subject_prefix":
			n.subjectPrefix = v
		case "tls_ca":
			n.tlsCA = v
		default:
			return n, fmt.Errorf("unknown parameter %q; use stream, subject_prefix, creds, tls_ca or ack_timeout", name)
		}
	}
	if n.creds != "" && (n.user != "" || n.token != "") {
		return n, fmt.Errorf("creds= and credentials before the host exclude each other; use one")
	}
	// Check the stream and prefix now, for a usage error naming the URL
	// parameter rather than the configuration field.
	if err := (outboxnats.Config{Stream: n.stream, SubjectPrefix: n.subjectPrefix}).Validate(); err != nil {
		var ce *outbox.ConfigError
		if errors.As(err, &ce) {
			param := map[string]string{"outboxnats.Config.Stream": "stream", "outboxnats.Config.SubjectPrefix": "subject_prefix"}[ce.Field]
			return n, fmt.Errorf("%s=%q: %s", param, fmt.Sprint(ce.Value), ce.Fix)
		}
		return n, err
	}
	return n, nil
}

// natsServer checks a server address and adds the default port if it has
// none.
func natsServer(h string) (string, error) { return hostPort(h, natsDefaultPort, "server") }

// options returns the connection options for n: its credentials, and a
// name. (outboxnats.Open starts the connection even while NATS is down.)
func (n natsTarget) options() []nats.Option {
	opts := []nats.Option{nats.Name("outbox relay")}
	switch {
	case n.user != "":
		opts = append(opts, nats.UserInfo(n.user, n.password))
	case n.token != "":
		opts = append(opts, nats.Token(n.token))
	case n.creds != "":
		opts = append(opts, nats.UserCredentials(n.creds))
	}
	if n.tlsCA != "" {
		opts = append(opts, nats.RootCAs(n.tlsCA))
	}
	return opts
}
