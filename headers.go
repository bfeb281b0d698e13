package outbox

import (
	"strings"
)

// Reasons a header name is reserved. Each says why and how to fix it, and
// reads after the header name in a *MessageError.
const (
	reservedClaimCheck  = "reserved: the claim check (outbox.ClaimCheck) names a payload's blob in it, and consumers fetch the blob it names; use another header name"
	reservedEncoding    = "reserved: the SQS and SNS publishers say in it how the body encodes the payload; use another header name"
	reservedAMQP        = "reserved: RabbitMQ also routes a message to the queues named in its CC and BCC headers; use another header name"
	reservedCredentials = "reserved: it would carry credentials to the webhook endpoint, which come from the webhook publisher's configuration (URL, Config.Client), not from messages; use another header name"
	reservedFraming     = "reserved: it belongs to the HTTP connection or the framing of the webhook request, which the HTTP client sets itself; use another header name"
	reservedHost        = "reserved: the webhook URL names the host; use another header name"
	reservedID          = "reserved: publishers set it to the message id, which consumers deduplicate on; use another header name"
	reservedKey         = "reserved: publishers set it to Message.Key; set the Key field instead, or use another header name"
	reservedNATS        = "reserved: NATS JetStream acts on Nats-* headers (deduplication, expected stream or sequence, rollup, TTL), and the NATS publisher sets Nats-Msg-Id itself; use another header name"
	reservedProxy       = "reserved: it would carry credentials to the HTTP proxy, which come from the proxy settings, not from messages; use another header name"
	reservedSignature   = "reserved: the webhook publisher signs every request under the Standard Webhooks headers webhook-id, webhook-timestamp and webhook-signature; use another header name"
	reservedTopic       = "reserved: publishers set it to Message.Topic; set the Topic field instead, or use another header name"
)

// reservedHeaders maps the lower-case names a message header may not have to
// why. The webhook publisher (outboxhttp) sets or forbids the HTTP ones; the
// NATS, AMQP and Kafka publishers set Outbox-Key, Outbox-Topic and
// Outbox-Message-Id. Nats-* is matched as a prefix, in reservedReason.
var reservedHeaders = map[string]string{
	"authorization":       reservedCredentials,
	"bcc":                 reservedAMQP,
	"cc":                  reservedAMQP,
	"connection":          reservedFraming,
	"content-length":      reservedFraming,
	"cookie":              reservedCredentials,
	"host":                reservedHost,
	"idempotency-key":     reservedID,
	"keep-alive":          reservedFraming,
	"outbox-claim-check":  reservedClaimCheck,
	"outbox-encoding":     reservedEncoding,
	"outbox-id":           reservedID,
	"outbox-key":          reservedKey,
	"outbox-message-id":   reservedID,
	"outbox-topic":        reservedTopic,
	"proxy-authorization": reservedProxy,
	"proxy-connection":    reservedFraming,
	"te":                  reservedFraming,
	"trailer":             reservedFraming,
	"transfer-encoding":   reservedFraming,
	"upgrade":             reservedFraming,
	"webhook-id":          reservedSignature,
	"webhook-signature":   reservedSignature,
	"webhook-timestamp":   reservedSignature,
}

// reservedReason returns why a message may not carry a header named name
// (in any case), or "" if it may: a header of that name would override
// what a publisher sets itself, or steer the transport (credentials, the
// host, the signature, JetStream's Nats-* headers, RabbitMQ's CC and BCC).
func reservedReason(name string) string {
	lower := strings.ToLower(name)
	if why, ok := reservedHeaders[lower]; ok {
		return why
	}
	if strings.HasPrefix(lower, "nats-") {
		return reservedNATS
	}
	return ""
}
