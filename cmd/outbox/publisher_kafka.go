package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/outboxkafka"
)

// kafkaDefaultPort is the port of a broker address given without one.
const kafkaDefaultPort = "9092"

// kafkaTopicCheckTimeout bounds the start-up look-up of ?topic=: first a
// ping, then the topic's metadata.
const kafkaTopicCheckTimeout = 5 * time.Second

// kafkaTarget is a parsed kafka:// --publisher URL:
//
//	kafka://[user:password@]host[:port][,host[:port]...][?topic=T&tls=true&sasl=plain&client_id=C]
type kafkaTarget struct {
	clientID string
	password string
	// sasl is "", "plain", "scram-sha-256" or "scram-sha-512".
	sasl  string
	seeds []string
	tls   bool
	topic string
	user  string
}

// openKafka builds the publisher for a kafka:// --publisher URL. The client
// connects on first use, so the relay starts even while Kafka is down; when
// Kafka answers and ?topic= names a topic it does not have, the start fails
// instead of every message failing.
func openKafka(raw string) (outbox.Publisher, error) {
	k, err := parseKafkaURL(raw)
	if err != nil {
		return nil, usagef("--publisher %q: %v", redactKafkaURL(raw), err)
	}
	p, err := outboxkafka.Open(k.seeds, outboxkafka.Config{Topic: k.topic}, k.options()...)
	if err != nil {
		return nil, usagef("--publisher %q: %v", redactKafkaURL(raw), err)
	}
	if err := checkKafkaTopic(p, k); err != nil {
		_ = p.Close()
		// Exit 1 as for a missing NATS stream: the command was right, the
		// cluster is not ready for it.
		return nil, fmt.Errorf("--publisher %q: %w", redactKafkaURL(raw), err)
	}
	return p, nil
}

// checkKafkaTopic fails if k names a topic and the cluster answers that it
// does not exist. It passes when the cluster cannot be asked (down, or the
// look-up refused): the relay then starts, and its publisher reports a
// missing topic, retrying.
func checkKafkaTopic(p *outboxkafka.Publisher, k kafkaTarget) error {
	if k.topic == "" {
		return nil // the messages' own topics: unknown until they come
	}
	ctx, cancel := context.WithTimeout(context.Background(), kafkaTopicCheckTimeout)
	defer cancel()
	if err := p.CheckTopic(ctx, k.topic); errors.Is(err, kerr.UnknownTopicOrPartition) {
		return fmt.Errorf("topic %q does not exist in the Kafka cluster; create it (e.g. kafka-topics.sh --bootstrap-server %s --create --topic %s) or fix ?topic=", k.topic, k.seeds[0], k.topic)
	}
	return nil
}

// redactKafkaURL hides the whole user information of a kafka:// URL, even
// when it is malformed (a password given without a user, say).
func redactKafkaURL(raw string) string {
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

func parseKafkaURL(raw string) (kafkaTarget, error) {
	var k kafkaTarget
	scheme, rest, ok := strings.Cut(raw, "://")
	if !ok || !strings.EqualFold(scheme, "kafka") {
		return k, fmt.Errorf("use kafka://host:9092[,host2:9092][?topic=T]")
	}
	rest, query, _ := strings.Cut(rest, "?")
	authority, path, _ := strings.Cut(rest, "/")
	if path != "" {
		return k, unexpectedPath(path, "the topic goes in ?topic=")
	}
	if at := strings.LastIndex(authority, "@"); at >= 0 {
		user, pass, hasPass := strings.Cut(authority[:at], ":")
		authority = authority[at+1:]
		var err1, err2 error
		k.user, err1 = url.PathUnescape(user)
		k.password, err2 = url.PathUnescape(pass)
		if err1 != nil || err2 != nil || k.user == "" || !hasPass {
			return k, fmt.Errorf("give SASL credentials as user:password@ (percent-encode special characters)")
		}
	}
	for h := range strings.SplitSeq(authority, ",") {
		h = strings.TrimSpace(h)
		if h == "" {
			continue
		}
		seed, err := kafkaSeed(h)
		if err != nil {
			return k, err
		}
		k.seeds = append(k.seeds, seed)
	}
	if len(k.seeds) == 0 {
		return k, fmt.Errorf("no broker address; use kafka://host:9092")
	}

	values, err := url.ParseQuery(query)
	if err != nil {
		return k, fmt.Errorf("query: %v", err)
	}
	for name, vs := range values {
		v := vs[len(vs)-1]
		switch name {
		case "client_id":
			k.clientID = v
		case "sasl":
			k.sasl = strings.ToLower(v)
			switch k.sasl {
			case "plain", "scram-sha-256", "scram-sha-512":
			default:
				return k, fmt.Errorf("sasl=%q: use plain, scram-sha-256 or scram-sha-512", v)
			}
		case "tls":
			if k.tls, err = strconv.ParseBool(v); err != nil {
				return k, fmt.Errorf("tls=%q: use true or false", v)
			}
		case "topic":
			if err := outboxkafka.ValidateTopic(v); err != nil {
				return k, fmt.Errorf("topic=%q: %v", v, err)
			}
			k.topic = v
		default:
			return k, fmt.Errorf("unknown parameter %q; use topic, tls, sasl or client_id", name)
		}
	}
	switch {
	case k.sasl != "" && k.user == "":
		return k, fmt.Errorf("sasl=%s needs user:password@ before the hosts", k.sasl)
	case k.sasl == "" && k.user != "":
		k.sasl = "plain"
	}
	return k, nil
}

// kafkaSeed checks a broker address and adds the default port if it has
// none.
func kafkaSeed(h string) (string, error) { return hostPort(h, kafkaDefaultPort, "broker") }

// hostPort checks a host[:port] address from a publisher URL (IPv6 in
// brackets) and adds defaultPort if it has none; what names the address in
// errors ("broker", "server").
func hostPort(h, defaultPort, what string) (string, error) {
	if !strings.Contains(h, ":") || strings.HasPrefix(h, "[") && strings.HasSuffix(h, "]") {
		h = net.JoinHostPort(strings.Trim(h, "[]"), defaultPort)
	}
	host, port, err := net.SplitHostPort(h)
	if err != nil || host == "" {
		return "", fmt.Errorf("%s address %q: use host:port", what, h)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return "", fmt.Errorf("%s address %q: port %q is not a number from 1 to 65535", what, h, port)
	}
	return h, nil
}

// options returns the client options for k.
func (k kafkaTarget) options() []kgo.Opt {
	var opts []kgo.Opt
	if k.clientID != "" {
		opts = append(opts, kgo.ClientID(k.clientID))
	}
	if k.tls {
		opts = append(opts, kgo.DialTLSConfig(&tls.Config{MinVersion: tls.VersionTLS12}))
	}
	switch k.sasl {
	case "plain":
		opts = append(opts, kgo.SASL(plain.Auth{User: k.user, Pass: k.password}.AsMechanism()))
	case "scram-sha-256":
		opts = append(opts, kgo.SASL(scram.Auth{User: k.user, Pass: k.password}.AsSha256Mechanism()))
	case "scram-sha-512":
		opts = append(opts, kgo.SASL(scram.Auth{User: k.user, Pass: k.password}.AsSha512Mechanism()))
	}
	return opts
}
