// Command docscheck compiles every Go snippet in README.md and docs/**/*.md, so
// that the documentation cannot drift from the API. scripts/test runs it from
// the repository's root:
//
//	go run ./internal/docscheck            # README.md and every .md under docs/
//	go run ./internal/docscheck FILE.md... # only these
//
// A snippet is a fenced block whose info string is exactly "go". It is
// compiled in one of three ways, chosen by its text:
//
//   - A block whose first code line is a package clause is a whole file and
//     is compiled as it is, alone in a package.
//   - A block with a line that starts (at column 0) with func, type or
//     import holds declarations: it is compiled at the top level of a file.
//     (A var or const line may be a statement, so it decides nothing.)
//   - Any other block is a fragment of code: it is compiled as the body of a
//     function.
//
// The last two share their package with a prelude (prelude.go.txt beside this
// file), which declares the names snippets use without defining them: ctx,
// pool, store, writer, relay, inbox and a few stand-ins for application code
// (payOrder, OrderPaid...). Imports are added from the package names a block
// uses (the table knownImports), and "declared and not used" or "imported and
// not used" are not reported, since a snippet shows a step, not a program.
//
// A block that is not meant to compile (a signature, an outline with ...)
// starts with the line
//
//	// not compiled: <why>
//
// Each failing block is printed as FILE:LINE: the compiler's message, and the
// command exits 1. The snippets are compiled in a module of their own, in a
// temporary directory, inside a workspace made of the repository's go.work
// modules, so they import what the repository's modules require.
package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"
)

const notCompiled = "// not compiled:"

type kind int

const (
	wholeFile kind = iota
	declarations
	body
)

// snippet is one ```go block.
type snippet struct {
	file  string // relative to the repository's root
	line  int    // of the first code line
	lines []string
	kind  kind
}

func main() {
	start := time.Now()
	files := os.Args[1:]
	if len(files) == 0 {
		var err error
		if files, err = docFiles(); err != nil {
			fail(err)
		}
	}
	var snippets []snippet
	skipped := 0
	for _, f := range files {
		got, skips, err := extract(f)
		if err != nil {
			fail(err)
		}
		snippets = append(snippets, got...)
		skipped += skips
	}
	failures, err := compile(snippets)
	if err != nil {
		fail(err)
	}
	for _, f := range failures {
		fmt.Println(f)
	}
	fmt.Printf("docscheck: %d Go snippets in %d files compiled, %d marked not compiled, %d errors (%.1fs)\n",
		len(snippets), len(files), skipped, len(failures), time.Since(start).Seconds())
	if len(failures) > 0 {
		os.Exit(1)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "docscheck:", err)
	os.Exit(2)
}

// docFiles lists README.md and every Markdown file under docs/.
func docFiles() ([]string, error) {
	if _, err := os.Stat("go.work"); err != nil {
		return nil, errors.New("run from the repository's root (no go.work here)")
	}
	files := []string{"README.md"}
	err := filepath.WalkDir("docs", func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(path, ".md") {
			files = append(files, path)
		}
		return err
	})
	sort.Strings(files[1:])
	return files, err
}

var (
	fenceOpen = regexp.MustCompile("^( *)```go\\s*$")
	fenceAny  = regexp.MustCompile("^ *```")
	declLine  = regexp.MustCompile(`^(func|type|import)\b`)
)

// extract returns the ```go blocks of one Markdown file, and how many were
// marked not compiled.
func extract(path string) ([]snippet, int, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, 0, err
	}
	var out []snippet
	skipped := 0
	var cur *snippet
	indent := ""
	for i, line := range strings.Split(string(data), "\n") {
		if cur == nil {
			if m := fenceOpen.FindStringSubmatch(line); m != nil {
				cur = &snippet{file: path, line: i + 2}
				indent = m[1]
			}
			continue
		}
		if fenceAny.MatchString(line) {
			if first := firstCode(cur.lines); strings.HasPrefix(first, notCompiled) {
				skipped++
			} else {
				cur.kind = classify(cur.lines)
				out = append(out, *cur)
			}
			cur = nil
			continue
		}
		cur.lines = append(cur.lines, strings.TrimPrefix(line, indent))
	}
	if cur != nil {
		return nil, 0, fmt.Errorf("%s:%d: a ```go block that never ends", path, cur.line-1)
	}
	return out, skipped, nil
}

// firstCode is the first line that is not blank.
func firstCode(lines []string) string {
	for _, l := range lines {
		if t := strings.TrimSpace(l); t != "" {
			return t
		}
	}
	return ""
}

func classify(lines []string) kind {
	for _, l := range lines {
		t := strings.TrimSpace(l)
		if t == "" || strings.HasPrefix(t, "//") {
			continue
		}
		if strings.HasPrefix(t, "package ") {
			return wholeFile
		}
		break
	}
	for _, l := range lines {
		if declLine.MatchString(l) {
			return declarations
		}
	}
	return body
}
