package main

import "github.com/go-outbox/outbox"

// openWebhook builds the publisher for a https:// --publisher URL.
func openWebhook(raw string) (outbox.Publisher, error) {
	return nil, usagef("--publisher %q: the webhook publisher is not built yet", redact(raw))
}
