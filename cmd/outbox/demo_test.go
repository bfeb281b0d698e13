package main

import (
	"strings"
	"testing"
)

// The demo checks each guarantee itself and exits non-zero if one fails; CI
// runs it so the README's first command keeps working.
func TestDemoRunsTheWholeFlowAndEveryCheckHolds(t *testing.T) {
	t.Parallel()
	code, out, errOut := cli(t, "demo", "--dir", t.TempDir())
	if code != 0 {
		t.Fatalf("outbox demo: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	for _, step := range []string{"1. 20 orders", "2. order 21 rolled back", "3. broker down", "NATS started again", "4. lost acknowledgement", "5. poison message", "31 applied exactly once"} {
		if !strings.Contains(out, step) {
			t.Errorf("demo output lacks %q:\n%s", step, out)
		}
	}
}
