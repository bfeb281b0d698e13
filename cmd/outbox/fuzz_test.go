package main

import (
	"net/url"
	"strings"
	"testing"
)

// FuzzRedact: whatever URL a user passes, once it was seen, its password never
// survives into an error message that quotes the URL.
func FuzzRedact(f *testing.F) {
	f.Add("app", "s3cret", "db.internal:5432")
	f.Add("u", "p@ss:w/rd?x=1", "127.0.0.1")
	f.Add("", "pw", "h")
	f.Fuzz(func(t *testing.T, user, password, host string) {
		if len(password) < 3 || strings.ContainsAny(host, "/?#@") {
			return // short strings also occur by chance in any text
		}
		u := url.URL{Scheme: "postgres", User: url.UserPassword(user, password), Host: host, Path: "/db"}
		raw := u.String()
		rememberSecret(raw)
		out := redact("cannot connect to " + raw + ": refused")
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
		if _, err := webhookPublisher(raw, "secret"); err != nil {
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
