package main

import (
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/go-outbox/outbox/bench"
)

func newBenchCommand(g *globalFlags) *cobra.Command {
	var (
		opts    bench.Options
		only    string
		pubs    string
		out     string
		command string
		render  string
		merge   string
	)
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure relay throughput, latency, writer overhead, idle cost and growth",
		Long: `bench runs the benchmarks against PostgreSQL: relay throughput draining a
backlog (with the raw DELETE ceiling and watermill's forwarder as references),
commit-to-publish latency, writer overhead, idle cost and table growth with
retention. Each measurement works in a fresh schema that it drops afterwards.
It prints the result tables (markdown) on stdout, progress on stderr, and
writes --out with SVG charts and the raw results (results.json) next to it;
--render results.json writes the doc again from them.

Use a private server (scripts/bench starts one): the idle and WAL figures
read cluster-wide counters. Steps: ` + strings.Join(bench.Steps, ", ") + `.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if render != "" {
				// Re-render a saved run: no database, no measurement.
				report, err := bench.ReadReport(render)
				if err != nil {
					return err
				}
				fmt.Fprint(cmd.OutOrStdout(), report.Markdown(false))
				if out != "" {
					if err := bench.WriteDoc(out, report); err != nil {
						return fmt.Errorf("write %s: %w", out, err)
					}
				}
				return nil
			}
			if merge != "" && only == "" {
				return usagef("--merge needs --only: the steps to measure again and merge into %s", merge)
			}
			url, err := g.resolveURL()
			if err != nil {
				return err
			}
			opts.DatabaseURL = url
			opts.Progress = cmd.ErrOrStderr()
			if only != "" {
				opts.Only = splitList(only)
			}
			switch pubs {
			case "auto":
				// Every registered broker: a broker whose package builds
				// is measured without naming it.
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
				command = "outbox " + strings.Join(redactArgs(os.Args[1:]), " ")
			}
			report, err := bench.Run(cmd.Context(), opts)
			if report != nil {
				report.Command = command
			}
			if err != nil {
				return err
			}
			fmt.Fprint(cmd.OutOrStdout(), report.Markdown(false))
			if merge != "" {
				base, err := bench.ReadReport(merge)
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
				fmt.Fprintf(cmd.ErrOrStderr(), "bench: wrote %s\n", out)
			}
			return nil
		},
	}
	f := cmd.Flags()
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
	f.StringVar(&merge, "merge", "", "merge the steps of --only into a saved run (results.json) and write the doc from both")
	f.StringVar(&command, "command", "", "the command recorded in the doc (default: this command line)")
	_ = f.MarkHidden("command")
	return cmd
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
		case a == "--database-url":
			i++
		case strings.HasPrefix(a, "--database-url="):
		default:
			out = append(out, a)
		}
	}
	return out
}
