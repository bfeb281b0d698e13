package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/outboxamqp"
)

// amqpCheckTimeout bounds the start-up check of the broker.
const amqpCheckTimeout = 10 * time.Second

// amqpClientParams are the query parameters amqp091 reads from the URL
// itself (TLS files, SASL mechanism, heartbeat...); they stay in the URL.
var amqpClientParams = map[string]bool{
	"auth_mechanism": true, "cacertfile": true, "certfile": true, "channel_max": true,
	"connection_timeout": true, "heartbeat": true, "keyfile": true, "server_name_indication": true,
}

// amqpTarget is a parsed amqp:// (or amqps://) --publisher URL:
//
//	amqp://user:password@host:5672/vhost?exchange=X&routing_key=K&unroutable=retry|dead&confirm_timeout=D
type amqpTarget struct {
	url string // for amqp091: our parameters removed
	cfg outboxamqp.Config
}

// openAMQP builds the publisher for an amqp:// or amqps:// --publisher URL.
// The password is kept out of logs and errors. The relay starts while the
// broker is unreachable (it connects on the first batch, and again after
// every drop); when the broker answers, refused credentials, a missing
// virtual host or a missing exchange fail the start instead of making every
// batch fail.
func openAMQP(raw string) (outbox.Publisher, error) {
	target, err := parseAMQPURL(raw)
	if err != nil {
		return nil, usagef("--publisher %q: %v", redact(raw), err)
	}
	p, err := outboxamqp.Open(target.url, target.cfg)
	if err != nil {
		return nil, usagef("--publisher %q: %v", redact(raw), err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), amqpCheckTimeout)
	defer cancel()
	if err := p.Ping(ctx); err != nil {
		var refused *amqp.Error
		if errors.As(err, &refused) {
			_ = p.Close()
			return nil, fmt.Errorf("RabbitMQ refused the --publisher configuration: %v", err)
		}
		// Unreachable for now: the relay retries its batches until it is up.
	}
	return p, nil
}

func parseAMQPURL(raw string) (amqpTarget, error) {
	var t amqpTarget
	u, err := url.Parse(raw)
	if err != nil {
		// url.Error quotes the URL: keep only the reason.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return t, fmt.Errorf("use amqp://user:password@host:5672/vhost?exchange=X (percent-encode special characters): %v", err)
	}
	if s := strings.ToLower(u.Scheme); s != "amqp" && s != "amqps" {
		return t, fmt.Errorf("use amqp:// or amqps://")
	}
	if u.Host == "" {
		return t, fmt.Errorf("no broker address; use amqp://user:password@host:5672/vhost")
	}
	q := u.Query()
	for name, vs := range q {
		v := vs[len(vs)-1]
		switch name {
		case "confirm_timeout":
			if t.cfg.ConfirmTimeout, err = time.ParseDuration(v); err != nil || t.cfg.ConfirmTimeout <= 0 {
				return t, fmt.Errorf("confirm_timeout=%q: use a positive duration such as 10s", v)
			}
		case "exchange":
			t.cfg.Exchange = v
		case "routing_key":
			if v == "" {
				return t, fmt.Errorf("routing_key is empty; leave it out to route each message by its topic")
			}
			key := v
			t.cfg.RoutingKey = func(outbox.Message) string { return key }
		case "unroutable":
			switch v {
			case "retry":
			case "dead":
				t.cfg.UnroutablePermanent = true
			default:
				return t, fmt.Errorf("unroutable=%q: use retry (the default: retry until a queue is bound) or dead (dead-letter at once)", v)
			}
		default:
			if !amqpClientParams[name] {
				return t, fmt.Errorf("unknown parameter %q; use exchange, routing_key, unroutable, confirm_timeout, or an amqp091 one (heartbeat, connection_timeout, channel_max, auth_mechanism, certfile, keyfile, cacertfile, server_name_indication)", name)
			}
			continue
		}
		q.Del(name)
	}
	if err := t.cfg.Validate(); err != nil {
		var ce *outbox.ConfigError
		if errors.As(err, &ce) && ce.Field == "outboxamqp.Config.Exchange" {
			return t, fmt.Errorf("exchange: %s", ce.Fix)
		}
		return t, err
	}
	u.RawQuery = q.Encode()
	t.url = u.String()
	return t, nil
}
