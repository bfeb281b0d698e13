package main

import "github.com/go-outbox/outbox"

// openAMQP builds the publisher for a amqp:// --publisher URL.
func openAMQP(raw string) (outbox.Publisher, error) {
	return nil, usagef("--publisher %q: the amqp publisher is not built yet", redact(raw))
}
