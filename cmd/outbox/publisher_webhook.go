package main

import (
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/outboxhttp"
)

// envWebhookSecret names the environment variable holding the key webhook
// requests are signed with. It is never taken from the URL, which may end up
// in process listings and shell histories.
const envWebhookSecret = "OUTBOX_WEBHOOK_SECRET"

// openWebhook builds the publisher for an http:// or https:// --publisher URL:
// every message is POSTed to that URL (see package outboxhttp), signed the
// Standard Webhooks way with the secret in $OUTBOX_WEBHOOK_SECRET (see
// webhookSecret for its forms). Query parameters named outbox_* configure the
// publisher and are removed from the URL the requests go to; the others stay:
//
//	outbox_timeout=5s           per-request timeout (default 10s)
//	outbox_concurrency=8        requests in flight per batch (default 8)
//	outbox_sequential=true      one request at a time, in batch order
//	outbox_max_retry_after=1h   cap on the delay a Retry-After can ask for
//
// User information in the URL is sent as basic authentication; errors and
// logs show the URL without it and without the query.
func openWebhook(raw string) (outbox.Publisher, error) {
	return webhookPublisher(raw, os.Getenv(envWebhookSecret))
}

func webhookPublisher(raw, secret string) (*outboxhttp.Publisher, error) {
	u, err := url.Parse(raw)
	if err != nil {
		// url.Parse's error quotes the whole URL, secrets included.
		return nil, usagef("--publisher: the webhook URL cannot be parsed; use https://host/path")
	}
	safe := outboxhttp.SafeURL(u)
	cfg := outboxhttp.Config{}
	var keep []string
	for pair := range strings.SplitSeq(u.RawQuery, "&") {
		rawName, rawValue, _ := strings.Cut(pair, "=")
		name, err := url.QueryUnescape(rawName)
		if pair == "" || err != nil || !strings.HasPrefix(name, "outbox_") {
			if pair != "" {
				keep = append(keep, pair)
			}
			continue
		}
		value, err := url.QueryUnescape(rawValue)
		if err != nil {
			return nil, usagef("--publisher %s: parameter %s is not URL-encoded correctly", safe, name)
		}
		if err := setWebhookParam(&cfg, name, value); err != nil {
			return nil, usagef("--publisher %s: %s=%s: %v", safe, name, value, err)
		}
	}
	if cfg.Secret, err = webhookSecret(secret); err != nil {
		return nil, usagef("--publisher %s: %v", safe, err)
	}
	u.RawQuery = strings.Join(keep, "&")
	u.ForceQuery = false
	cfg.URL = u.String()
	p, err := outboxhttp.New(cfg)
	if err != nil {
		return nil, usagef("--publisher %s: %v", safe, err)
	}
	return p, nil
}

// webhookSecretFormat says what $OUTBOX_WEBHOOK_SECRET may hold.
var webhookSecretFormat = fmt.Sprintf("use %s followed by the base64 of at least %d random bytes, as Standard Webhooks receivers write it (e.g. %s$(openssl rand -base64 32)), or a plain string of at least %d bytes, used byte for byte",
	outboxhttp.SecretPrefix, outboxhttp.SecretMinLength, outboxhttp.SecretPrefix, outboxhttp.SecretMinLength)

// webhookSecret returns the key bytes $OUTBOX_WEBHOOK_SECRET holds: the
// base64 after "whsec_" decoded, so that both ends share the string a
// Standard Webhooks library takes; any other value byte for byte, as earlier
// versions used it, so existing setups keep working (a plain secret that
// starts with whsec_ must therefore be re-encoded). Keys shorter than
// outboxhttp.SecretMinLength are rejected. Errors never show the value.
func webhookSecret(s string) ([]byte, error) {
	if s == "" {
		return nil, fmt.Errorf("set %s to the secret shared with the receiver; every request is signed with it (Standard Webhooks HMAC-SHA256 in the %s header): %s", envWebhookSecret, outboxhttp.HeaderWebhookSignature, webhookSecretFormat)
	}
	key := []byte(s)
	form := "as a plain string"
	if strings.HasPrefix(strings.TrimSpace(s), outboxhttp.SecretPrefix) {
		var err error
		if key, err = outboxhttp.ParseSecret(s); err != nil {
			return nil, fmt.Errorf("%s: %v; %s", envWebhookSecret, err, webhookSecretFormat)
		}
		form = "after base64 decoding"
	}
	if len(key) < outboxhttp.SecretMinLength {
		return nil, fmt.Errorf("%s has %d bytes %s, want at least %d: %s", envWebhookSecret, len(key), form, outboxhttp.SecretMinLength, webhookSecretFormat)
	}
	return key, nil
}

// setWebhookParam applies one outbox_* query parameter to cfg.
func setWebhookParam(cfg *outboxhttp.Config, name, value string) error {
	positive := func(v string) (time.Duration, error) {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return 0, fmt.Errorf("use a positive duration such as 5s")
		}
		return d, nil
	}
	var err error
	switch name {
	case "outbox_timeout":
		cfg.Timeout, err = positive(value)
	case "outbox_max_retry_after":
		cfg.MaxRetryAfter, err = positive(value)
	case "outbox_concurrency":
		n, convErr := strconv.Atoi(value)
		if convErr != nil || n <= 0 {
			return fmt.Errorf("use a positive number of requests")
		}
		cfg.Concurrency = n
	case "outbox_sequential":
		b, convErr := strconv.ParseBool(value)
		if convErr != nil {
			return fmt.Errorf("use true or false")
		}
		cfg.Sequential = b
	default:
		return fmt.Errorf("unknown parameter; use outbox_timeout, outbox_concurrency, outbox_sequential or outbox_max_retry_after")
	}
	return err
}
