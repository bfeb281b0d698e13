// Package clitest builds the outbox command once per test binary and runs relay
// processes of it, publishing to a JSON-lines file or to a broker, for tests
// that kill, stall or restart relays for real.
package clitest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
)

var build = sync.OnceValues(func() (string, error) {
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..")
	dir, err := os.MkdirTemp("", "outbox-cli-")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "outbox")
	// cmd/outbox is a module of its own: build it in its directory.
	cmd := exec.Command("go", "build", "-o", bin, ".")
	cmd.Dir = filepath.Join(root, "cmd", "outbox")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/outbox: %v\n%s", err, out)
	}
	return bin, nil
})

// Build returns the path of the outbox command, building it on first use.
func Build() (string, error) { return build() }

// Binary returns the path of the outbox command, building it on first use.
func Binary(t testing.TB) string {
	t.Helper()
	bin, err := build()
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// Relay is a running `outbox relay` process.
type Relay struct {
	Cmd    *exec.Cmd
	stderr *LockedBuffer
	done   chan struct{}
}

// LockedBuffer collects what a process, a command or a logger writes, for
// the test to read meanwhile.
type LockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *LockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *LockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// StartRelay starts `outbox relay --publisher stdout:` with args, its output
// appended to the file out. The process is killed when the test ends.
func StartRelay(t testing.TB, out *os.File, args ...string) *Relay {
	t.Helper()
	return StartRelayTo(t, "stdout:", out, args...)
}

// StartRelayTo starts `outbox relay --publisher publisher` with args; its
// standard output goes to out (nil discards it), its standard error is shown
// if the test fails. The process is killed when the test ends.
func StartRelayTo(t testing.TB, publisher string, out io.Writer, args ...string) *Relay {
	t.Helper()
	cmd := exec.Command(Binary(t), append([]string{"relay", "--publisher", publisher}, args...)...)
	cmd.Stdout = out
	r := &Relay{Cmd: cmd, stderr: &LockedBuffer{}, done: make(chan struct{})}
	cmd.Stderr = r.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = cmd.Wait(); close(r.done) }()
	t.Cleanup(func() {
		r.Kill()
		if out := r.stderr.String(); t.Failed() && out != "" {
			t.Logf("relay %d stderr:\n%s", cmd.Process.Pid, out)
		}
	})
	return r
}

// Kill sends SIGKILL and waits for the process to end.
func (r *Relay) Kill() {
	_ = r.Cmd.Process.Kill()
	<-r.done
}

// DumpGoroutines makes the process print every goroutine's stack to its
// standard error and exit (SIGQUIT), and waits up to 10s for that: what a
// relay that stopped making progress was doing. The stack shows in the
// test's log, since the test has failed.
func (r *Relay) DumpGoroutines() {
	_ = r.Cmd.Process.Signal(syscall.SIGQUIT)
	select {
	case <-r.done:
	case <-time.After(10 * time.Second):
	}
}

// Stop sends SIGINT (graceful shutdown) and waits for the process to end,
// killing it after 60s.
func (r *Relay) Stop() { r.StopWithin(60 * time.Second) }

// StopWithin sends SIGINT (graceful shutdown) and waits up to d for the
// process to end. It reports whether it did; if not, it is killed.
func (r *Relay) StopWithin(d time.Duration) bool {
	_ = r.Cmd.Process.Signal(os.Interrupt)
	select {
	case <-r.done:
		return true
	case <-time.After(d):
		r.Kill()
		return false
	}
}

// Stderr returns what the process wrote to its standard error. Call it once
// the process has ended.
func (r *Relay) Stderr() string {
	<-r.done
	return r.stderr.String()
}

// Logged returns how many times the process has written text to its
// standard error so far.
func (r *Relay) Logged(text string) int { return strings.Count(r.stderr.String(), text) }

// Exited reports whether the process has ended.
func (r *Relay) Exited() bool {
	select {
	case <-r.done:
		return true
	default:
		return false
	}
}

// Published counts each message id in a JSON-lines file written by stdout
// publishers. A torn last line (a kill mid-write) is ignored: that message was
// not confirmed.
func Published(t testing.TB, path string) map[uuid.UUID]int {
	t.Helper()
	counts := map[uuid.UUID]int{}
	for _, id := range PublishedInOrder(t, path) {
		counts[id]++
	}
	return counts
}

// PublishedInOrder returns the message ids of a JSON-lines file written by
// stdout publishers, in the order of its lines, duplicates included. Only the
// file's unterminated end may fail to parse (a kill mid-write, or a write
// still under way): that message was not confirmed. Any complete line that is
// not a message with an id fails the test, since a torn line followed by
// others could hide a message or a duplicate.
func PublishedInOrder(t testing.TB, path string) []uuid.UUID {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := bytes.Split(b, []byte{'\n'})
	if tail := lines[len(lines)-1]; len(tail) > 0 {
		t.Logf("%s: ignoring its unterminated last line (a write cut short): %q", path, tail)
	}
	lines = lines[:len(lines)-1]
	var ids []uuid.UUID
	for i, l := range lines {
		var line struct{ ID uuid.UUID }
		if err := json.Unmarshal(l, &line); err != nil || line.ID == uuid.Nil {
			t.Fatalf("%s line %d of %d is not a published message with an id (%v): %q", path, i+1, len(lines), err, l)
		}
		ids = append(ids, line.ID)
	}
	return ids
}

// Lines counts the complete lines in path.
func Lines(t testing.TB, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return bytes.Count(b, []byte{'\n'})
}
