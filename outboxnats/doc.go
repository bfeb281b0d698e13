// Package outboxnats publishes outbox messages to NATS JetStream.
//
// A Publisher sends each message to a subject derived from its topic (the
// topic itself, Config.SubjectPrefix + topic, or Config.Subject(m)) and counts
// it as published only once JetStream acknowledged storing it. A batch is
// published asynchronously (every message sent before any acknowledgement is
// awaited), so a batch costs about one round trip, and each message gets its
// own outcome.
//
// # Deduplication
//
// Every message carries its outbox id in the Nats-Msg-Id header. JetStream
// drops a second message with the same id arriving within the stream's
// duplicate window (StreamConfig.Duplicates, two minutes by default) and
// acknowledges it with PubAck.Duplicate set; the publisher counts that as
// published, since the stream holds the message. So the duplicate the relay
// sends after a lost acknowledgement (a broker restart, a relay crash between
// the acknowledgement and the database update) never reaches consumers when
// the retry comes within the window. Make the window longer than the outages
// you want covered; consumers that must see each message once still
// deduplicate by id (the inbox), since a retry can come later than any
// window.
//
// # Message mapping
//
//   - subject: Config.Subject(m) if set, else Config.SubjectPrefix + m.Topic;
//   - data: m.Payload, unchanged;
//   - headers: m.Headers, plus Nats-Msg-Id (the id, as text), Outbox-Topic
//     (the topic) and Outbox-Key (the key, when not empty). These three
//     replace application headers of the same names. Other Nats-* headers
//     reach JetStream and take effect there (Nats-TTL, say). NATS trims
//     leading and trailing spaces of header values and turns line breaks into
//     spaces.
//
// # Outcomes
//
// Publish returns nil for a message JetStream stored (or already held), an
// error made with outbox.Permanent when no retry can succeed, and a plain
// (retryable) error otherwise:
//
//   - permanent: a message over the server's max_payload or the stream's
//     MaxMsgSize; a subject NATS cannot route (empty, with spaces, empty
//     tokens or wildcards); a message without id; a message with a Nats-*
//     header it was not meant to carry; any other JetStream rejection with
//     status 400 (a bad Nats-TTL...), except account resource limits and
//     the configuration mistakes below;
//   - retryable: no acknowledgement within Config.AckTimeout or before the
//     context ends, a connection lost or reconnecting, a closed publisher,
//     JetStream unavailable or out of storage, no responder while the stream
//     cannot be looked up; and the configuration mistakes an operator fixes,
//     which count attempts so that a fix within the relay's backoff loses
//     nothing: no stream captures the subject (ErrNoStream, checked with the
//     JetStream API after the server found no responder), another stream
//     than Config.Stream captures it, the server refused the credentials or
//     closed the connection for good. Those are also logged at ERROR level
//     with the fix (at most once per ConfigErrorLogInterval and subject).
//
// Every error is a *PublishError naming the message id and subject.
//
// # Topology
//
// The publisher creates nothing: DeclareStream creates the stream it
// publishes to (or adds subjects and settings to the one that exists), and
// DeclareConsumer the durable consumer Consume reads, with the settings
// Consume gives it; `outbox topology apply` does both from the command line.
// See docs/topology.md.
//
// # Connections
//
// New uses a JetStream context the caller made and keeps open. Dial connects
// by itself with reconnection forever (a relay must outlive broker outages),
// and Close drains and closes that connection. While the connection is
// reconnecting, nats.go buffers messages (8 MB by default); they are
// acknowledged after the reconnection if that comes within AckTimeout, or
// reported as retryable, and possibly stored later, which the duplicate
// window absorbs.
//
// A network path that stops taking data without breaking (a stalled link)
// blocks nats.go's writes, under its connection lock, until its
// FlusherTimeout (a minute by default); the server's pings would notice the
// dead connection only after minutes. On a Dial'ed connection, a batch still
// sending 2s after its context ended closes the network connection under
// nats.go, which ends the write and makes nats.go reconnect, so a batch
// never holds the relay much past its lease; Close does the same at its
// DrainTimeout. With New, the caller's FlusherTimeout bounds such a write.
//
// # Consuming
//
// Consume reads a stream through a durable pull consumer it creates and
// hands each message to a handler (an outbox.Inbox's Apply, typically). It
// follows the rule of every consumer adapter of this module
// (docs/consumers.md): it recovers what it can by itself, logs at ERROR
// level what needs an operator, logs at INFO level when it is back, and
// returns only when its context ends (nil) or with an error saying why it
// cannot go on.
//
//   - connection dropped, server restarted: nats.go reconnects (on a
//     connection made with reconnection, as Dial's and natstest's are) and
//     Consume pulls again; logged at WARN level, then INFO when back;
//   - durable consumer deleted on the server: Consume created it, so it
//     creates it again (WARN), and the stream's stored messages come again
//     from the first, which the inbox skips; a consumer that vanished
//     without notice (deleted while disconnected, or kept in memory by a
//     server that restarted) is found when the server's heartbeats stop;
//   - stream missing, JetStream disabled: logged at ERROR level with the
//     fix, at most once per ConfigErrorLogInterval, and tried again with
//     the backoff until an operator fixes it;
//   - connection closed for good (nats.go gave up after MaxReconnects, or
//     the application closed it; nats.go also closes it when a server
//     refuses the credentials twice in a row): Consume returns an error
//     matching nats.ErrConnectionClosed;
//   - configuration the server refuses (a *jetstream.APIError with code
//     400, such as a durable of that name with another deliver policy):
//     Consume returns that error.
package outboxnats
