// Package outboxredis publishes outbox messages to Redis streams, and
// consumes them (Consume).
//
// A Publisher appends each message to a stream with XADD and counts it as
// published once Redis replied with the entry's id. A batch goes as one
// pipeline (every XADD written before any reply is read, no MULTI), so a
// batch costs about one round trip, and each message gets the outcome of its
// own reply: one refused XADD fails its message alone.
//
// # Stream entries
//
//   - stream: Config.Stream if set (one stream for everything), else
//     Config.StreamFor(m) if set, else Config.StreamPrefix + m.Topic (by
//     default the topic itself);
//   - fields: id (the outbox id, as text), topic, key (absent when the key is
//     empty), payload (the bytes, unchanged), and one field per header,
//     named HeaderFieldPrefix + the header's name ("h:trace-id"). Fields
//     rather than one JSON field keep the entry readable with redis-cli and
//     the values byte for byte, and the prefix keeps a header from posing as
//     the id, topic, key or payload;
//   - trimming: Config.MaxLen, if set, adds MAXLEN ~ N to every XADD.
//
// # Deduplication
//
// Redis streams have no deduplication of their own: an entry appended twice
// is read twice. That happens when the reply to a pipeline is lost (a
// connection reset after Redis appended, a relay crash before the database
// records the message as published); the relay then appends the message
// again. (Open's client leaves retries to the relay; a client given to New
// with go-redis's MaxRetries may send a pipeline again itself.) Consumers drop the
// second entry by its id field, which the inbox does.
//
// # Key order
//
// A stream keeps its entries in XADD order, and a pipeline runs in order,
// so the messages of a key published in one batch to one stream are
// appended in the batch's order. The publisher is not an
// outbox.KeyOrderKeeper, though: the XADDs of a batch all go before any reply
// comes back, so when Redis refuses one (OOM, say) the later XADDs of the
// same key are already sent and may succeed. The relay therefore hands a
// batch with several messages of one key over in waves (see
// outbox.KeyOrderKeeper), a round trip apart, and never out of order. The
// order holds per stream: messages of one key mapped to two streams
// (per-topic streams, say) are ordered within each.
//
// # Outcomes
//
// Publish returns nil for a message Redis appended, an error made with
// outbox.Permanent when no retry can succeed, and a retryable error
// otherwise:
//
//   - permanent: a payload over Config.MaxPayload (ErrTooLarge, never
//     sent); a message without id; an empty stream name from
//     Config.StreamFor;
//   - unavailable (outbox.Unavailable: the relay counts no attempt and
//     pauses until Redis answers): no connection could be made (connection
//     refused, no route, DNS), or the server is still loading its data set
//     (LOADING);
//   - retryable after Config.ThrottleDelay (outbox.RetryAfter): Redis out of
//     memory under maxmemory (OOM), busy running a script (BUSY), a cluster
//     failing over (TRYAGAIN, CLUSTERDOWN, MASTERDOWN);
//   - retryable: no reply within Config.Timeout or before the context ends,
//     a connection reset or closed mid-batch, a closed publisher, any other
//     error reply; and the configuration errors an operator fixes, logged at
//     ERROR level with the fix at most once per ConfigErrorLogInterval: a
//     stream key holding another type (WRONGTYPE; ErrNotStream: delete or
//     rename the key), refused credentials or ACL permissions.
//
// Every error is a *PublishError naming the message id and stream.
//
// # Consuming
//
// Consume reads a stream through a consumer group and acknowledges (XACK)
// each entry only after the handler returned nil: with an inbox, after the
// inbox's transaction committed. Entries a dead consumer of the group left
// unacknowledged are taken over after ConsumerConfig.ClaimAfter
// (XAUTOCLAIM), their deliveries counted towards MaxDeliver; a message that
// keeps failing is parked on ConsumerConfig.ParkStream (XADD, then XACK) or
// in ConsumerConfig.Parked. Key order holds within one process. See
// docs/redis.md.
//
// # Clients
//
// New uses a go-redis client the caller made and keeps open: a
// *redis.Client, a *redis.ClusterClient (go-redis splits the pipeline by
// node), a failover client or a ring. Open makes a *redis.Client of its own
// from a redis:// URL, with ContextTimeoutEnabled so Config.Timeout bounds
// every read, and Close closes it. Neither connects: Check, called at start
// (the CLI does), PINGs the server and tells whether a stream key holds
// another type.
package outboxredis
