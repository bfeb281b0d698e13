// Command outbox operates transactional outbox tables: it migrates the schema,
// runs a relay, shows status, manages dead letters and sends messages by hand.
//
// Every command takes the database from --database-url or DATABASE_URL.
// Errors are printed as one line on stderr with a non-zero exit code; database
// passwords never appear in output.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"

	"github.com/spf13/cobra"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// run executes the CLI with args and returns the process exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	// The command sets slog's default logger, which writes to stderr, and
	// libraries (go-redis, the publishers' start checks) log through the
	// default from their own goroutines. Detaching stderr when run returns
	// keeps a late line from writing into a caller's buffer the caller is
	// already reading, as the in-process tests do with many runs at once.
	errOut := &detachingWriter{w: stderr}
	defer errOut.detach()
	stderr = errOut
	root := newRootCommand(stdout, stderr)
	root.SetArgs(args)
	if err := root.ExecuteContext(ctx); err != nil {
		// One line, whatever the error: drivers like to add indented details.
		msg := redact(strings.Join(strings.Fields(strings.ReplaceAll(err.Error(), "\n", "; ")), " "))
		if !strings.HasPrefix(msg, "outbox") {
			msg = "outbox: " + msg
		}
		fmt.Fprintln(stderr, msg)
		var ue usageError
		if errors.As(err, &ue) {
			return 2
		}
		return 1
	}
	return 0
}

// detachingWriter serialises writes to w until detach, and drops them after.
type detachingWriter struct {
	mu sync.Mutex
	w  io.Writer // nil once detached
}

func (d *detachingWriter) Write(p []byte) (int, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.w == nil {
		return len(p), nil
	}
	return d.w.Write(p)
}

func (d *detachingWriter) detach() {
	d.mu.Lock()
	d.w = nil
	d.mu.Unlock()
}

// usageError marks errors in how the command was called (exit code 2).
type usageError struct{ error }

func usagef(format string, args ...any) error { return usageError{fmt.Errorf(format, args...)} }

// globalFlags are the flags every command shares.
type globalFlags struct {
	databaseURL string
	schema      string
	table       string
	logLevel    string
	logFormat   string
	// logger is the one every command logs through, made from --log-level
	// and --log-format before the command runs; slog.Default is set to it
	// too, for the stores and publishers.
	logger *slog.Logger
}

func newRootCommand(stdout, stderr io.Writer) *cobra.Command {
	g := &globalFlags{}
	root := &cobra.Command{
		Use:   "outbox",
		Short: "Operate transactional outbox tables",
		Long: "outbox migrates outbox tables, relays their messages to a publisher, shows their status and manages dead letters.\n\n" +
			"The database URL (--database-url or DATABASE_URL) is one of:\n" +
			"  postgres://user:password@host:5432/db?sslmode=disable\n" +
			"  sqlite:///absolute/path/app.db or sqlite:relative/app.db\n" +
			"  mysql://user:password@host:3306/db?param=value (MySQL or MariaDB; the port defaults to 3306)\n" +
			"A mysql:// URL's query parameters are go-sql-driver/mysql's DSN parameters (tls, timeout, charset, ...);\n" +
			"it sets parseTime=true and interpolateParams=true unless the URL names them.",
		SilenceErrors: true,
		SilenceUsage:  true,
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error { return usageError{err} })
	pf := root.PersistentFlags()
	pf.StringVar(&g.databaseURL, "database-url", "", "database URL: postgres://user@host:5432/db, sqlite:///path/app.db or mysql://user@host:3306/db (default $DATABASE_URL)")
	pf.StringVar(&g.schema, "schema", "", "schema of the outbox table (default public)")
	pf.StringVar(&g.table, "table", "", "name of the outbox table (default outbox)")
	pf.StringVar(&g.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	pf.StringVar(&g.logFormat, "log-format", "text", "log format: text (key=value) or json")
	root.PersistentPreRunE = func(cmd *cobra.Command, _ []string) error {
		logger, err := newLogger(g.logLevel, g.logFormat, cmd.ErrOrStderr())
		if err != nil {
			return err
		}
		g.logger = logger
		slog.SetDefault(logger)
		return nil
	}
	root.AddCommand(
		newMigrateCommand(g),
		newRelayCommand(g),
		newStatusCommand(g),
		newDeadCommand(g),
		newInboxCommand(g),
		newSendCommand(g),
		newReplayCommand(g),
		newPauseCommand(g),
		newResumeCommand(g),
		newPausedCommand(g),
		newConsoleCommand(g),
		newDemoCommand(),
		newTopologyCommand(),
	)
	return root
}
