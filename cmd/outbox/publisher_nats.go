package main

import "github.com/go-outbox/outbox"

// openNATS builds the publisher for a nats:// --publisher URL.
func openNATS(raw string) (outbox.Publisher, error) {
	return nil, usagef("--publisher %q: the nats publisher is not built yet", redact(raw))
}
