//go:build fault

package fault

import (
	"bytes"
	"io"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/go-outbox/outbox/internal/clitest"
)

func execCommand(cmdline ...string) ([]byte, error) {
	return exec.Command(cmdline[0], cmdline[1:]...).CombinedOutput()
}

// childEnv, when set, makes the test binary run the child role it names
// instead of the tests (see TestMain): a scenario runs its consumers as
// processes of their own, as a deployment does, so that it can SIGKILL them
// as it does the relays (processes of the outbox command, see clitest).
const childEnv = "OUTBOX_FAULT_CHILD"

// childRoles maps the roles of child processes to their main functions,
// which return the exit code.
var childRoles = map[string]func() int{
	natsConsumerRole: natsConsumerMain,
}

// runChild runs the role childEnv names, if any: ok reports whether it did.
func runChild() (code int, ok bool) {
	role := os.Getenv(childEnv)
	if role == "" {
		return 0, false
	}
	run, found := childRoles[role]
	if !found {
		os.Stderr.WriteString("fault: unknown child role " + role + "\n")
		return 2, true
	}
	return run(), true
}

// child is a process of the test binary running a child role.
type child struct {
	cmd    *exec.Cmd
	stderr *clitest.LockedBuffer
	done   chan struct{}
}

// startChild starts the test binary in role, with env added to the test's
// environment; its standard output goes to stdout, its standard error is
// shown if the test fails. It is killed when the test ends.
func startChild(t *testing.T, role string, env []string, stdout io.Writer) *child {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(append(os.Environ(), childEnv+"="+role), env...)
	cmd.Stdout = stdout
	c := &child{cmd: cmd, stderr: &clitest.LockedBuffer{}, done: make(chan struct{})}
	cmd.Stderr = c.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = cmd.Wait(); close(c.done) }()
	t.Cleanup(func() {
		c.kill()
		if out := c.stderr.String(); t.Failed() && out != "" {
			t.Logf("%s process %d stderr:\n%s", role, cmd.Process.Pid, out)
		}
	})
	return c
}

// kill sends SIGKILL and waits for the process to end.
func (c *child) kill() {
	_ = c.cmd.Process.Kill()
	<-c.done
}

// signal sends sig to the process.
func (c *child) signal(sig os.Signal) { _ = c.cmd.Process.Signal(sig) }

// wait waits up to d for the process to end by itself, and reports whether
// it did.
func (c *child) wait(d time.Duration) bool {
	select {
	case <-c.done:
		return true
	case <-time.After(d):
		return false
	}
}

// stopWithin sends SIGINT (graceful shutdown) and waits up to d for the
// process to end. It reports whether it did; if not, it is killed.
func (c *child) stopWithin(d time.Duration) bool {
	c.signal(os.Interrupt)
	if c.wait(d) {
		return true
	}
	c.kill()
	return false
}

// exited reports whether the process has ended.
func (c *child) exited() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// lineWriter calls fn with each complete line written to it, without its
// newline. A process's output is written to it by one goroutine.
type lineWriter struct {
	buf []byte
	fn  func(line string)
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.buf = append(w.buf, p...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			break
		}
		w.fn(string(w.buf[:i]))
		w.buf = w.buf[i+1:]
	}
	return len(p), nil
}
