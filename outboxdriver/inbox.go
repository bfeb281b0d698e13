package outboxdriver

import "time"

// InboxConsumerStats describes one consumer's records in an inbox table
// (`outbox inbox status`).
type InboxConsumerStats struct {
	// Consumer is the consumer's name.
	Consumer string
	// Records counts the messages it has applied and still remembers.
	Records int64
	// AwaitingOutgoing counts the records kept until the messages their
	// handler wrote to the outbox are published; the purge skips them.
	AwaitingOutgoing int64
	// Duplicates counts the deliveries of those messages that came again
	// and were skipped (the records purged take their counts along).
	Duplicates int64
	// OldestAge is how long ago the oldest record's effects were complete:
	// with the purge running, it stays below the retention.
	OldestAge time.Duration
}
