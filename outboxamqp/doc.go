// Package outboxamqp publishes outbox messages to RabbitMQ (AMQP 0-9-1, with
// github.com/rabbitmq/amqp091-go), with publisher confirms and mandatory
// routing: a message counts as published only when the broker has confirmed
// it and did not return it as unroutable.
//
//	pub, err := outboxamqp.Dial("amqp://relay:secret@rabbitmq:5672/prod",
//		outboxamqp.Config{Exchange: "events"})
//	...
//	defer pub.Close()
//	relay, err := outbox.NewRelay(store, pub, outbox.Config{})
//
// Dial connects at once and fails if the broker is unreachable, refuses the
// credentials or virtual host, or has no exchange named Config.Exchange.
// Open connects on the first Publish instead (like sql.Open), for processes
// that must start while the broker is down; the outbox CLI uses it. Either
// way the Publisher owns its connection: it reconnects after drops and Close
// closes it. The publisher declares nothing: DeclareQueue (or the CLI's
// `outbox topology apply`) declares the exchange, the consumers' queue, its
// bindings and its dead-letter queue, idempotently; see docs/topology.md.
//
// # Messages
//
// Each outbox message becomes one AMQP message published to Config.Exchange
// (the default exchange when empty) with the routing key Config.RoutingKey
// returns, by default its topic:
//
//   - message-id property: the message id, which consumers deduplicate on
//     (the relay delivers at least once);
//   - type property: the topic;
//   - headers: the application headers (string values), and HeaderKey
//     (Outbox-Key) with the key when it is not empty;
//   - content-type property: the application header content-type (any
//     case), which is not repeated as a header;
//   - delivery mode persistent, so durable queues keep it across a broker
//     restart; timestamp: the message's CreatedAt (AMQP keeps seconds);
//   - body: the payload, unchanged.
//
// FromDelivery turns a received amqp.Delivery back into the outbox message.
//
// # Outcomes
//
// Publish sends the whole batch on a channel in confirm mode, then waits for
// every confirm (deferred confirmations), up to Config.ConfirmTimeout or the
// end of the relay's context. Returns are matched to messages by message id.
// Each message gets nil, or a *PublishError naming the message, the exchange,
// the routing key and the broker (never its password):
//
//   - nil: the broker acked the message and did not return it;
//   - retryable: the broker nacked it (ErrNacked); the channel or connection
//     closed before its confirm came (ErrNotConfirmed); no confirm before
//     the deadline; the broker unreachable; a closed publisher (ErrClosed);
//     and the configuration mistakes an operator fixes, which count attempts
//     so that a fix within the relay's backoff loses nothing: a missing
//     exchange (404 NOT_FOUND closes the channel: the batch fails, and later
//     batches work once the exchange exists), a refused login or virtual
//     host, no write permission. Those are also logged at ERROR level with
//     the fix (at most once per ConfigErrorLogInterval and exchange);
//   - unroutable (ErrUnroutable): the broker returned the message because
//     no queue is bound for its routing key. Retryable by default, since a
//     missing binding is usually a deployment-order or configuration
//     problem that someone fixes, after which the retries deliver without a
//     manual dead-letter retry. Config.UnroutablePermanent makes it
//     permanent (dead-lettered at once) where unbound keys are expected;
//   - permanent: a message without id, a routing key over 255 bytes, a CC
//     or BCC header (RabbitMQ would route on it), or a body over the
//     broker's max_message_size (ErrTooLarge: the broker closes the channel,
//     and the rest of the batch is published again on a fresh channel).
//
// Messages in flight when the connection drops are never reported as
// published: the broker may have them without the confirm having arrived,
// so they are retried, and the consumer sees a duplicate rather than the
// outbox a loss.
//
// # Connections and concurrency
//
// One connection serves the publisher; each concurrent Publish call (relay
// worker) uses a channel of its own, reused by later batches, so a
// channel-level error fails one batch only. A channel is not reused while
// confirms of an abandoned batch (deadline passed) may still arrive on it.
// When the connection drops, the next Publish dials again. A dial that
// fails fails the batch retryably; batches in the following pause (100ms
// after the first failure, doubling up to 2s) fail at once with the same
// error instead of dialing, so a broker that is down or restarting is not
// hammered by every worker, and one that is back is found within 2s. If
// sending blocks past the end of the context (a broker that
// stopped reading, as under a memory or disk alarm), the connection is torn
// down so that Publish returns. Likewise a channel open that the broker
// does not answer (a stalled network path) ends with the context, and the
// connection is torn down if the answer is still missing 2s later: amqp091
// alone would wait for it until the heartbeat timeout, past the relay's
// lease. Messages of one batch reach a queue in batch
// order; concurrent batches interleave.//
// # Consuming
//
// Consume reads a queue and hands each message to a handler (an
// outbox.Inbox's Apply, typically). It follows the rule of every consumer
// adapter of this module (docs/consumers.md): it recovers what it can by
// itself, logs at ERROR level what needs an operator, logs at INFO level when
// it is back, and returns only when its context ends (nil).
//
//   - connection dropped, broker restarted: Consume connects again with a
//     backoff (BackoffBase to BackoffMax), logged at WARN level; the broker
//     requeues what was not acknowledged;
//   - queue missing at start or deleted while consuming (the broker cancels
//     the consumer), credentials, virtual host or authentication mechanism
//     refused, no permission to read the queue or an exclusive consumer
//     holding it: logged at ERROR level with the fix, at most once per
//     ConfigErrorLogInterval, and tried again with the same backoff until
//     an operator fixes it;
//   - consuming again after any of these: logged at INFO level.
//
// Consume declares nothing, as the publisher: DeclareQueue declares its
// queue, with the exchange, bindings and dead-letter queue (or
// Queue.Arguments gives the arguments to a deployment that declares its
// own). Consume owns
// its connection, so no failure of the broker ends it: it returns only when
// its context ends.
//
// # Key order with several processes
//
// Consume keeps each key's order within its process. Several processes on
// one plain queue share every key round-robin and apply it out of order.
// A queue declared with Queue.SingleActiveConsumer delivers to one process
// at a time and keeps key order across them: the others are standbys, and
// one takes over when the active one goes (a stopping Consume closes its
// connection without cancelling its consumer first, so the messages it held
// go back to the queue before the standby is activated). See
// docs/consumers.md for the set-ups of each broker.
package outboxamqp
