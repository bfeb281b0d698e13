// Package outboxhttp publishes outbox messages to webhooks: each message is
// POSTed to an HTTP endpoint, signed with a secret shared with the receiver
// the way the Standard Webhooks specification (https://www.standardwebhooks.com)
// says, so any of its libraries can verify the requests.
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
//     belong to the connection (Content-Length, Connection,
//     Transfer-Encoding...), which are dropped; HTTP shows their names in
//     canonical case (x-seq arrives as X-Seq) and receivers trim spaces
//     around values;
//   - Outbox-Message-Id, Idempotency-Key and Webhook-Id: the message id;
//   - Outbox-Topic: the topic; Outbox-Key: the key, when not empty;
//   - Webhook-Timestamp and Webhook-Signature: the signature (below);
//   - User-Agent: go-outbox, unless the message sets one.
//
// A message with a header named Webhook-Id, Webhook-Timestamp,
// Webhook-Signature, Authorization, Cookie, Proxy-Authorization or Host (in
// any case) fails permanently, alone, with an error naming the header: it
// would forge the signature, speak with credentials that belong to the
// publisher's configuration, or send the request elsewhere.
//
// # Signature
//
// Every request carries the three headers of the Standard Webhooks
// specification:
//
//	Webhook-Id: <message id>
//	Webhook-Timestamp: <unix seconds>
//	Webhook-Signature: v1,<base64 of the HMAC-SHA256>
//
// where the HMAC, keyed with Config.Secret, covers the id, the timestamp and
// the body exactly as sent, joined by dots: "<id>.<timestamp>.<body>". The
// timestamp is the sending time, so each retry carries a fresh one. A
// receiver checks the three with Verify (or any Standard Webhooks library),
// which also rejects timestamps too far from its clock, so a captured request
// can be replayed only within that tolerance, and only under its own id:
// deduplicating on the id covers such replays and ordinary retries. The
// topic, key and other headers are not signed: a receiver that must trust
// them should take them from the body.
//
// The secret is the key bytes (Config.Secret, at least SecretMinLength).
// Standard Webhooks tools write it as text, "whsec_" followed by the base64
// of the bytes; ParseSecret reads that form, so both ends can share one
// string. The header may hold several space-separated signatures and Verify
// accepts any matching v1 one, so a sender can sign with a new and an old
// secret during a rotation; this publisher signs with one. To rotate, a
// receiver verifies with the new secret, then with the old one.
//
// # Outcomes
//
// Publish returns nil for a message the endpoint accepted with 2xx, and
// otherwise a *PublishError naming the message, the endpoint (without user
// information or query, which may hold secrets) and the status with the
// start of the response body. What the relay does with it depends on what
// the outcome blames:
//
//	Outcome                           Blames                Error                  Relay
//	2xx                               -                     nil                    published
//	connection refused, no route      the endpoint is down  outbox.Unavailable     postponed, no attempt counted
//	401 403 404 405 407 410           the configuration     plain, logged (error)  retried, attempt counted
//	408 5xx, timeout, network errors  the endpoint's state  plain                  retried, attempt counted
//	429 503 with Retry-After          the endpoint's load   outbox.RetryAfter      retried no sooner than asked
//	400 413 422, other 4xx, 3xx       the message           outbox.Permanent       dead-lettered at once
//
// In detail:
//
//   - unavailable: the connection was refused (or had no route) before the
//     request was written, so the endpoint cannot have acted on it; the
//     relay counts no attempt and pauses the worker until the endpoint
//     answers;
//   - configuration errors: 401 and 403 (a wrong secret or credentials), 404,
//     405 and 410 (a wrong URL, or an endpoint retired without telling the
//     sender) and 407 (the HTTP proxy wants credentials) say nothing about
//     the message, so dead-lettering every message until someone notices
//     would be the wrong answer. They are retried with the relay's backoff
//     and count attempts (a configuration never fixed dead-letters the
//     messages once outbox.Config.MaxAttempts run out, and `outbox dead retry` sends
//     them again), and Config.Logger gets one error-level line per batch,
//     endpoint and status, with the status, the URL without credentials and
//     what to check;
//   - retryable: 408 and 5xx; network errors; no response within
//     Config.Timeout; the relay's context ending; a closed publisher;
//   - retryable no sooner than asked: 429 and 503 with a Retry-After header
//     (seconds or an HTTP date, capped by Config.MaxRetryAfter); without one
//     they are plain retryable errors. The error is wrapped with
//     outbox.RetryAfter, so the relay schedules the next attempt at the later
//     of its own backoff and that delay. The rest of the batch for the same
//     endpoint is then not sent, and fails the same way: an endpoint that
//     asked for time is not hammered by the batch's other messages;
//   - permanent (outbox.Permanent; the relay dead-letters the message at
//     once): a message the endpoint rejects as such, 400, 413 or 422, and
//     any other 4xx; a redirect; a topic with no URL; a header value with a
//     control character (HTTP cannot carry it); a header a message may not
//     set (above).
//
// Redirects are not followed: a 301, 302 or 303 would turn the POST into a
// GET without body, and a 2xx to that would count a message as delivered that
// no endpoint received. Configure the final URL. A Config.Client with its own
// CheckRedirect keeps it.
//
// # Concurrency and order
//
// One Publish call (one relay batch) has up to Config.Concurrency requests in
// flight, so messages of different keys reach the endpoint in no particular
// order, and the relay itself may run several batches at once
// (outbox.Config.Workers). The messages of one key are sent one at a time in
// batch order, and a failure, permanent or not, holds back the batch's later messages
// of the same key: they are not sent, and the relay counts no attempt for
// them (outbox.HeldBack), nor for messages not sent because the endpoint
// asked to wait (Retry-After). With Config.Sequential the whole batch is sent
// one message at a time in order. That keeps order within a batch only:
// across batches and retries, order per key is the relay's business (its
// ordering mode, where a batch carries a key's run in order); without it, a
// retried message can arrive after later messages of its key.
package outboxhttp
