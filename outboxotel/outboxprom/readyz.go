package outboxprom

import (
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/go-outbox/outbox"
)

// check is one readiness check of /readyz.
type check struct {
	ready func() error
	// what says what ready checks, for the people who read /readyz; empty
	// for a check added by name only.
	what string
}

// readyz answers 200 if every check passes, else 503; the body has a line
// per check, by name, saying what it checks and why it fails if it does,
// so that a probe's log or a curl tells what was looked at.
func (s *Server) readyz(w http.ResponseWriter, _ *http.Request) {
	s.mu.Lock()
	names := slices.Sorted(func(yield func(string) bool) {
		for name := range s.checks {
			if !yield(name) {
				return
			}
		}
	})
	checks := make([]check, len(names))
	for i, name := range names {
		checks[i] = s.checks[name]
	}
	s.mu.Unlock()
	var (
		lines   strings.Builder
		failing int
	)
	for i, c := range checks {
		status := "ok"
		if err := c.ready(); err != nil {
			failing++
			status = "FAILING: " + err.Error()
		}
		fmt.Fprintf(&lines, "%s: %s", names[i], status)
		if c.what != "" {
			fmt.Fprintf(&lines, " (checks: %s)", c.what)
		}
		lines.WriteByte('\n')
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	switch {
	case failing > 0:
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintf(w, "not ready: %d of %s\n", failing, checksDo(len(checks), "fails", "fail"))
	case len(checks) == 0:
		fmt.Fprintln(w, "ready: no checks (the process answers)")
	default:
		fmt.Fprintf(w, "ready: %s\n", checksDo(len(checks), "passes", "pass"))
	}
	fmt.Fprint(w, lines.String())
}

// AddReady adds a check to /readyz, or replaces the one of that name. Its
// line shows the name and the outcome only: say what it checks in the name.
func (s *Server) AddReady(name string, ready func() error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.checks[name] = check{ready: ready}
}

// WatchRelay exports relay's gauge outbox_relay_ready for table
// (outboxotel.Observer.WatchRelay) and adds relay.Ready to /readyz as
// "relay <table>": the relay runs and one of its store calls (a claim, an
// idle poll) succeeded within its ReadyWindow.
func (s *Server) WatchRelay(relay *outbox.Relay, table string) error {
	if _, err := s.observer.WatchRelay(relay, table); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.checks["relay "+table] = check{ready: relay.Ready,
		what: fmt.Sprintf("the relay of %s runs and a store call of it succeeded within its ready window, %s", table, relay.ReadyWindow())}
	return nil
}

// checksDo is "n checks" with the verb agreeing with the number that leads
// the sentence: the failing count when it is "k of n checks".
func checksDo(n int, one, many string) string {
	if n == 1 {
		return "1 check " + one
	}
	return fmt.Sprintf("%d checks %s", n, many)
}
