// Package outboxaws publishes outbox messages to Amazon SQS queues and SNS
// topics, and consumes them from SQS queues (ConsumeSQS).
//
// An SQSPublisher sends a batch in SendMessageBatch requests, an
// SNSPublisher in PublishBatch requests, of up to 10 entries (BatchMax) and
// 256 KiB (BatchBytesMax; a larger message goes alone), all at once, and
// counts a message as published once the reply lists its entry Successful:
// each message gets the outcome of its own entry, so one refused entry fails
// its message alone.
//
// # Messages
//
//   - body: the payload as it is when it is text SQS takes (UTF-8 of the
//     characters XML 1.0 allows); any other payload travels in base64, with
//     the attribute AttrEncoding ("outbox-encoding") set to EncodingBase64,
//     and an empty payload (a claim-checked one, say: SQS and SNS refuse an
//     empty body) as the body "-" with AttrEncoding EncodingEmpty;
//   - attributes (type String): AttrID ("outbox-id", the outbox id),
//     AttrTopic ("outbox-topic"), AttrKey ("outbox-key", absent when the key
//     is empty), and one per header under the header's own name. SQS takes
//     10 attributes (MaxAttributes): the fixed ones leave room for 7 headers
//     (8 without a key). A message with more headers, a header name SQS
//     refuses (characters other than letters, digits, '-', '_', '.'; a
//     leading "AWS." or "Amazon."), a header named like a fixed attribute,
//     or an empty value fails permanently with ErrBadHeader naming the
//     header, unsent;
//   - size: body and attributes (names, "String", values) over
//     Config.MaxMessageSize (256 KiB by default) fail permanently with
//     ErrTooLarge, unsent.
//
// # SNS topics
//
// An SNSPublisher publishes every message to one topic, named by its ARN
// (arn:aws:sns:REGION:ACCOUNT:NAME), with the body and attributes above:
// SNS hands each to every subscription. Subscribe SQS queues with raw
// message delivery (RawMessageDelivery=true): the queue then gets the body
// and attributes exactly as the SQSPublisher sends them, and consumers read
// both alike. Without it the body is SNS's JSON envelope, the payload in its
// Message field and the attributes in MessageAttributes. SNS drops, as the
// subscriber's fault, a message of more than 10 attributes to a raw SQS
// subscription: the same limit of 10 keeps that from happening.
//
// # FIFO queues and topics
//
// On a queue or topic whose name ends in ".fifo" every message gets MessageGroupId =
// its key (Config.DefaultGroupID for messages without one; a SHA-256 of a
// key SQS would refuse as a group id) and MessageDeduplicationId = the
// outbox id: SQS and SNS drop a message sent again within their five-minute
// window, and deliver a group's messages in the order sent (an SNS FIFO
// topic to FIFO queues).
//
// # Deduplication
//
// A standard queue keeps what it is sent twice: when a reply is lost (a
// connection reset after SQS stored the batch, a relay crash before the
// database records it) the relay sends the message again. Consumers drop
// the second by its outbox-id attribute, which the inbox does.
//
// # Key order
//
// The publisher is not an outbox.KeyOrderKeeper: a batch's requests go at
// once, and SQS may refuse an entry and store a later entry of the same
// group. The relay hands it a batch with several messages of one key in
// waves (see outbox.KeyOrderKeeper), a round trip apart, never out of order;
// on a FIFO queue SQS keeps that order for consumers.
//
// # Outcomes
//
// Publish returns nil for a message SQS took, an error made with
// outbox.Permanent when no retry can succeed, and a retryable error
// otherwise:
//
//   - permanent: ErrTooLarge and ErrBadHeader (never sent), a message
//     without id, an entry SQS refused as the sender's fault
//     (SenderFault, e.g. InvalidParameterValue; an *EntryError);
//   - unavailable (outbox.Unavailable: no attempt counted, the relay pauses
//     until SQS answers): no connection could be made (refused, no route,
//     DNS);
//   - retryable after Config.ThrottleDelay (outbox.RetryAfter): the request
//     or an entry throttled (RequestThrottled, ThrottlingException, KMS
//     throttling);
//   - retryable: no reply within Config.Timeout or before the context ends,
//     a connection reset, an entry the service failed on its side, a
//     closed publisher; and the configuration errors an operator fixes,
//     logged at ERROR level with the fix at most once per
//     ConfigErrorLogInterval: a missing queue or topic (ErrNotFound) and
//     refused credentials or permissions (ErrAccessDenied).
//
// Every error is a *PublishError naming the message id and queue or topic.
// SNS's codes (NotFound, AuthorizationError, Throttled, InvalidParameter as
// a sender's fault) get the same outcomes as SQS's.
//
// # Clients
//
// NewSQS uses an SQS client the caller made. OpenSQS makes one from the
// SDK's standard configuration chain (environment, shared files, the
// instance's role), with the SDK's own retries off (the relay retries,
// knowing what it sent). NewSNS and OpenSNS do the same for a topic;
// OpenSNS makes its client in the region of the topic's ARN, where SNS
// takes its publishes. None connects: Check, called at start, looks the
// queue up and reads an attribute (GetTopicAttributes for a topic), so a
// missing queue or topic or refused credentials show at once.
//
// # Testing
//
// The tests run against goaws (github.com/Admiral-Piett/goaws v0.4.5), in
// process (internal/awstest). goaws has no IAM, never throttles and fails
// no batch entry of itself: those outcomes are tested with faults the
// helper injects. It speaks the query protocol only, so the test clients
// speak it to SQS too (the SDK's default is AWS JSON; the publisher uses the
// typed API and works with either). The SNS tests read what goaws delivers
// to SQS queues subscribed with raw delivery, attributes included; goaws
// keeps no FIFO order or deduplication on topics, so the FIFO test checks
// the group and deduplication ids sent.
package outboxaws
