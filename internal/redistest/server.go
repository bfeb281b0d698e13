package redistest

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Server is a private redis-server a test started, to stop it under a
// client (the shared TEST_REDIS_URL server must stay up for other tests).
type Server struct {
	// URL is redis://127.0.0.1:PORT/0.
	URL string
	cmd *exec.Cmd
}

// Start runs a redis-server of its own on a free port, keeping nothing on
// disk, and waits until it answers PING; the test's end stops it. It needs
// redis-server on the PATH (scripts/test installs it): without one it skips
// the test, or fails it when CI is "true".
func Start(t testing.TB) *Server {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("redis-server is not installed; CI must provide it for this test (scripts/test installs it)")
		}
		t.Skipf("redis-server is not installed (apt-get install redis-server, or scripts/redis-up, installs it)")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	_ = ln.Close()
	cmd := exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", t.TempDir())
	if err := cmd.Start(); err != nil {
		t.Fatalf("start redis-server: %v", err)
	}
	s := &Server{URL: fmt.Sprintf("redis://127.0.0.1:%d/0", port), cmd: cmd}
	t.Cleanup(s.Stop)
	c := redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", port), MaxRetries: -1})
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("redis-server on port %d does not answer PING within 10s: %v", port, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Stop kills the server and waits for it to exit. Stopping twice is fine.
func (s *Server) Stop() {
	if s.cmd.ProcessState != nil {
		return
	}
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
}
