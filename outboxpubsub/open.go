package outboxpubsub

import (
	"context"
	"fmt"
	"net/url"
	"strings"

	"cloud.google.com/go/pubsub/v2"
	vkit "cloud.google.com/go/pubsub/v2/apiv1"
	"github.com/googleapis/gax-go/v2"
	"google.golang.org/api/option"

	"github.com/go-outbox/outbox"
)

// Open returns a publisher owning a client for the project named by rawURL,
// pubsub://PROJECT[/TOPIC], which Close closes. A TOPIC in the URL is
// Config.Topic (set no other topic mapping then). The client finds its
// credentials the standard way (GOOGLE_APPLICATION_CREDENTIALS, the gcloud
// user's application default credentials, the metadata server) and talks to
// the emulator at PUBSUB_EMULATOR_HOST if that is set; opts add to or
// override that (option.WithCredentialsFile, option.WithEndpoint for a
// regional endpoint). Open does not connect: the first Publish does, so a
// relay can start while Pub/Sub is unreachable; call Check to find out at
// start whether the topic exists.
//
// Open uses ctx for the client's values only: its end does not reach the
// client, which keeps the context for its life (to refresh credentials), so
// a short context for the start is fine.
//
// The client retries no publish itself: the relay retries, knowing what it
// did, and a refusal is reported as what it is (a quota, a missing topic)
// rather than as the timeout the client's own retries would run into.
func Open(ctx context.Context, rawURL string, cfg Config, opts ...option.ClientOption) (*Publisher, error) {
	project, topic, err := ParseURL(rawURL)
	if err != nil {
		return nil, err
	}
	if topic != "" {
		if cfg.TopicFor != nil || cfg.TopicPrefix != "" || (cfg.Topic != "" && cfg.Topic != topic) {
			return nil, &outbox.ConfigError{Field: "outboxpubsub.Config.Topic", Value: topic,
				Fix: "name the topic either in the URL or in Config (Topic, TopicPrefix, TopicFor), not both"}
		}
		cfg.Topic = topic
	}
	cfg, err = cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	noRetry := []gax.CallOption{gax.WithRetry(func() gax.Retryer { return gax.OnCodes(nil, gax.Backoff{}) })}
	// The client keeps ctx for its life (the token source refreshes
	// credentials with it): a cancelled one would fail every refresh.
	client, err := pubsub.NewClientWithConfig(context.WithoutCancel(ctx), project, &pubsub.ClientConfig{
		TopicAdminCallOptions: &vkit.TopicAdminCallOptions{Publish: noRetry, GetTopic: noRetry},
	}, opts...)
	if err != nil {
		return nil, fmt.Errorf("outboxpubsub: client for project %s: %w", project, err)
	}
	p, err := New(client, cfg)
	if err != nil {
		_ = client.Close()
		return nil, err
	}
	p.owned = true
	return p, nil
}

// ParseURL returns the project and topic (empty if none) of a
// pubsub://PROJECT[/TOPIC] URL. The topic is checked against Pub/Sub's
// rules for topic ids.
func ParseURL(rawURL string) (project, topic string, err error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		// The error would quote the URL, with anything pasted into it.
		return "", "", fmt.Errorf("outboxpubsub: the URL is not a valid URL; use pubsub://PROJECT[/TOPIC]")
	}
	bad := func(why string) (string, string, error) {
		shown := *u
		shown.User = nil
		return "", "", fmt.Errorf("outboxpubsub: %q is not a Pub/Sub URL: %s; use pubsub://PROJECT[/TOPIC]", shown.String(), why)
	}
	switch {
	case u.Scheme != "pubsub":
		return bad("the scheme is not pubsub")
	case u.User != nil:
		return bad("credentials do not go in the URL (use GOOGLE_APPLICATION_CREDENTIALS)")
	case u.Host == "":
		return bad("no project")
	}
	topic = strings.TrimPrefix(u.Path, "/")
	if topic != "" {
		if err := topicIDError(topic); err != nil {
			return bad(err.Error())
		}
	}
	return u.Host, topic, nil
}
