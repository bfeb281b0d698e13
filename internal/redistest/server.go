package redistest

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Server is a private redis-server a test started, to stop it under a
// client (the shared TEST_REDIS_URL server must stay up for other tests).
type Server struct {
	// URL is redis://127.0.0.1:PORT/0.
	URL  string
	bin  string
	dir  string
	port int
	// durable keeps every write in an append-only file, fsynced before
	// the reply (StartDurable).
	durable bool

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{} // closed when cmd has exited
}

// startAttempts is how many free ports Start tries: another process can take
// the port between its probe and redis-server's bind.
const startAttempts = 5

// Start runs a redis-server of its own on a free port, keeping nothing on
// disk, and waits until it answers PING; the test's end stops it. It needs
// redis-server on the PATH (scripts/test installs it): without one it skips
// the test, or fails it when CI is "true".
func Start(t testing.TB) *Server {
	t.Helper()
	return start(t, false)
}

// StartDurable is Start with a server that keeps what it confirmed: it
// writes every change to an append-only file in a directory of the test's
// and fsyncs it before it replies (appendonly yes, appendfsync always), so
// that after Stop (a SIGKILL) and Restart it holds every entry a client was
// told it added.
func StartDurable(t testing.TB) *Server {
	t.Helper()
	return start(t, true)
}

func start(t testing.TB, durable bool) *Server {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("redis-server is not installed; CI must provide it for this test (scripts/test installs it)")
		}
		t.Skipf("redis-server is not installed (apt-get install redis-server, or scripts/redis-up, installs it)")
	}
	s := &Server{bin: bin, dir: t.TempDir(), durable: durable}
	t.Cleanup(s.Stop)
	for attempt := 1; ; attempt++ {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		s.port = ln.Addr().(*net.TCPAddr).Port
		_ = ln.Close()
		s.URL = fmt.Sprintf("redis://127.0.0.1:%d/0", s.port)
		err = s.run()
		if err == nil {
			return s
		}
		if attempt == startAttempts {
			t.Fatalf("redistest: %v", err)
		}
	}
}

// Restart starts the server again on the same port after Stop, and waits
// until it answers PING: with an empty data set after Start, with what its
// append-only file holds after StartDurable.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.Stop()
	if err := s.run(); err != nil {
		t.Fatalf("redistest: restart: %v", err)
	}
}

// run starts redis-server on s.port and waits until it answers PING. It
// fails when the server exits first (the port was taken: another test's
// server may be listening there) or when whatever answers is not this
// process, so a test never talks to another test's server.
func (s *Server) run() error {
	var out bytes.Buffer
	persistence := []string{"--appendonly", "no"}
	if s.durable {
		persistence = []string{"--appendonly", "yes", "--appendfsync", "always"}
	}
	args := append([]string{"--port", strconv.Itoa(s.port), "--bind", "127.0.0.1", "--save", "", "--dir", s.dir}, persistence...)
	cmd := exec.Command(s.bin, args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start redis-server: %w", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	s.mu.Lock()
	s.cmd, s.exited = cmd, exited
	s.mu.Unlock()

	c := redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", s.port), MaxRetries: -1})
	defer c.Close()
	pid := "process_id:" + strconv.Itoa(cmd.Process.Pid)
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		// INFO answers while the server loads its append-only file;
		// loading:0 says it serves the data set.
		info, err := c.Info(ctx, "server", "persistence").Result()
		cancel()
		select {
		case <-exited:
			// out is no longer written once the process has exited.
			return fmt.Errorf("redis-server on port %d exited: %s", s.port, lastLine(out.String()))
		default:
		}
		if err == nil && strings.Contains(info, pid+"\r\n") && strings.Contains(info, "loading:0\r\n") {
			return nil
		}
		if time.Now().After(deadline) {
			s.Stop()
			return fmt.Errorf("redis-server (pid %d) on port %d does not answer within 10s: %v", cmd.Process.Pid, s.port, err)
		}
		select {
		case <-exited:
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	return s[strings.LastIndex(s, "\n")+1:]
}

// Stop kills the server and waits for it to exit. Stopping twice is fine.
func (s *Server) Stop() {
	s.mu.Lock()
	cmd, exited := s.cmd, s.exited
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Kill()
	<-exited
}
