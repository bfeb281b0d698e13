// Package outboxkafka publishes outbox messages to Kafka with franz-go.
//
// A Publisher turns each message into one record:
//
//   - topic: the message topic, or Config.Topic, or what Config.TopicFunc
//     returns;
//   - key: the message key, so the client's key partitioner sends every
//     message of a key to one partition, where Kafka keeps them in order (an
//     empty key is a null key: such records are spread over partitions);
//   - value: the payload (never null, so a message is never a compaction
//     tombstone);
//   - headers: HeaderID with the message id (consumers deduplicate on it),
//     HeaderTopic with the message topic, then the message headers sorted by
//     name.
//
// Publish produces the whole batch at once and waits for the broker's
// acknowledgement of every record (acks=all, idempotent producer: the
// franz-go defaults, which New insists on), or for the context to end. Each
// message gets its own outcome:
//
//   - nil: the broker acknowledged the record.
//   - permanent (outbox.IsPermanent): retrying cannot help, and the relay
//     dead-letters the message. These are a record too large for the client's
//     batch limit (kgo.ProducerBatchMaxBytes) or for the topic's
//     max.message.bytes (kerr.MessageTooLarge, kerr.RecordListTooLarge), a
//     name Kafka cannot accept as a topic (kerr.InvalidTopicException) and a
//     record the broker refuses (kerr.InvalidRecord).
//   - unavailable (outbox.IsUnavailable): no broker answers, and the batch
//     was not produced at all; the relay counts no attempt and pauses. See
//     below.
//   - any other error is retryable: a leader election, a timeout, a closed
//     publisher, the context ending first; and the configuration mistakes an
//     operator fixes, which count attempts so that a fix within the relay's
//     backoff loses nothing: a topic that does not exist
//     (kerr.UnknownTopicOrPartition, once the client has refreshed its
//     metadata a few times), refused topic or cluster permissions, failed
//     SASL authentication. Those are also logged at ERROR level with the fix
//     (at most once per ConfigErrorLogInterval and topic).
//
// The client does not fail the records it could not send while no broker
// can be dialed: it keeps them, and sends them once a broker is back. So
// when a batch runs out of time, the publisher pings the cluster
// (PingTimeout); if no broker answers, that batch's failures stay ordinary
// (its records may still be sent), but every later batch pings first and,
// while no broker answers, fails as unavailable without handing a record to
// the client. An outage of any length thus costs the messages in flight at
// its start one attempt, dead-letters nothing and piles up no copies.
//
// A record refused as too large or invalid in a batch with other records is
// sent once more on its own before it is called permanent: the broker
// refuses whole record batches, so the neighbours of a bad record are not
// condemned with it.
//
// When Publish returns because its context ended, records already sent may
// still be written: the relay then publishes those messages again, and
// consumers drop the duplicate by HeaderID (the idempotent producer only
// removes duplicates of its own internal retries).
//
// DeclareTopics (or `outbox topology apply`) creates the topics, with the
// partitions asked for, and leaves those that exist as they are; see
// docs/topology.md. A message to a topic that does not exist fails after the
// client's unknown-topic retries (kgo.UnknownTopicRetries, 4 by default, spaced by
// kgo.MetadataMinAge): about 1 to 4 seconds with Open's settings. Brokers
// that create topics on first use (auto.create.topics.enable) do so only
// for clients built with kgo.AllowAutoTopicCreation.
//
// Use Open (no connection at start) or Dial (fails if no broker answers) to
// let the publisher own its client, or New to publish with a client the
// application already has. Open and Dial set no linger
// (kgo.ProducerLinger(0)), since the relay waits for each batch's
// acknowledgements and a linger would only add latency, and refreshes
// metadata sooner (MetadataMinAgeDefault); give the same options to clients
// passed to New.
//
// Consume is the other side: it reads the topics as a member of a consumer
// group and hands each record to a handler (typically an outbox.Inbox's
// Apply), committing a record's offset only after the handler returned nil.
// It runs for the life of the process and follows the rule every consumer
// adapter follows (docs/consumers.md): it recovers what it can by itself
// (franz-go reconnects and rejoins the group), logs at ERROR level what needs
// an operator (a topic or dead-letter topic that is missing or refuses the
// client, refused SASL credentials, a cluster that stays unreachable) at most
// once per ConfigErrorLogInterval while it lasts, logs at INFO level when it
// is back, and returns only when its context ends. franz-go waits for a
// missing topic without a word, so Consume asks the cluster for its topics'
// metadata every ConsumerConfig.CheckInterval (CheckIntervalDefault) to see
// it.
package outboxkafka
