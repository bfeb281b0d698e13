package storetest

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// A handler's error may carry any bytes (a broker's reply, a payload
// fragment); a store that refused such a reason would fail every park of
// the message, and with it, for a retried one, every end of its retry. The
// reason is kept readable instead: valid UTF-8, without NUL bytes.
func testParkedReasonWithAnyBytesIsStored(t *testing.T, p ParkedTable) {
	m := parkedMessage("customer-9")
	reason := "upstream said \xff\xfe and \x00 then gave up"
	park(t, p, "billing", m, 1, reason)
	got := getParked(t, p, "billing", m.ID)
	if !utf8.ValidString(got.Error) || strings.Contains(got.Error, "\x00") || !strings.HasPrefix(got.Error, "upstream said") ||
		!strings.HasSuffix(got.Error, "then gave up") {
		t.Fatalf("message %s parked with error %q: stored as %q; want it kept, as valid UTF-8 without NUL", m.ID, reason, got.Error)
	}
	taken, ok, err := p.TakeRetry(t.Context(), "billing")
	if err != nil || ok {
		t.Fatalf("take a retry nobody requested: %v, %v, %v; want none", taken, ok, err)
	}
	requestRetry(t, p, "billing", 1, m.ID)
	taken, ok, err = p.TakeRetry(t.Context(), "billing")
	if err != nil || !ok || taken.ID != m.ID {
		t.Fatalf("take the retry of %s: %v, %v, %v", m.ID, taken.ID, ok, err)
	}
	if parked, err := p.ParkRetried(t.Context(), "billing", taken.Message, taken.TakenAt, 2, reason); err != nil || !parked {
		t.Fatalf("park %s again after its retry failed with error %q: %v, %v; want parked again", m.ID, reason, parked, err)
	}
}
