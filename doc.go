// Package outbox is the transactional outbox for Go: a service writes its
// business rows and the messages it must publish in one database
// transaction, and a relay publishes those messages afterwards, so a message
// goes out if and only if its transaction committed.
//
// The pieces, each usable alone:
//
//   - Writer writes messages in the caller's transaction (Writer.Write), or
//     runs a function in a new one (Writer.Transact). A store module gives the
//     table: outboxpg (PostgreSQL, pgx) or outboxsqlite (SQLite, pure Go).
//   - Relay claims committed messages from the store and hands them to a
//     Publisher (outboxkafka, outboxamqp, outboxnats, outboxhttp, or Handlers
//     in the same process), with retries and backoff, dead letters, and, with
//     the store's OrderByKey option, each key's messages in commit order. Run
//     it in any number of processes on one table.
//   - Inbox makes a consumer apply each message once: its handler runs in a
//     transaction that also records the message's id, so a redelivery is
//     skipped. The consumer adapters (outboxamqp.Consume, outboxnats.Consume,
//     outboxkafka.Consume) retry in place and park what keeps failing.
//   - outboxevents adds typed domain events on top of messages; outboxtest
//     helps an application test all of this.
//
// Delivery is at least once: a message can be published twice (a relay that
// dies after the broker confirmed it and before the table recorded it), never
// lost. Consumers that must apply it once use the Inbox, keyed by
// Message.ID.
//
// The README lists the guarantees with the tests that prove them, and the
// cmd/outbox CLI runs the relay, shows what is stuck (status, dead letters,
// parked messages) and a local demo (outbox demo).
package outbox
