package outboxpg_test

import (
	"testing"

	"github.com/go-outbox/outbox/outboxpg"
	"github.com/go-outbox/outbox/relaytest"
)

func TestMinuteRollupSumsWhatARelayPublishedAndWhatFailed(t *testing.T) {
	t.Parallel()
	h, _, _ := relayHarness(t, outboxpg.Options{})
	relaytest.TestRelayAddsToTheMinuteRollup(t, h)
}
