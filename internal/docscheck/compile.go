package main

import (
	_ "embed"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// prelude declares, at package level, the names that snippets use without
// defining them. A snippet's own := shadows them.
//
//go:embed prelude.go.txt
var prelude string

// knownImports maps the package names snippets use to their import paths. A
// fragment imports each one whose name it uses as name.Something.
var knownImports = map[string]string{
	"context":          "context",
	"errors":           "errors",
	"fmt":              "fmt",
	"http":             "net/http",
	"log":              "log",
	"os":               "os",
	"slog":             "log/slog",
	"sql":              "database/sql",
	"testing":          "testing",
	"time":             "time",
	"uuid":             "github.com/google/uuid",
	"pgx":              "github.com/jackc/pgx/v5",
	"pgxpool":          "github.com/jackc/pgx/v5/pgxpool",
	"amqp":             "github.com/rabbitmq/amqp091-go",
	"nats":             "github.com/nats-io/nats.go",
	"jetstream":        "github.com/nats-io/nats.go/jetstream",
	"kgo":              "github.com/twmb/franz-go/pkg/kgo",
	"outbox":           "github.com/go-outbox/outbox",
	"outboxdriver":     "github.com/go-outbox/outbox/outboxdriver",
	"outboxevents":     "github.com/go-outbox/outbox/outboxevents",
	"outboxhttp":       "github.com/go-outbox/outbox/outboxhttp",
	"outboxtest":       "github.com/go-outbox/outbox/outboxtest",
	"outboxpg":         "github.com/go-outbox/outbox/outboxpg",
	"outboxpgtest":     "github.com/go-outbox/outbox/outboxpg/outboxpgtest",
	"outboxsqlite":     "github.com/go-outbox/outbox/outboxsqlite",
	"outboxsqlitetest": "github.com/go-outbox/outbox/outboxsqlite/outboxsqlitetest",
	"outboxmysql":      "github.com/go-outbox/outbox/outboxmysql",
	"outboxamqp":       "github.com/go-outbox/outbox/outboxamqp",
	"outboxnats":       "github.com/go-outbox/outbox/outboxnats",
	"outboxkafka":      "github.com/go-outbox/outbox/outboxkafka",
	"outboxotel":       "github.com/go-outbox/outbox/outboxotel",
	"outboxproto":      "github.com/go-outbox/outbox/outboxproto",
	"outboxredis":      "github.com/go-outbox/outbox/outboxredis",
	"outboxpubsub":     "github.com/go-outbox/outbox/outboxpubsub",
	"outboxaws":        "github.com/go-outbox/outbox/outboxaws",
	"outboxs3":         "github.com/go-outbox/outbox/outboxs3",
}

// compile writes every snippet into a package of a scratch module, builds them
// all with one go build, and returns the errors as FILE:LINE: message.
func compile(snippets []snippet) ([]string, error) {
	root, err := os.Getwd()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "docscheck-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	if err := workspace(root, dir); err != nil {
		return nil, err
	}
	for i, s := range snippets {
		pkg := filepath.Join(dir, fmt.Sprintf("s%03d", i))
		if err := os.Mkdir(pkg, 0o755); err != nil {
			return nil, err
		}
		if err := os.WriteFile(filepath.Join(pkg, "snippet.go"), []byte(source(root, s)), 0o644); err != nil {
			return nil, err
		}
		if s.kind != wholeFile {
			if err := os.WriteFile(filepath.Join(pkg, "prelude.go"), []byte(prelude), 0o644); err != nil {
				return nil, err
			}
		}
	}
	// -e: every error, not the first ten.
	cmd := exec.Command("go", "build", "-gcflags=-e", "./...")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK="+filepath.Join(dir, "go.work"), "GOFLAGS=")
	out, err := cmd.CombinedOutput()
	if err == nil {
		return nil, nil
	}
	failures := parse(string(out), dir, root)
	if len(failures) == 0 && !onlyUnused(string(out)) {
		return nil, fmt.Errorf("go build: %v\n%s", err, out)
	}
	return failures, nil
}

