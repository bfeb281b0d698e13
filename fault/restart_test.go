//go:build fault

package fault

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-outbox/outbox/internal/clitest"
)

// TestFaultDatabaseRestartedMidRun stops PostgreSQL (fast shutdown) while
// writers and relays run, starts it again, and expects both to reconnect by
// themselves.
func TestFaultDatabaseRestartedMidRun(t *testing.T) {
	ctl := pgControl(t)
	s := newScenario(t, "PostgreSQL restart, 20k messages, 2 relays, key order")
	s.restartDatabaseMidRun(20000, 2000, func() { ctl("stop", "-m", "fast") },
		func() { ctl("start", "-l", filepath.Join(os.TempDir(), "outbox-fault-pg.log")) })
}

// restartDatabaseMidRun writes messages while two relays publish them in key
// order, calls stop once more than before messages arrived, and start two
// seconds later, and expects writers and relays to reconnect by themselves:
// every committed message published, duplicates only from batches in
// flight.
func (s *scenario) restartDatabaseMidRun(messages, before int, stop, start func()) {
	t := s.t
	s.ordered = true
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	writeDone := make(chan error, 1)
	go func() { writeDone <- s.write(ctx, messages, 4) }()
	relays := []*clitest.Relay{s.startRelay(s.url), s.startRelay(s.url)}
	waitFor(t, time.Minute, "relays to publish", func() bool { return s.arrived() > before })
	stop()
	time.Sleep(2 * time.Second) // the outage
	start()
	if err := <-writeDone; err != nil {
		t.Fatal(err)
	}
	s.drain(2 * time.Minute)
	stopRelays(t, relays, "the database outage")
	// Each relay may have had its batches in flight when the database went
	// away; their leases may expire during the outage.
	s.check(1, 2*2*50)
}

// pgControl returns a function running pg_ctl on the test server, or skips
// (fails in CI) when the server is not ours to stop.
func pgControl(t *testing.T) func(args ...string) {
	ctlPath, data := os.Getenv("TEST_PG_CTL"), os.Getenv("TEST_PGDATA")
	if ctlPath == "" || data == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("TEST_PG_CTL and TEST_PGDATA are not set; scripts/fault sets them")
		}
		t.Skip("TEST_PG_CTL and TEST_PGDATA are not set: run through scripts/fault")
	}
	return func(args ...string) {
		cmdline := append([]string{ctlPath, "-D", data, "-w"}, args...)
		if user := os.Getenv("TEST_PG_RUNAS"); user != "" {
			cmdline = append([]string{"runuser", "-u", user, "--"}, cmdline...)
		}
		out, err := execCommand(cmdline...)
		if err != nil {
			t.Fatalf("%s: %v\n%s", strings.Join(cmdline, " "), err, out)
		}
	}
}
