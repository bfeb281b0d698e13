package clitest

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/google/uuid"
)

// fatalRecorder is a testing.TB whose Fatal stops only the goroutine that
// called it, and keeps the message.
type fatalRecorder struct {
	testing.TB
	fatal string
}

func (f *fatalRecorder) Helper()             {}
func (f *fatalRecorder) Logf(string, ...any) {}
func (f *fatalRecorder) Fatal(args ...any)   { f.fatal = fmt.Sprint(args...); runtime.Goexit() }
func (f *fatalRecorder) Fatalf(format string, a ...any) {
	f.fatal = fmt.Sprintf(format, a...)
	runtime.Goexit()
}

func publishedFrom(t *testing.T, content string) ([]uuid.UUID, string) {
	path := filepath.Join(t.TempDir(), "published.jsonl")
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	rec := &fatalRecorder{TB: t}
	var ids []uuid.UUID
	done := make(chan struct{})
	go func() {
		defer close(done)
		ids = PublishedInOrder(rec, path)
	}()
	<-done
	return ids, rec.fatal
}

func TestPublishedInOrderIgnoresOnlyAnUnterminatedLastLine(t *testing.T) {
	t.Parallel()
	a, b := uuid.Must(uuid.NewV7()), uuid.Must(uuid.NewV7())
	ids, fatal := publishedFrom(t, fmt.Sprintf("{\"id\":%q}\n{\"id\":%q}\n{\"id\":\"%s", a, b, a.String()[:10]))
	if fatal != "" || len(ids) != 2 || ids[0] != a || ids[1] != b {
		t.Fatalf("PublishedInOrder = %v (fatal %q), want [%s %s] with the torn last line ignored", ids, fatal, a, b)
	}
}

func TestPublishedInOrderFailsOnATornLineBeforeOthers(t *testing.T) {
	t.Parallel()
	a, b := uuid.Must(uuid.NewV7()), uuid.Must(uuid.NewV7())
	// A write cut short, then the next relay's lines appended after it: the
	// torn line swallows the start of the next one.
	ids, fatal := publishedFrom(t, fmt.Sprintf("{\"id\":%q}\n{\"id\":\"%s{\"id\":%q}\n{\"id\":%q}\n", a, a.String()[:10], b, b))
	if !strings.Contains(fatal, "line 2 of 3") {
		t.Fatalf("PublishedInOrder = %v (fatal %q), want the test failed at line 2", ids, fatal)
	}
	ids, fatal = publishedFrom(t, fmt.Sprintf("{\"id\":%q}\n{}\n", a))
	if !strings.Contains(fatal, "line 2 of 2") {
		t.Fatalf("PublishedInOrder = %v (fatal %q), want a line without an id to fail the test", ids, fatal)
	}
}
