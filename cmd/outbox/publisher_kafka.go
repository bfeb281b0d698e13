package main

import "github.com/go-outbox/outbox"

// openKafka builds the publisher for a kafka:// --publisher URL.
func openKafka(raw string) (outbox.Publisher, error) {
	return nil, usagef("--publisher %q: the kafka publisher is not built yet", redact(raw))
}
