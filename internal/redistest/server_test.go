package redistest

import (
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
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

// A durable server is killed (SIGKILL, no shutdown save) right after it
// confirmed an entry; started again, it holds the entry. Start's server,
// which keeps nothing on disk, comes back empty.
func TestDurableServerKeepsWhatItConfirmedAcrossAKillAndRestart(t *testing.T) {
	for _, tc := range []struct {
		name  string
		start func(testing.TB) *Server
		want  int64
	}{{"durable", StartDurable, 1}, {"in memory", Start, 0}} {
		t.Run(tc.name, func(t *testing.T) {
			s := tc.start(t)
			c := redis.NewClient(&redis.Options{Addr: strings.TrimSuffix(strings.TrimPrefix(s.URL, "redis://"), "/0")})
			t.Cleanup(func() { _ = c.Close() })
			ctx := t.Context()
			if err := c.XAdd(ctx, &redis.XAddArgs{Stream: "s", Values: []string{"k", "v"}}).Err(); err != nil {
				t.Fatal(err)
			}
			s.Restart(t) // Stop kills the process
			n, err := c.XLen(ctx, "s").Result()
			if err != nil {
				t.Fatal(err)
			}
			if n != tc.want {
				t.Fatalf("after a kill and restart the stream holds %d entries; want %d", n, tc.want)
			}
		})
	}
}
