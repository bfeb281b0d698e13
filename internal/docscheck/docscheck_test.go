package main

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestBlocksAreCompiledAsAFileAsDeclarationsOrAsABodyAndMarkedOnesAreSkipped(t *testing.T) {
	t.Parallel()
	md := strings.Join([]string{
		"# Title",
		"```go",
		"package main",
		"```",
		"```go",
		"// A test.",
		"func TestX(t *testing.T) {}",
		"```",
		"```go",
		"var x = 1",
		"if x > 0 {",
		"}",
		"```",
		"```go",
		"// not compiled: a signature",
		"func Open(url string, cfg Config) (*Publisher, error)",
		"```",
		"```sh",
		"go run .",
		"```",
		"- a list item:",
		"",
		"  ```go",
		"  obs.Watch(store)",
		"  ```",
		"",
	}, "\n")
	path := filepath.Join(t.TempDir(), "doc.md")
	if err := os.WriteFile(path, []byte(md), 0o644); err != nil {
		t.Fatal(err)
	}
	got, skipped, err := extract(path)
	if err != nil {
		t.Fatal(err)
	}
	if skipped != 1 {
		t.Errorf("skipped = %d, want 1 (the block marked not compiled)", skipped)
	}
	want := []snippet{
		{file: path, line: 3, lines: []string{"package main"}, kind: wholeFile},
		{file: path, line: 6, lines: []string{"// A test.", "func TestX(t *testing.T) {}"}, kind: declarations},
		{file: path, line: 10, lines: []string{"var x = 1", "if x > 0 {", "}"}, kind: body},
		{file: path, line: 24, lines: []string{"obs.Watch(store)"}, kind: body},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("extract:\n got %+v\nwant %+v", got, want)
	}
}

func TestABlockThatNeverEndsIsAnErrorNamingItsLine(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "doc.md")
	if err := os.WriteFile(path, []byte("text\n```go\nx := 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := extract(path); err == nil || !strings.Contains(err.Error(), "doc.md:2:") {
		t.Errorf("extract = %v, want an error naming doc.md:2", err)
	}
}

func TestAFragmentImportsTheKnownPackagesItNames(t *testing.T) {
	t.Parallel()
	code := "store, err := outboxpg.New(pool, outboxpg.Options{})\nlog.Fatal(err)\nctx.Done()\n"
	got := importsOf(code)
	want := []string{"github.com/go-outbox/outbox/outboxpg", "log"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("importsOf = %v, want %v", got, want)
	}
}

func TestUnusedNamesAreNotReportedAndOtherErrorsNameTheMarkdownLine(t *testing.T) {
	t.Parallel()
	root := "/repo"
	dir := "/tmp/docscheck-1"
	out := strings.Join([]string{
		"# docsnippets/s000",
		"/repo/README.md:12:2: declared and not used: writer",
		"s000/snippet.go:6:2: \"log\" imported and not used",
		"/repo/docs/inbox.md:30:5: cannot use x (variable of type int) as string value",
		"\thave (int)",
		"\twant (string)",
		"../other/doc.md:4: syntax error: unexpected {",
		"",
	}, "\n")
	got := parse(out, dir, root)
	want := []string{
		"docs/inbox.md:30: cannot use x (variable of type int) as string value\n\thave (int)\n\twant (string)",
		"/tmp/other/doc.md:4: syntax error: unexpected {",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("parse:\n got %q\nwant %q", got, want)
	}
	if onlyUnused(out) {
		t.Error("onlyUnused = true for output with other errors")
	}
	if !onlyUnused("# docsnippets/s000\n/repo/README.md:12:2: declared and not used: writer\n") {
		t.Error("onlyUnused = false for output with only an unused variable")
	}
}

func TestTheWorkspaceUsesEveryModuleOfGoWork(t *testing.T) {
	t.Parallel()
	work := "go 1.26.0\n\nuse (\n\t.\n\t./outboxpg // the store\n\n\t./cmd/outbox\n)\n"
	got := modules(work)
	want := []string{".", "./outboxpg", "./cmd/outbox"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("modules = %q, want %q", got, want)
	}
}
