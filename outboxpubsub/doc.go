// Package outboxpubsub publishes outbox messages to Google Cloud Pub/Sub, and
// consumes them: Consume receives from a subscription and hands each message
// to a handler (with an inbox, applied once); see ConsumerConfig and
// docs/consumers.md. The client retries an unreachable Pub/Sub inside
// Receive without a word, so Consume reads its subscription every few
// seconds while it receives: an outage is logged at WARN level and fails
// ConsumerConfig.Readiness, naming the cause and since when, until Pub/Sub
// answers again (credentials without pubsub.subscriptions.get skip those
// reads, and the outage goes unnoticed).
//
// A Publisher hands each message to the client's batching publisher of its
// topic (pubsub.Publisher, one per topic, reused; Config.PublishSettings
// tunes the bundles) and counts it as published once Pub/Sub returned its
// server id. Publish waits for every message's own result, so one refused
// message fails alone: Pub/Sub refuses a whole publish request for one
// invalid message in it, so the publisher checks Pub/Sub's limits before
// sending, and sends each message of a refused request again alone to find
// the one at fault.
//
// # Messages
//
//   - topic: Config.Topic if set (one topic for everything), else
//     Config.TopicFor(m) if set, else Config.TopicPrefix + m.Topic (by
//     default the topic itself, which must then be a valid Pub/Sub topic id:
//     3 to 255 letters, digits and -_.~+%, starting with a letter). Pub/Sub
//     creates no topic on publish: Check reports a missing one at start;
//   - data: the payload, unchanged;
//   - attributes: outbox-message-id (the outbox id, as text),
//     outbox-topic, outbox-key (absent when the key is empty), and one per
//     header, named as the header. An outbox Writer refuses those three
//     names as headers, so no header can pose as them;
//   - ordering key: the outbox key, with Config.OrderingKeys.
//
// Pub/Sub refuses more than 100 attributes, an attribute name over 256
// bytes or starting with "goog", a value over 1024 bytes and a message over
// 10 MB. A message that breaks one of these limits fails permanently
// without being sent, with an error naming the header (ErrHeaderRefused) or
// the size (ErrTooLarge). The outbox Writer's own limits (64 headers, 8 KiB
// per value by default) let larger values through: lower
// WriterConfig.MaxHeaderValueBytes to 1024 to refuse them at write time.
//
// # Deduplication
//
// Pub/Sub has no publish-side deduplication: a message published twice is
// delivered twice. That happens when a result is lost (a timeout after
// Pub/Sub stored the message, a relay crash before the database records it
// as published); the relay then publishes it again. Consumers drop the
// second copy by its outbox-message-id attribute, which the inbox does.
// (Pub/Sub's exactly-once delivery is about acknowledgements on a
// subscription, not about publishing.)
//
// # Key order
//
// Without Config.OrderingKeys Pub/Sub keeps no order at all. With it, each
// message carries its key as the ordering key, and a subscription with
// message ordering enabled delivers a key's messages in publish order. The
// client sends a key's bundles one after another, and after a failed
// publish it pauses the key: the key's later messages fail without being
// sent. So the publisher is an outbox.KeyOrderKeeper then: it hands a
// batch's messages of a key to the client together (no round trip between
// them), and reports the ones after a failure HeldBack, whether the client
// paused the key or the publisher refused a message before sending it. A
// paused key is resumed (ResumePublish) when the relay publishes it again
// and none of its messages waits in the client any more, so no message can
// slip out ahead of one that failed. Give the relay Publisher.ForRelay(),
// which is an outbox.KeyOrderKeeper with OrderingKeys and Config.Topic only:
// otherwise the relay hands a key's messages over in waves, a round trip
// apart. The client keeps a key's order per Pub/Sub topic, the relay per
// outbox key, and with TopicPrefix or TopicFor one key may go to several
// topics: the client would send them side by side, and a failure on one
// topic would not hold the key back on the other.
//
// # Outcomes
//
// Publish returns nil for a message Pub/Sub stored, an error made with
// outbox.Permanent when no retry can succeed, and a retryable error
// otherwise:
//
//   - permanent: a header Pub/Sub refuses as an attribute
//     (ErrHeaderRefused) or a message over 10 MB (ErrTooLarge), both never
//     sent; a key over 1024 bytes (an ordering key, and the outbox-key
//     attribute); a message Pub/Sub refuses alone as INVALID_ARGUMENT; a message
//     without id; an invalid topic id (from Config.TopicFor, say);
//   - unavailable (outbox.Unavailable: the relay counts no attempt and
//     pauses until Pub/Sub answers): no connection could be made (connection
//     refused, DNS, no route: gRPC's UNAVAILABLE "while dialing"), with
//     Open's client or one without Publish retries (see Clients);
//   - held back (outbox.HeldBack, with OrderingKeys): an earlier message of
//     the key failed in this batch;
//   - retryable after Config.ThrottleDelay (outbox.RetryAfter): quota or
//     flow control exceeded (RESOURCE_EXHAUSTED), or the client's flow
//     control refusing with LimitExceededBehavior FlowControlSignalError
//     (which Config.Validate refuses with OrderingKeys);
//   - retryable: no result within Config.Timeout or before the context
//     ends, any other UNAVAILABLE (it may have reached Pub/Sub), a closed
//     publisher, any other error; and the configuration errors an operator
//     fixes, logged at ERROR level with the fix at most once per
//     ConfigErrorLogInterval: a missing topic (NOT_FOUND; ErrTopicNotFound:
//     create the topic), refused credentials or permission
//     (PERMISSION_DENIED, UNAUTHENTICATED; ErrPermissionDenied: grant
//     roles/pubsub.publisher on the topic).
//
// Every error is a *PublishError naming the message id and topic.
//
// The tests run against the client's in-process fake (pstest), injecting
// each gRPC code the policy handles. The fake does not check Pub/Sub's
// limits on attributes and sizes, quotas or permissions, so the checks
// before sending are tested for what they refuse, not against the real
// service's refusal; and it cannot show what the real service does between
// a stored message and a lost reply.
//
// # Clients
//
// New uses a *pubsub.Client the caller made and keeps open; its retry
// settings apply. A default client retries UNAVAILABLE and other codes
// itself within Config.Timeout, so with it an outage is never reported
// unavailable: each batch waits the full Timeout and fails retryably,
// counting an attempt. Make the client with its Publish retries off
// (pubsub.ClientConfig.TopicAdminCallOptions, as in ExampleNew) to get the
// outcomes above. Open makes a client of its own for a
// pubsub://PROJECT[/TOPIC] URL, with the standard credentials (see Open)
// and no publish retries of the client's own, and Close closes it. Neither
// connects: Check, called at start (the CLI does), reads the topics
// (pubsub.topics.get) and tells whether they exist.
package outboxpubsub
