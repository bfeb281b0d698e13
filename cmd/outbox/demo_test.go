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
	requireDemoPassed(t, code, out, errOut)
}

// requireDemoPassed fails the test unless the demo exited 0 having shown
// every step.
func requireDemoPassed(t *testing.T, code int, out, errOut string) {
	t.Helper()
	if code != 0 {
		t.Fatalf("outbox demo: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	for _, step := range []string{"1. 20 orders", "2. order 21 rolled back", "3. broker down", "NATS started again", "4. lost acknowledgement", "5. poison message", "31 applied exactly once"} {
		if !strings.Contains(out, step) {
			t.Errorf("demo output lacks %q:\n%s", step, out)
		}
	}
}

func TestDemoRefusesADatabaseOtherThanMySQLNamingTheFlagTheValueAndWhatItTakes(t *testing.T) {
	t.Parallel()
	for _, raw := range []string{"postgres://app:s3cret@db.example/shop", "sqlite:demo.db", "shop"} {
		code, out, errOut := cli(t, "demo", "--database", raw)
		if code != 2 || out != "" {
			t.Errorf("demo --database %s: exit %d, stdout %q; want exit 2 before any step", raw, code, out)
		}
		for _, want := range []string{"--database", "mysql://", "SQLite"} {
			if !strings.Contains(errOut, want) {
				t.Errorf("demo --database %s: stderr %q lacks %q", raw, errOut, want)
			}
		}
		if strings.Contains(errOut, "s3cret") {
			t.Errorf("demo --database %s: stderr %q shows the password", raw, errOut)
		}
	}
	if _, _, errOut := cli(t, "demo", "--database", "postgres://app:s3cret@db.example/shop"); !strings.Contains(errOut, `"postgres://app:xxxxx@db.example/shop"`) {
		t.Errorf("stderr %q does not name the value, password hidden", errOut)
	}
}
