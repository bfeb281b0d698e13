//go:build ignore

// testjson reads `go test -json` on its standard input and writes what go test
// writes without -v: the packages' result lines and the output of failed tests
// (everything with -v). It also lists the tests that skipped, which go test
// without -v never shows, so scripts/test can report them and hold CI to an
// allow-list. scripts/test builds it with `go build scripts/testjson.go`.
//
//	go test -json ./... | testjson [-v] [-skips FILE] [-require-tests]
//
// -skips appends one line per skipped test to FILE: package, test and the
// last line the test logged (its reason), tab-separated. -require-tests exits
// with status 1 when no test ran at all (a -run pattern that matched nothing).
// Otherwise the exit status is 0: the pipeline's status is go test's.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strings"
)

type event struct {
	Action  string
	Package string
	Test    string
	Output  string
}

type filter struct {
	verbose bool
	out     *bufio.Writer
	// own holds each running test's output lines; failed holds the output
	// of its failed subtests, printed under it when it fails in turn.
	own, failed map[string][]string
	skips       []string
	ran         int
}

func main() {
	verbose := flag.Bool("v", false, "print every line, as go test -v does")
	skipsFile := flag.String("skips", "", "append the skipped tests to this file")
	requireTests := flag.Bool("require-tests", false, "exit 1 if no test ran")
	flag.Parse()

	f := &filter{verbose: *verbose, out: bufio.NewWriter(os.Stdout), own: map[string][]string{}, failed: map[string][]string{}}
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 64<<20)
	for in.Scan() {
		f.line(in.Bytes())
	}
	if err := in.Err(); err != nil {
		fmt.Fprintf(f.out, "testjson: reading go test's output: %v\n", err)
	}
	f.out.Flush()
	if *skipsFile != "" && len(f.skips) > 0 {
		file, err := os.OpenFile(*skipsFile, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		if err == nil {
			_, err = file.WriteString(strings.Join(f.skips, "\n") + "\n")
			if cerr := file.Close(); err == nil {
				err = cerr
			}
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "testjson: %v\n", err)
			os.Exit(1)
		}
	}
	if *requireTests && f.ran == 0 {
		fmt.Println("testjson: no test ran: the -run pattern matched nothing")
		os.Exit(1)
	}
}

func (f *filter) line(b []byte) {
	var e event
	if len(b) == 0 || b[0] != '{' || json.Unmarshal(b, &e) != nil || e.Action == "" {
		f.out.Write(append(b, '\n')) // not an event: a line of go's own
		return
	}
	key := e.Package + " " + e.Test
	switch e.Action {
	case "build-output":
		f.out.WriteString(e.Output)
	case "output":
		switch {
		case f.verbose:
			f.out.WriteString(e.Output)
		case e.Test != "":
			f.own[key] = append(f.own[key], e.Output)
		case e.Output != "PASS\n": // go test without -v does not print it
			if strings.HasPrefix(e.Output, "FAIL") {
				f.flush(e.Package) // before the package's result line
			}
			f.out.WriteString(e.Output)
		}
	case "pass":
		if e.Test != "" {
			f.ran++
			f.done(key)
		}
	case "skip":
		if e.Test != "" {
			f.skips = append(f.skips, e.Package+"\t"+e.Test+"\t"+reason(f.own[key]))
			f.done(key)
		}
	case "fail":
		if e.Test == "" {
			f.flush(e.Package)
			return
		}
		f.ran++
		// The test's header line first, as go test prints it, then what the
		// test logged, then its failed subtests.
		lines := shown(f.own[key])
		var header, rest []string
		for _, l := range lines {
			if strings.HasPrefix(strings.TrimLeft(l, " "), "--- FAIL") {
				header = append(header, l)
			} else {
				rest = append(rest, l)
			}
		}
		all := append(append(header, rest...), f.failed[key]...)
		if i := strings.LastIndex(e.Test, "/"); i >= 0 {
			parent := e.Package + " " + e.Test[:i]
			f.failed[parent] = append(f.failed[parent], all...)
		} else {
			f.out.WriteString(strings.Join(all, ""))
		}
		delete(f.own, key)
		delete(f.failed, key)
	}
}

// flush prints what is left of pkg's tests: a test binary that crashed or
// timed out leaves tests that never ended, and their output holds the panic.
func (f *filter) flush(pkg string) {
	for k, lines := range f.own {
		if strings.HasPrefix(k, pkg+" ") {
			f.out.WriteString(strings.Join(shown(lines), ""))
			delete(f.own, k)
		}
	}
	for k, lines := range f.failed {
		if strings.HasPrefix(k, pkg+" ") {
			f.out.WriteString(strings.Join(lines, ""))
			delete(f.failed, k)
		}
	}
}

func (f *filter) done(key string) {
	delete(f.own, key)
	delete(f.failed, key)
}

// shown drops the lines go test prints only with -v.
func shown(lines []string) []string {
	var out []string
	for _, l := range lines {
		if t := strings.TrimLeft(l, " "); strings.HasPrefix(t, "=== RUN") || strings.HasPrefix(t, "=== PAUSE") || strings.HasPrefix(t, "=== CONT") || strings.HasPrefix(t, "=== NAME") {
			continue
		}
		out = append(out, l)
	}
	return out
}

// reason is the last line a skipped test logged: t.Skip's message.
func reason(lines []string) string {
	for i := len(lines) - 1; i >= 0; i-- {
		t := strings.TrimSpace(lines[i])
		if t == "" || strings.HasPrefix(t, "--- SKIP") || strings.HasPrefix(t, "===") {
			continue
		}
		return strings.ReplaceAll(t, "\t", " ")
	}
	return "(no reason given)"
}
