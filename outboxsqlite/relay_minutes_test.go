package outboxsqlite_test

import (
	"testing"

	"github.com/go-outbox/outbox/outboxsqlite"
	"github.com/go-outbox/outbox/relaytest"
)

func TestMinuteRollupSumsWhatARelayPublishedAndWhatFailed(t *testing.T) {
	t.Parallel()
	h, _, _ := relayHarness(t, outboxsqlite.Options{})
	relaytest.TestRelayAddsToTheMinuteRollup(t, h)
}
