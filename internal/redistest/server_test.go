package redistest

import (
	"strings"
	"testing"
)

// A port another test's server holds makes redis-server exit: run must say
// so rather than take the other server's PONG for its own.
func TestServerOnAPortAnotherServerHoldsFailsInsteadOfUsingTheOtherServer(t *testing.T) {
	first := Start(t)
	second := &Server{bin: first.bin, dir: t.TempDir(), port: first.port}
	t.Cleanup(second.Stop)
	err := second.run()
	if err == nil || !strings.Contains(err.Error(), "exited") {
		t.Fatalf("a second server on port %d: %v; want an error saying it exited", first.port, err)
	}
}

// Start's server can be stopped and started again on the same port.
func TestServerRestartsOnTheSamePort(t *testing.T) {
	s := Start(t)
	url := s.URL
	s.Stop()
	s.Restart(t)
	if s.URL != url {
		t.Fatalf("URL after Restart %s, want %s", s.URL, url)
	}
}
