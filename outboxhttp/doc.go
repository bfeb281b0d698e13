// Package outboxhttp publishes outbox messages to webhooks: each message is
// POSTed to an HTTP endpoint, signed with a secret shared with the receiver.
//
// A Publisher sends every message to Config.URL, or to the URL that
// Config.URLs names for its topic. It counts a message as delivered when the
// endpoint answers 2xx; delivery is at-least-once, so receivers deduplicate
// on the message id (HeaderIdempotencyKey).
//
// # Requests
//
//   - method and URL: POST to the message's endpoint;
//   - body: m.Payload, unchanged;
//   - Content-Type: the message's content-type header, or
//     ContentTypeDefault (application/octet-stream);
//   - the message's other headers, except those below and the ones that
//     belong to the connection (Host, Content-Length, Connection,
//     Transfer-Encoding...); HTTP shows their names in canonical case
//     (x-seq arrives as X-Seq) and receivers trim spaces around values;
//   - Outbox-Message-Id and Idempotency-Key: the message id;
//   - Outbox-Topic: the topic; Outbox-Key: the key, when not empty;
//   - Outbox-Signature: the signature (below);
//   - User-Agent: go-outbox, unless the message sets one.
//
// # Signature
//
// Every request carries
//
//	Outbox-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256>
//
// where the HMAC, keyed with Config.Secret, covers the timestamp, a dot and
// the body exactly as sent: "<t>.<body>". The timestamp is the sending
// time, so each retry carries a fresh one. A receiver checks it with Verify,
// which also rejects timestamps too far from its clock, so a captured request
// can be replayed only within that tolerance; the idempotency key covers
// replays within it and ordinary retries. The signature covers the body
// only: a receiver that must trust the id, topic or key as well should take
// them from the body (or accept that within the tolerance window an attacker
// holding a captured request could resend its body under another id). To
// rotate secrets, a receiver verifies with the new secret and then the old
// one; Verify accepts any matching v1 signature in the header, so a later
// version may send several.
//
// # Outcomes
//
// Publish returns nil for a message the endpoint accepted with 2xx, and
// otherwise a *PublishError naming the message, the endpoint (without user
// information or query, which may hold secrets) and the status with the
// start of the response body:
//
//   - retryable: 408, 429 and 5xx; network errors; no response within
//     Config.Timeout; the relay's context ending; a closed publisher;
//   - retryable no sooner than asked: 429 and 503 with a Retry-After header
//     (seconds or an HTTP date, capped by Config.MaxRetryAfter). The error
//     is wrapped with outbox.RetryAfter, so the relay schedules the next
//     attempt at the later of its own backoff and that delay. The rest of the
//     batch for the same endpoint is then not sent, and fails the same way:
//     an endpoint that asked for time is not hammered by the batch's other
//     messages;
//   - permanent (outbox.Permanent; the relay dead-letters the message at
//     once): any other 4xx, such as 400, 401 (a wrong secret), 404 or 413; a
//     redirect; a topic with no URL; a header value with a control character
//     (HTTP cannot carry it).
//
// Redirects are not followed: a 301, 302 or 303 would turn the POST into a
// GET without body, and a 2xx to that would count a message as delivered that
// no endpoint received. Configure the final URL. A Config.Client with its own
// CheckRedirect keeps it.
//
// # Concurrency and order
//
// One Publish call (one relay batch) has up to Config.Concurrency requests in
// flight, so messages of a batch, those of one key included, reach the
// endpoint in no particular order, and the relay itself may run several
// batches at once (outbox.Config.Workers). With Config.Sequential a batch is
// sent one message at a time in order, and a retryable failure holds back
// the batch's later messages of the same key. That keeps order within a
// batch only: across batches and retries, order per key is the relay's
// business (its ordering mode); without it, a retried message can arrive
// after later messages of its key.
package outboxhttp
