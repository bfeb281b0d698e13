package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/outboxhttp"
	"github.com/go-outbox/outbox/outboxkafka"
	"github.com/go-outbox/outbox/outboxnats"
)

// FuzzRedact: whatever URL a user passes, once it was seen, its password never
// survives into an error message that quotes the URL.
func FuzzRedact(f *testing.F) {
	f.Add("app", "s3cret", "db.internal:5432")
	f.Add("u", "p@ss:w/rd?x=1", "127.0.0.1")
	f.Add("", "pw", "h")
	f.Add("0", "/0:", "h") // CI, stop 24: the message spells "/0:" in "://0:"
	f.Fuzz(func(t *testing.T, user, password, host string) {
		if len(password) < 3 || strings.ContainsAny(host, "/?#@") {
			return // short strings also occur by chance in any text
		}
		u := url.URL{Scheme: "postgres", User: url.UserPassword(user, password), Host: host, Path: "/db"}
		// A password that the redacted message spells by chance (say "/0:"
		// from "://0:" with the user "0", or "00+", the query escaping of
		// "00 ", from the host "\x00+" escaped as "%00+") proves nothing.
		hidden := u
		hidden.User = url.UserPassword(user, "xxxxx")
		if msg := "cannot connect to " + hidden.String() + ": refused"; strings.Contains(msg, password) ||
			strings.Contains(msg, url.QueryEscape(password)) {
			return
		}
		// A set of this URL's secrets only: the passwords of earlier inputs
		// would redact parts of this one's message and hide what it tests.
		var seen secretSet
		seen.remember(u.String())
		out := seen.redact("cannot connect to " + u.String() + ": refused")
		if strings.Contains(out, password) || strings.Contains(out, url.QueryEscape(password)) {
			t.Fatalf("redact kept the password %q: %q", password, out)
		}
	})
}

// FuzzURLParsers feeds arbitrary URLs to every parser of the CLI's outside
// input (database and publisher URLs): none may panic, and the one-line error
// the CLI would print never shows the URL's password.
func FuzzURLParsers(f *testing.F) {
	f.Add("amqp", "guest", "pa55word", "127.0.0.1:5672/vhost?exchange=events&routing_key=k")
	f.Add("kafka", "user", "s3cret-pw", "a:9092,b:9093?topic=orders&sasl=plain")
	f.Add("nats", "u", "tok3n-pw", "h:4222?stream=ORDERS&subject_prefix=o.")
	f.Add("https", "u", "hidden-pw", "hooks.example/in?outbox_timeout=5s&x=1")
	f.Add("sqlite", "", "", "/tmp/app.db")
	f.Add("postgres", "app", "db-pass", "db:5432/app?sslmode=disable")
	f.Add("amqp", "%", "%zz", "[::1")
	f.Fuzz(func(t *testing.T, scheme, user, password, rest string) {
		raw := scheme + "://" + user + ":" + password + "@" + rest
		errs := []error{urlSchemeErr(raw)}
		if _, err := parseAMQPURL(raw); err != nil {
			errs = append(errs, err)
		}
		if _, err := parseKafkaURL(raw); err != nil {
			errs = append(errs, err)
		}
		if _, err := parseNATSURL(raw); err != nil {
			errs = append(errs, err)
		}
		if _, err := sqlitePath(raw); err != nil {
			errs = append(errs, err)
		}
		if _, err := webhookPublisher(raw, "sixteen-byte-key"); err != nil {
			errs = append(errs, err)
		}
		if len(password) < 4 {
			return // a short password occurs in any text by chance
		}
		rememberSecret(raw)
		for _, err := range errs {
			if err == nil {
				continue
			}
			if out := redact(err.Error()); strings.Contains(out, password) {
				t.Fatalf("error for %q shows the password %q: %s", raw, password, out)
			}
		}
	})
}

// urlSchemeErr runs urlScheme, which must not panic, and returns nil.
func urlSchemeErr(raw string) error {
	_ = urlScheme(raw)
	return nil
}

