package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/clitest"
	"github.com/go-outbox/outbox/outboxdriver"
	"github.com/go-outbox/outbox/outboxsqlite"
)

// sqliteProcessDB returns a migrated table in a new SQLite file.
func sqliteProcessDB(t *testing.T) processDB {
	t.Helper()
	path := filepath.Join(t.TempDir(), "outbox.db")
	store, err := outboxsqlite.Open(t.Context(), path, outboxsqlite.Options{CreateIfMissing: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	m, err := outboxsqlite.NewMigrator(store.DB(), outboxsqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Up(t.Context()); err != nil {
		t.Fatal(err)
	}
	writer, err := outbox.NewWriter(store, outbox.WriterConfig{})
	if err != nil {
		t.Fatal(err)
	}
	return processDB{
		url: "sqlite://" + path, // path is absolute: sqlite:///tmp/...
		write: func(ctx context.Context, msgs []*outbox.Message) error {
			return writer.Transact(ctx, func(ctx context.Context, tx *sql.Tx) error { return writer.Write(ctx, tx, msgs...) })
		},
		stats: store.Stats,
		store: store,
	}
}

func TestSQLiteRelayProcessKilledMidRunLosesNothing(t *testing.T) {
	t.Parallel()
	testRelayProcessKilledMidRunLosesNothing(t, sqliteProcessDB(t))
}

// Two relay processes share one SQLite file while this process writes to it:
// every message is published, and none twice (nothing crashes, so nothing may
// be repeated). The relays poll once a minute: the write watcher wakes them.
func TestSQLiteTwoRelayProcessesPublishEveryMessageOnce(t *testing.T) {
	t.Parallel()
	bin, err := buildCLI()
	if err != nil {
		t.Fatal(err)
	}
	db := sqliteProcessDB(t)
	ctx := context.Background()
	const (
		total  = 10000
		perTx  = 20
		relays = 2
	)
	outputs := make([]string, relays)
	cmds := make([]*exec.Cmd, relays)
	for i := range relays {
		outputs[i] = filepath.Join(t.TempDir(), fmt.Sprintf("relay%d.jsonl", i))
		out, err := os.Create(outputs[i])
		if err != nil {
			t.Fatal(err)
		}
		defer out.Close()
		cmds[i] = startRelayProcess(t, bin, db, out, "--batch-size", "100", "--workers", "2",
			"--poll-interval", "1m", "--active-poll-interval", "1m", "--log-level", "warn")
	}

	start := time.Now()
	ids := make([]uuid.UUID, 0, total)
	for i := 0; i < total; i += perTx {
		msgs := make([]*outbox.Message, perTx)
		for j := range msgs {
			msgs[j] = &outbox.Message{Topic: "two", Key: strconv.Itoa(j % 5), Payload: fmt.Appendf(nil, `{"n":%d}`, i+j)}
		}
		if err := db.write(ctx, msgs); err != nil {
			t.Fatalf("write: %v", err)
		}
		for _, m := range msgs {
			ids = append(ids, m.ID)
		}
	}
	wrote := time.Since(start)
	waitUntil(t, 2*time.Minute, "the table to drain", func() bool {
		st, err := db.stats(ctx)
		return err == nil && st.Pending == 0
	})
	drained := time.Since(start)
	for _, c := range cmds {
		_ = c.Process.Signal(syscall.SIGTERM)
	}
	for i, c := range cmds {
		if err := c.Wait(); err != nil {
			t.Errorf("relay %d exited with %v after SIGTERM; want 0", i, err)
		}
	}

	counts := map[uuid.UUID]int{}
	for i, p := range outputs {
		got := clitest.Published(t, p)
		if len(got) == 0 {
			t.Errorf("relay %d published nothing; want both relays to share the work", i)
		}
		t.Logf("relay %d published %d messages", i, len(got))
		for id, n := range got {
			counts[id] += n
		}
	}
	for _, id := range ids {
		if n := counts[id]; n != 1 {
			t.Errorf("message %s was published %d times; want exactly once", id, n)
		}
	}
	if len(counts) != total {
		t.Errorf("published %d distinct messages; want the %d committed", len(counts), total)
	}
	t.Logf("%d messages in %d transactions written in %v, all published by %v (%.0f msg/s)", total, total/perTx, wrote.Round(time.Millisecond),
		drained.Round(time.Millisecond), total/drained.Seconds())
}

// The CLI on an SQLite file, both URL forms, every command.
func TestSQLiteCLIMigrateSendStatusAndDeadLetters(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "app.db")
	abs := []string{"--database-url", "sqlite://" + path, "--table", "events"}
	with := func(args ...string) []string { return append(append([]string{}, args...), abs...) }

	if out := mustCLI(t, with("migrate", "up")...); !strings.Contains(out, "main.events: applied migration(s) 1") {
		t.Fatalf("migrate up printed %q, want the applied version", out)
	}
	if out := mustCLI(t, with("migrate", "up")...); !strings.Contains(out, "nothing to do") {
		t.Fatalf("second migrate up printed %q, want nothing to do", out)
	}
	if out := mustCLI(t, with("migrate", "list")...); !strings.Contains(out, "001") || !strings.Contains(out, "create_outbox") || strings.Contains(out, " no") {
		t.Fatalf("migrate list printed %q, want 001 create_outbox applied", out)
	}
	idText := strings.TrimSpace(mustCLI(t, with("send", "--topic", "orders.created", "--key", "o-1", "--payload", `{"id":1}`)...))
	id, err := uuid.Parse(idText)
	if err != nil {
		t.Fatalf("send printed %q, want a message id", idText)
	}
	if out := mustCLI(t, with("status")...); !strings.Contains(out, "pending         1") || !strings.Contains(out, "main.events") {
		t.Fatalf("status printed %q, want 1 pending in main.events", out)
	}

	// Dead-letter it as a relay would, then manage it with the CLI.
	store, err := outboxsqlite.Open(t.Context(), path, outboxsqlite.Options{Table: "events"})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	token := uuid.New()
	if got, err := store.SettleAndClaim(t.Context(), outboxdriver.Settlement{}, outboxdriver.Claim{Limit: 10, Lease: time.Minute, Token: token}); err != nil || len(got) != 1 {
		t.Fatalf("claim: %v, %v", got, err)
	}
	if _, err := store.SettleAndClaim(t.Context(), outboxdriver.Settlement{Token: token, Dead: []outboxdriver.Failure{{ID: id, Error: "unknown event type"}}}, outboxdriver.Claim{}); err != nil {
		t.Fatal(err)
	}
	if out := mustCLI(t, with("dead", "list")...); !strings.Contains(out, id.String()) || !strings.Contains(out, "unknown event type") {
		t.Fatalf("dead list printed %q, want %s and its error", out, id)
	}
	if out := mustCLI(t, with("dead", "show", id.String())...); !strings.Contains(out, `"status": "dead"`) {
		t.Fatalf("dead show printed %q", out)
	}
	if out := mustCLI(t, with("dead", "retry", id.String())...); !strings.Contains(out, "1 message(s) pending again") {
		t.Fatalf("dead retry printed %q", out)
	}

	// A relay process, with the relative URL form, publishes the message.
	bin, err := buildCLI()
	if err != nil {
		t.Fatal(err)
	}
	relay := exec.Command(bin, "relay", "--database-url", "sqlite:app.db", "--table", "events", "--log-level", "warn")
	relay.Dir = dir
	var out strings.Builder
	relay.Stdout = &out
	if err := relay.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = relay.Process.Kill(); _ = relay.Wait() }()
	waitUntil(t, 30*time.Second, "the relay to publish the retried message", func() bool {
		st, err := store.Stats(t.Context())
		return err == nil && st.Pending == 0
	})
	_ = relay.Process.Signal(syscall.SIGTERM)
	if err := relay.Wait(); err != nil {
		t.Fatalf("relay: %v", err)
	}
	if !strings.Contains(out.String(), id.String()) {
		t.Fatalf("relay printed %q, want message %s", out.String(), id)
	}

	if out := mustCLI(t, with("migrate", "down")...); !regexp.MustCompile(`reverted migration\(s\) [0-9]+\n$`).MatchString(out) {
		t.Fatalf("migrate down printed %q", out)
	}
}

// Commands other than `migrate up` never create a database file, and every
// mistake is one line that names the file or URL and the fix.
func TestSQLiteCLIErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing.db")
	notDB := filepath.Join(dir, "notes.txt")
	if err := os.WriteFile(notDB, []byte("not a database\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		args []string
		code int
		want []string
	}{
		{"status on a missing file", []string{"status", "--database-url", "sqlite://" + missing}, 1,
			[]string{"no such database file " + missing, "outbox migrate up"}},
		{"dead list on a missing file", []string{"dead", "list", "--database-url", "sqlite://" + missing}, 1, []string{"no such database file"}},
		{"send to a missing file", []string{"send", "--topic", "t", "--payload", "x", "--database-url", "sqlite://" + missing}, 1, []string{"no such database file"}},
		{"migrate list on a missing file", []string{"migrate", "list", "--database-url", "sqlite://" + missing}, 1, []string{"no such database file"}},
		{"missing directory", []string{"migrate", "up", "--database-url", "sqlite://" + filepath.Join(dir, "nope", "app.db")}, 1,
			[]string{"directory " + filepath.Join(dir, "nope") + " does not exist", "mkdir -p"}},
		{"not a database", []string{"status", "--database-url", "sqlite://" + notDB}, 1, []string{notDB, "not an SQLite database"}},
		{"a host in the URL", []string{"status", "--database-url", "sqlite://app.db"}, 2, []string{`names the host "app.db"`, "sqlite:///absolute"}},
		{"parameters in the URL", []string{"status", "--database-url", "sqlite:app.db?mode=ro"}, 2, []string{"take no parameters"}},
		{"no file in the URL", []string{"status", "--database-url", "sqlite:"}, 2, []string{"names no file"}},
		{"a schema", []string{"status", "--database-url", "sqlite://" + missing, "--schema", "billing"}, 2, []string{"no schemas"}},
		{"an invalid table", []string{"status", "--database-url", "sqlite://" + missing, "--table", "Bad-Name"}, 1, []string{"Options.Table", "Bad-Name"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, stdout, stderr := cli(t, tt.args...)
			if code != tt.code || stdout != "" || strings.Count(strings.TrimSpace(stderr), "\n") != 0 {
				t.Fatalf("outbox %s: exit %d, stdout %q, stderr %q; want exit %d and one line on stderr", strings.Join(tt.args, " "), code, stdout, stderr, tt.code)
			}
			for _, w := range tt.want {
				if !strings.Contains(stderr, w) {
					t.Fatalf("outbox %s: stderr %q; want it to contain %q", strings.Join(tt.args, " "), stderr, w)
				}
			}
		})
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[0].Name() != "notes.txt" {
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Fatalf("the failed commands left %v in %s; want only notes.txt", names, dir)
	}
}

// A file the process may not write fails at once with the fix. Root may
// write anything, so as root the command runs as nobody.
func TestSQLiteStatusOnReadOnlyFile(t *testing.T) {
	t.Parallel()
	bin, err := buildCLI()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "app.db")
	mustCLI(t, "migrate", "up", "--database-url", "sqlite://"+path)

	cmd := exec.Command(bin, "status", "--database-url", "sqlite://"+path)
	if os.Geteuid() == 0 {
		// nobody must reach the binary and the file, and may write neither.
		shared := filepath.Join(filepath.Dir(dir), "bin")
		for _, d := range []string{filepath.Dir(dir), dir} {
			if err := os.Chmod(d, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.Mkdir(shared, 0o755); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(bin)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(shared, "outbox"), b, 0o755); err != nil {
			t.Fatal(err)
		}
		cmd.Path = filepath.Join(shared, "outbox")
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	} else {
		if err := os.Chmod(path, 0o444); err != nil {
			t.Fatal(err)
		}
	}
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 || !strings.Contains(string(out), path) || !strings.Contains(string(out), "not writable") {
		t.Fatalf("status on a read-only file: %v, output %q; want exit 1 naming %s and saying it is not writable", err, out, path)
	}
}