// workspace makes dir a module inside a copy of the repository's workspace.
func workspace(root, dir string) error {
	work, err := os.ReadFile(filepath.Join(root, "go.work"))
	if err != nil {
		return err
	}
	goLine := regexp.MustCompile(`(?m)^go (\S+)`).FindSubmatch(work)
	if goLine == nil {
		return fmt.Errorf("no go line in %s", filepath.Join(root, "go.work"))
	}
	var b strings.Builder
	fmt.Fprintf(&b, "go %s\n\nuse (\n\t.\n", goLine[1])
	for _, m := range modules(string(work)) {
		fmt.Fprintf(&b, "\t%s\n", filepath.Join(root, m))
	}
	b.WriteString(")\n")
	if err := os.WriteFile(filepath.Join(dir, "go.work"), []byte(b.String()), 0o644); err != nil {
		return err
	}
	if sum, err := os.ReadFile(filepath.Join(root, "go.work.sum")); err == nil {
		if err := os.WriteFile(filepath.Join(dir, "go.work.sum"), sum, 0o644); err != nil {
			return err
		}
	}
	mod := fmt.Sprintf("module docsnippets\n\ngo %s\n", goLine[1])
	return os.WriteFile(filepath.Join(dir, "go.mod"), []byte(mod), 0o644)
}

// modules lists the directories of go.work's use directives.
func modules(work string) []string {
	var dirs []string
	inUse := false
	for _, l := range strings.Split(work, "\n") {
		if i := strings.Index(l, "//"); i >= 0 {
			l = l[:i]
		}
		t := strings.TrimSpace(l)
		switch {
		case strings.HasPrefix(t, "use ("):
			inUse = true
		case inUse && t == ")":
			inUse = false
		case inUse && t != "":
			dirs = append(dirs, t)
		case strings.HasPrefix(t, "use "):
			dirs = append(dirs, strings.TrimSpace(strings.TrimPrefix(t, "use ")))
		}
	}
	return dirs
}

// source is the Go file of one snippet; //line comments make the compiler
// name the Markdown file and its lines.
func source(root string, s snippet) string {
	path := s.file
	if !filepath.IsAbs(path) {
		path = filepath.Join(root, path)
	}
	at := fmt.Sprintf("//line %s:%d\n", path, s.line)
	code := strings.Join(s.lines, "\n") + "\n"
	if s.kind == wholeFile {
		return at + code
	}
	var b strings.Builder
	b.WriteString("package snippet\n\n")
	if imports := importsOf(code); len(imports) > 0 {
		b.WriteString("import (\n")
		for _, p := range imports {
			fmt.Fprintf(&b, "\t%q\n", p)
		}
		b.WriteString(")\n\n")
	}
	if s.kind == declarations {
		return b.String() + at + code
	}
	b.WriteString("func _() {\n")
	b.WriteString(at + code)
	b.WriteString("}\n")
	return b.String()
}

var qualified = regexp.MustCompile(`\b([a-z][a-z0-9]*)\.[A-Za-z_]`)

// importsOf returns the import paths of the known packages code names.
func importsOf(code string) []string {
	seen := map[string]bool{}
	for _, m := range qualified.FindAllStringSubmatch(code, -1) {
		if p, ok := knownImports[m[1]]; ok {
			seen[p] = true
		}
	}
	var paths []string
	for p := range seen {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	return paths
}

var (
	errorLine = regexp.MustCompile(`^(\S+?\.(?:md|go)):(\d+)(?::\d+)?: (.*)$`)
	unused    = regexp.MustCompile(`declared and not used|imported and not used|"[^"]+" imported as \w+ and not used`)
)

// parse picks the compiler's errors out of go build's output, leaving out
// unused names, with the Markdown file's path relative to root.
func parse(out, dir, root string) []string {
	var errs []string
	keep := false
	for _, l := range strings.Split(out, "\n") {
		if m := errorLine.FindStringSubmatch(l); m != nil {
			keep = !unused.MatchString(m[3])
			if keep {
				errs = append(errs, fmt.Sprintf("%s:%s: %s", shortPath(m[1], dir, root), m[2], m[3]))
			}
			continue
		}
		// The compiler continues a message (have/want) on indented lines.
		if keep && strings.HasPrefix(l, "\t") && len(errs) > 0 {
			errs[len(errs)-1] += "\n" + l
		}
	}
	return errs
}

// shortPath names a file relative to the repository's root when it is in it;
// go build prints a path relative to the directory it ran in when that is
// shorter.
func shortPath(p, dir, root string) string {
	if !filepath.IsAbs(p) {
		p = filepath.Join(dir, p)
	}
	if rel, err := filepath.Rel(root, p); err == nil && !strings.HasPrefix(rel, "..") {
		return rel
	}
	return p
}

// onlyUnused reports whether every error in go build's output is about an
// unused name.
func onlyUnused(out string) bool {
	found := false
	for _, l := range strings.Split(out, "\n") {
		if l == "" || strings.HasPrefix(l, "#") || strings.HasPrefix(l, "\t") {
			continue
		}
		m := errorLine.FindStringSubmatch(l)
		if m == nil || !unused.MatchString(m[3]) {
			return false
		}
		found = true
	}
	return found
}
