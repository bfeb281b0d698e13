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
