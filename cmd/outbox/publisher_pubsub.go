package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strconv"
	"time"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/outboxpubsub"
)

// pubsubCheckTimeout bounds the start-up check of the topic.
const pubsubCheckTimeout = 5 * time.Second

// parsePubSubURL reads a pubsub:// --publisher URL:
//
//	pubsub://PROJECT[/TOPIC][?topic_prefix=P&ordering_keys=true&timeout=D]
//
// A TOPIC names the one Pub/Sub topic every message goes to; without one,
// each message goes to the topic named by its outbox topic (after
// topic_prefix). Credentials never go in the URL: the client finds them
// (GOOGLE_APPLICATION_CREDENTIALS, the metadata server), and talks to the
// emulator at PUBSUB_EMULATOR_HOST if set. It returns the URL for
// outboxpubsub.Open and the Config.
func parsePubSubURL(raw string) (string, outboxpubsub.Config, error) {
	var cfg outboxpubsub.Config
	u, err := url.Parse(raw)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return "", cfg, fmt.Errorf("use pubsub://PROJECT[/TOPIC]: %v", err)
	}
	if u.User != nil {
		return "", cfg, fmt.Errorf("credentials do not go in the URL: set GOOGLE_APPLICATION_CREDENTIALS to a key file, or run where the metadata server gives a service account")
	}
	for name, vs := range u.Query() {
		v := vs[len(vs)-1]
		switch name {
		case "ordering_keys":
			if cfg.OrderingKeys, err = strconv.ParseBool(v); err != nil {
				return "", cfg, fmt.Errorf("ordering_keys=%q: use true or false", v)
			}
		case "timeout":
			if cfg.Timeout, err = time.ParseDuration(v); err != nil || cfg.Timeout <= 0 {
				return "", cfg, fmt.Errorf("timeout=%q: use a positive duration such as 10s", v)
			}
		case "topic_prefix":
			cfg.TopicPrefix = v
		default:
			return "", cfg, fmt.Errorf("unknown parameter %q; use topic_prefix, ordering_keys or timeout", name)
		}
	}
	u.RawQuery = ""
	_, topic, err := outboxpubsub.ParseURL(u.String())
	if err != nil {
		return "", cfg, err
	}
	if topic != "" && cfg.TopicPrefix != "" {
		return "", cfg, fmt.Errorf("a topic in the path and topic_prefix exclude each other: give one topic for every message, or a prefix for per-topic topics")
	}
	return u.String(), cfg, cfg.Validate()
}

// openPubSub builds the publisher for a pubsub:// --publisher URL. The relay
// starts while Pub/Sub is unreachable (the first batch connects); when it
// answers, a missing topic or refused credentials fail the start instead of
// making every batch fail.
func openPubSub(raw string) (outbox.Publisher, error) {
	target, cfg, err := parsePubSubURL(raw)
	if err != nil {
		return nil, usagef("--publisher %q: %v", redact(raw), err)
	}
	// Not the check's context: the client keeps the one it was made with
	// (its token source refreshes gcloud user credentials with it), and a
	// cancelled one fails every refresh an hour later.
	p, err := outboxpubsub.Open(context.Background(), target, cfg)
	if err != nil {
		// No credentials found, most likely: the error says where it looked.
		return nil, fmt.Errorf("--publisher %q: %v", redact(raw), err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), pubsubCheckTimeout)
	defer cancel()
	err = p.Check(ctx)
	switch {
	case errors.Is(err, outboxpubsub.ErrTopicNotFound), errors.Is(err, outboxpubsub.ErrPermissionDenied):
		_ = p.Close()
		return nil, fmt.Errorf("--publisher: %v", err)
	case errors.Is(err, outboxpubsub.ErrCheckNotPermitted):
		// The credentials may publish (roles/pubsub.publisher) but not look.
		slog.Warn("outbox relay: cannot check the Pub/Sub topic at start with these credentials; starting anyway", slog.Any("error", err))
	case err != nil:
		slog.Warn("outbox relay: the Pub/Sub topic could not be checked at start; starting, batches retry until Pub/Sub answers", slog.Any("error", err))
	}
	return p.ForRelay(), nil
}
