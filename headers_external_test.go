package outbox_test

import (
	"strings"
	"testing"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/outboxhttp"
)

// Every request header the webhook publisher sets itself is refused at
// write time, so no message can override or pose as one.
func TestWriterRefusesEveryHeaderTheWebhookPublisherSets(t *testing.T) {
	t.Parallel()
	for _, name := range []string{
		outboxhttp.HeaderID, outboxhttp.HeaderIdempotencyKey, outboxhttp.HeaderKey, outboxhttp.HeaderTopic,
		outboxhttp.HeaderWebhookID, outboxhttp.HeaderWebhookSignature, outboxhttp.HeaderWebhookTimestamp,
	} {
		for _, n := range []string{name, strings.ToLower(name), strings.ToUpper(name)} {
			if err := outbox.ValidateHeaderName(n); err == nil || !strings.Contains(err.Error(), "reserved") {
				t.Errorf("outbox.ValidateHeaderName(%q) = %v, want it reserved", n, err)
			}
		}
	}
}
