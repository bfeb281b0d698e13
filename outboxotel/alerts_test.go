package outboxotel_test

import (
	"os"
	"os/exec"
	"regexp"
	"testing"
)

// The alert rules of docs/observability are tested with promtool against
// recorded series (outbox-alerts.test.yml): each alert must fire on a
// series that should fire it and stay quiet on one that should not, and no
// alert may go untested. promtool comes from Debian's prometheus package,
// which scripts/test installs (scripts/lib/promtool.sh); without it the
// test is skipped, except under CI=true, where it fails.
func TestAlertRulesFireOnTheirSeriesAndStayQuietOnOthers(t *testing.T) {
	t.Parallel()
	const dir = "../docs/observability"
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("promtool not found under CI=true: scripts/test installs it (scripts/lib/promtool.sh): %v", err)
		}
		t.Skip("promtool not installed: apt-get install prometheus, or run scripts/test, which installs it")
	}
	rules, err := os.ReadFile(dir + "/outbox-alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	tests, err := os.ReadFile(dir + "/outbox-alerts.test.yml")
	if err != nil {
		t.Fatal(err)
	}
	alerts := regexp.MustCompile(`(?m)^\s*- alert: (\S+)\s*$`).FindAllSubmatch(rules, -1)
	if len(alerts) == 0 {
		t.Fatalf("no alert found in %s/outbox-alerts.yml", dir)
	}
	quiet, firing := map[string]int{}, map[string]int{}
	for _, m := range regexp.MustCompile(`(?m)^\s*alertname: (\S+)\s*\n\s*exp_alerts:(.*)$`).FindAllSubmatch(tests, -1) {
		if string(m[2]) == " []" {
			quiet[string(m[1])]++
		} else {
			firing[string(m[1])]++
		}
	}
	for _, a := range alerts {
		name := string(a[1])
		if quiet[name] == 0 || firing[name] == 0 {
			t.Errorf("alert %s is tested firing %d and quiet %d time(s) in outbox-alerts.test.yml; want each at least once", name, firing[name], quiet[name])
		}
	}

	for _, args := range [][]string{{"check", "rules", "outbox-alerts.yml"}, {"test", "rules", "outbox-alerts.test.yml"}} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Errorf("promtool %v: %v\n%s", args, err, out)
		}
	}
}