// FuzzRelayFlags runs `outbox relay` with arbitrary values of its numeric
// flags, up to the point where it would open the database. It must never
// panic; the first invalid value must fail with a one-line usage error (exit
// 2) naming its flag (and the value in effect when the flag parsed but the
// configuration is invalid); a valid set must get past validation.
func FuzzRelayFlags(f *testing.F) {
	f.Add("100", "2", "30s", "12", "1s", "10m", "1s", "10ms", "0s", "30s")
	f.Add("-5", "0", "1ms", "-1", "-1s", "1ns", "5ms", "1h", "-1h", "-1s")
	f.Add("0x10", "1_000", "2562047h47m16.854775807s", "0", "2562047h", "2562047h47m16.854775807s", "2562047h47m16.854775807s", "0", "0", "0")
	f.Add("10001", "1001", "99ms", "9223372036854775807", "1h", "1m", "0", "20ms", "1.5h", "-0")
	f.Add("", "two", "30", "1e3", "1 s", "+5s", ".5s", "1µs", "-2562047h47m16.854775808s", "9999999999h")
	f.Fuzz(func(t *testing.T, batchSize, workers, lease, maxAttempts, backoffBase, backoffMax, poll, activePoll, retention, shutdown string) {
		// The flags, in the order they are passed, each with what pflag
		// makes of a value.
		var cfg outbox.Config
		var shutdownTimeout time.Duration
		flags := []struct {
			name, value string
			set         func(string) error
		}{
			{"--batch-size", batchSize, intFlag(&cfg.BatchSize)},
			{"--workers", workers, intFlag(&cfg.Workers)},
			{"--lease", lease, durationFlag(&cfg.LeaseDuration)},
			{"--max-attempts", maxAttempts, intFlag(&cfg.MaxAttempts)},
			{"--backoff-base", backoffBase, durationFlag(&cfg.BackoffBase)},
			{"--backoff-max", backoffMax, durationFlag(&cfg.BackoffMax)},
			{"--poll-interval", poll, durationFlag(&cfg.PollInterval)},
			{"--active-poll-interval", activePoll, durationFlag(&cfg.ActivePollInterval)},
			{"--retention", retention, durationFlag(&cfg.Retention)},
			{"--shutdown-timeout", shutdown, durationFlag(&shutdownTimeout)},
		}
		args := []string{"relay", "--database-url", "nodb:x", "--publisher", "stdout:"}
		for _, fl := range flags {
			args = append(args, fl.name+"="+fl.value)
		}
		var out, errOut strings.Builder
		code := run(context.Background(), args, &out, &errOut)
		msg := strings.TrimSuffix(errOut.String(), "\n")
		if code != 2 || msg == "" || strings.Contains(msg, "\n") {
			t.Fatalf("outbox %q: exit %d, stderr %q; want exit 2 and one line", args, code, msg)
		}

		// What the command must have found, in its order: the flags, then
		// the configuration, then the database URL.
		for _, fl := range flags {
			if err := fl.set(fl.value); err != nil {
				if !strings.Contains(msg, `"`+fl.name+`"`) {
					t.Fatalf("outbox %q: %q does not name %s, whose value %q is invalid", args, msg, fl.name, fl.value)
				}
				return
			}
		}
		var ce *outbox.ConfigError
		switch err := cfg.Validate(); {
		case errors.As(err, &ce):
			if want := relayFlags[ce.Field] + " " + fmt.Sprint(ce.Value) + ": "; !strings.Contains(msg, want) || strings.Contains(msg, "Config.") {
				t.Fatalf("outbox %q: %q, want it to say %q and name flags, not Config fields", args, msg, want)
			}
		case err != nil:
			t.Fatalf("Validate: %v", err)
		case shutdownTimeout < 0:
			if !strings.Contains(msg, "--shutdown-timeout "+shutdownTimeout.String()+":") {
				t.Fatalf("outbox %q: %q does not name --shutdown-timeout", args, msg)
			}
		case !strings.Contains(msg, `database URL scheme "nodb"`):
			t.Fatalf("outbox %q: valid flags, but %q", args, msg)
		}
	})
}

// intFlag and durationFlag parse a value as pflag does for IntVar and
// DurationVar.
func intFlag(p *int) func(string) error {
	return func(s string) error {
		n, err := strconv.ParseInt(s, 0, 64)
		*p = int(n)
		return err
	}
}

func durationFlag(p *time.Duration) func(string) error {
	return func(s string) (err error) {
		*p, err = time.ParseDuration(s)
		return err
	}
}

