// Command outbox-bench is the load tool behind scripts/bench: it measures relay
// throughput (with the raw DELETE ceiling and watermill's forwarder as
// references), commit-to-publish latency, writer overhead, idle cost and table
// growth against PostgreSQL, and writes docs/benchmarks.md. It lives in the
// bench module, apart from the outbox CLI, so that the CLI binary links neither
// the benchmarks nor watermill.
//
//	go run ./bench/cmd/outbox-bench --database-url postgres://... [--only drain,latency]
//
// Use a private server (scripts/bench starts one): the idle and WAL figures
// read cluster-wide counters. Each measurement works in a fresh schema that it
// drops afterwards. Result tables (markdown) go to stdout, progress to stderr.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"

	"github.com/go-outbox/outbox/bench"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	switch {
	case errors.Is(err, flag.ErrHelp):
		os.Exit(0)
	case errors.As(err, new(usageError)):
		fmt.Fprintln(os.Stderr, "outbox-bench:", err)
		os.Exit(2)
	case err != nil:
		fmt.Fprintln(os.Stderr, "outbox-bench:", err)
		os.Exit(1)
	}
}

// usageError is a mistake on the command line (exit code 2).
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var (
		opts                                             bench.Options
		url, only, pubs, out, command, render, mergeFile string
	)
	f := flag.NewFlagSet("outbox-bench", flag.ContinueOnError)
	f.SetOutput(stderr)
	f.StringVar(&url, "database-url", os.Getenv("DATABASE_URL"), "PostgreSQL URL of a private server (default $DATABASE_URL)")
	f.IntVar(&opts.Backlog, "backlog", 100_000, "messages each drain publishes")
	f.IntVar(&opts.Growth, "growth", 1_000_000, "messages the growth run writes")
	f.IntVar(&opts.GrowthRate, "growth-rate", 10_000, "growth run's write rate in msgs/s (-1: as fast as possible)")
	f.StringVar(&only, "only", "", "comma-separated steps to run (default all): "+strings.Join(bench.Steps, ","))
	f.StringVar(&out, "out", "docs/benchmarks.md", "markdown file to write, with SVG charts in a folder named after it (empty: none)")
	f.StringVar(&pubs, "publishers", "auto", "broker publishers for the brokers step, comma-separated ("+strings.Join(bench.Publishers(), ", ")+"); auto: every registered one")
	f.IntVar(&opts.Repeats, "repeats", 3, "runs of each throughput measurement (the median is reported)")
	f.IntVar(&opts.PayloadBytes, "payload-size", 256, "payload bytes per message")
	f.DurationVar(&opts.LatencyDuration, "latency-duration", 0, "how long each latency measurement writes (default 10s)")
	f.DurationVar(&opts.IdleDuration, "idle-duration", 0, "idle measurement window (default 20s)")
	f.DurationVar(&opts.WriterDuration, "writer-duration", 0, "each concurrent-writers run (default 4s)")
	f.IntVar(&opts.WriterTransactions, "writer-transactions", 0, "transactions of each kind for the writer overhead (default 2000)")
	f.StringVar(&render, "render", "", "render the doc again from a saved run (the results.json written next to --out), without measuring")
	f.StringVar(&mergeFile, "merge", "", "merge the steps of --only into a saved run (results.json) and write the doc from both")
	f.StringVar(&command, "command", "", "the command recorded in the doc (default: this command line)")
	if err := f.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageError{err.Error()}
	}
	if f.NArg() > 0 {
		return usageError{fmt.Sprintf("unexpected argument %q; every option is a flag (--help lists them)", f.Arg(0))}
	}

	if render != "" {
		// Re-render a saved run: no database, no measurement.
		report, err := bench.ReadReport(render)
		if err != nil {
			return err
		}
		fmt.Fprint(stdout, report.Markdown(false))
		if out != "" {
			if err := bench.WriteDoc(out, report); err != nil {
				return fmt.Errorf("write %s: %w", out, err)
			}
		}
		return nil
	}
	if mergeFile != "" && only == "" {
		return usageError{fmt.Sprintf("--merge needs --only: the steps to measure again and merge into %s", mergeFile)}
	}
	if url == "" {
		return usageError{"no database: pass --database-url or set DATABASE_URL to a private PostgreSQL server (scripts/bench starts one)"}
	}
	opts.DatabaseURL = url
	opts.Progress = stderr
	if only != "" {
		opts.Only = splitList(only)
	}
	switch pubs {
	case "auto":
		// Every registered broker: a broker whose package builds is
		// measured without naming it.
		for _, p := range bench.Publishers() {
			if p != "noop" {
				opts.Publishers = append(opts.Publishers, p)
			}
		}
	case "":
	default:
		opts.Publishers = slices.DeleteFunc(splitList(pubs), func(p string) bool { return p == "noop" })
	}
	if command == "" {
		command = "outbox-bench " + strings.Join(redactArgs(args), " ")
	}
	report, err := bench.Run(ctx, opts)
	if report != nil {
		report.Command = command
	}
	if err != nil {
		return err
	}
	fmt.Fprint(stdout, report.Markdown(false))
	if mergeFile != "" {
		base, err := bench.ReadReport(mergeFile)
		if err != nil {
			return err
		}
		base.Merge(report, opts.Only)
		report = base
	}
	if out != "" {
		if err := bench.WriteDoc(out, report); err != nil {
			return fmt.Errorf("write %s: %w", out, err)
		}
		fmt.Fprintf(stderr, "outbox-bench: wrote %s\n", out)
	}
	return nil
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// redactArgs drops the database URL from a recorded command line.
func redactArgs(args []string) []string {
	var out []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--database-url" || a == "-database-url":
			i++
		case strings.HasPrefix(a, "--database-url=") || strings.HasPrefix(a, "-database-url="):
		default:
			out = append(out, a)
		}
	}
	return out
}