// FuzzPublisherOptions feeds arbitrary query parameters to every publisher
// URL of --publisher. None may panic; a rejected parameter is named in the
// error, with its value when the name is known; an accepted one must be in
// effect, with a positive timeout or count, and our parameters must not leak
// into the URL the broker client gets.
func FuzzPublisherOptions(f *testing.F) {
	for _, p := range [][2]string{
		{"topic", "orders"}, {"topic", "a b"}, {"tls", "TRUE"}, {"sasl", "scram-sha-512"}, {"client_id", ""},
		{"stream", "ORDERS"}, {"stream", "a.b"}, {"subject_prefix", "events."}, {"subject_prefix", "a b"},
		{"ack_timeout", "2s"}, {"ack_timeout", "0s"}, {"creds", "/x.creds"},
		{"exchange", "events"}, {"routing_key", ""}, {"unroutable", "dead"}, {"confirm_timeout", "-1s"}, {"heartbeat", "10"},
		{"outbox_timeout", "5s"}, {"outbox_concurrency", "0"}, {"outbox_sequential", "t"}, {"outbox_max_retry_after", "1h"},
		{"outbox_timeout", "2562047h47m16.854775807s"}, {"outbox_concurrency", "9223372036854775807"}, {"outbox_", "x"}, {"x", "y"},
	} {
		f.Add(p[0], p[1])
	}
	f.Fuzz(func(t *testing.T, name, value string) {
		query := "?" + url.QueryEscape(name) + "=" + url.QueryEscape(value)
		checkParamError := func(scheme string, known []string, err error) {
			t.Helper()
			msg := err.Error()
			if !strings.Contains(msg, name) && !strings.Contains(msg, strconv.Quote(name)) {
				t.Fatalf("%s%s: error %q does not name the parameter", scheme, query, msg)
			}
			lower := strings.ToLower(msg) // sasl=PLAIN is quoted as plain
			if slices.Contains(known, name) && !strings.Contains(lower, strings.ToLower(value)) && !strings.Contains(msg, strconv.Quote(value)) {
				t.Fatalf("%s%s: error %q does not show the value", scheme, query, msg)
			}
		}

		if a, err := parseAMQPURL("amqp://u:p@h:5672/vh" + query); err != nil {
			checkParamError("amqp", []string{"confirm_timeout", "unroutable"}, err)
		} else {
			d, _ := time.ParseDuration(value)
			switch u, _ := url.Parse(a.url); {
			case name == "confirm_timeout" && (d <= 0 || a.cfg.ConfirmTimeout != d):
				t.Fatalf("amqp%s: confirm timeout %v", query, a.cfg.ConfirmTimeout)
			case name == "exchange" && a.cfg.Exchange != value:
				t.Fatalf("amqp%s: exchange %q", query, a.cfg.Exchange)
			case name == "unroutable" && a.cfg.UnroutablePermanent != (value == "dead"):
				t.Fatalf("amqp%s: unroutable messages permanent = %v", query, a.cfg.UnroutablePermanent)
			case u == nil || u.Host != "h:5672" || u.User.String() != "u:p":
				t.Fatalf("amqp%s: the client gets the URL %q", query, a.url)
			case amqpClientParams[name] != u.Query().Has(name):
				t.Fatalf("amqp%s: the client gets the URL %q", query, a.url)
			}
		}

		if k, err := parseKafkaURL("kafka://h:9092" + query); err != nil {
			checkParamError("kafka", []string{"sasl", "tls", "topic"}, err)
		} else if name == "topic" && (k.topic != value || outboxkafka.ValidateTopic(k.topic) != nil) || name == "client_id" && k.clientID != value {
			t.Fatalf("kafka%s: %+v", query, k)
		}

		if n, err := parseNATSURL("nats://h:4222" + query); err != nil {
			checkParamError("nats", []string{"ack_timeout", "stream", "subject_prefix"}, err)
		} else {
			d, _ := time.ParseDuration(value)
			cfg := outboxnats.Config{AckTimeout: n.ackTimeout, Stream: n.stream, SubjectPrefix: n.subjectPrefix}
			if name == "ack_timeout" && (d <= 0 || n.ackTimeout != d) || cfg.Validate() != nil {
				t.Fatalf("nats%s: %+v", query, n)
			}
		}

		if _, err := webhookPublisher("https://h/hook"+query, "sixteen-byte-key"); err != nil {
			checkParamError("https", []string{"outbox_timeout", "outbox_max_retry_after", "outbox_concurrency", "outbox_sequential"}, err)
		}
		var cfg outboxhttp.Config
		if err := setWebhookParam(&cfg, name, value); err == nil {
			d, _ := time.ParseDuration(value)
			n, _ := strconv.Atoi(value)
			b, _ := strconv.ParseBool(value)
			if name == "outbox_timeout" && (d <= 0 || cfg.Timeout != d) ||
				name == "outbox_max_retry_after" && (d <= 0 || cfg.MaxRetryAfter != d) ||
				name == "outbox_concurrency" && (n <= 0 || cfg.Concurrency != n) ||
				name == "outbox_sequential" && cfg.Sequential != b {
				t.Fatalf("%s=%q gives %+v", name, value, cfg)
			}
		}
	})
}
