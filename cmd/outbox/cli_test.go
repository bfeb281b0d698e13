package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/go-outbox/outbox/internal/pgtest"
	"github.com/go-outbox/outbox/outboxdriver"
	"github.com/go-outbox/outbox/outboxpg"
)

// cli runs the command in-process and returns its exit code and output.
func cli(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	code = run(ctx, args, &out, &errOut)
	return code, out.String(), errOut.String()
}

func mustCLI(t *testing.T, args ...string) string {
	t.Helper()
	code, out, errOut := cli(t, args...)
	if code != 0 {
		t.Fatalf("outbox %s: exit %d, stderr %q", strings.Join(args, " "), code, errOut)
	}
	return out
}

func TestCLIMigrateSendStatusAndDeadLetters(t *testing.T) {
	t.Parallel()
	url, schema := pgtest.URL(t), pgtest.Schema(t)
	db := []string{"--database-url", url, "--schema", schema}
	with := func(args ...string) []string { return append(append([]string{}, args...), db...) }

	if out := mustCLI(t, with("migrate", "up")...); !strings.Contains(out, "applied migration(s) 1") {
		t.Fatalf("migrate up printed %q, want the applied version", out)
	}
	if out := mustCLI(t, with("migrate", "up")...); !strings.Contains(out, "nothing to do") {
		t.Fatalf("second migrate up printed %q, want nothing to do", out)
	}
	if out := mustCLI(t, with("migrate", "list")...); !strings.Contains(out, "001") || !strings.Contains(out, "create_outbox") {
		t.Fatalf("migrate list printed %q", out)
	}

	idText := strings.TrimSpace(mustCLI(t, with("send", "--topic", "orders.created", "--key", "o-1", "--header", "content-type=application/json", "--payload", `{"id":1}`)...))
	id, err := uuid.Parse(idText)
	if err != nil {
		t.Fatalf("send printed %q, want a message id", idText)
	}
	var st struct {
		Pending int64 `json:"pending"`
		Dead    int64 `json:"dead"`
	}
	if err := json.Unmarshal([]byte(mustCLI(t, with("status", "--json")...)), &st); err != nil || st.Pending != 1 {
		t.Fatalf("status --json after send: %+v, %v; want 1 pending", st, err)
	}

	// Dead-letter the message through the store, as a relay would.
	store, err := outboxpg.New(pgtest.Pool(t), outboxpg.Options{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	token := uuid.New()
	claimed, err := store.SettleAndClaim(ctx, outboxdriver.Settlement{}, outboxdriver.Claim{Limit: 10, Lease: time.Minute, Token: token})
	if err != nil || len(claimed) != 1 || claimed[0].ID != id {
		t.Fatalf("claim = %v, %v; want the sent message %s", claimed, err, id)
	}
	if claimed[0].Topic != "orders.created" || claimed[0].Key != "o-1" || claimed[0].Headers["content-type"] != "application/json" || string(claimed[0].Payload) != `{"id":1}` {
		t.Fatalf("sent message stored as %+v, fields lost", claimed[0])
	}
	if _, err := store.SettleAndClaim(ctx, outboxdriver.Settlement{Token: token, Dead: []outboxdriver.Failure{{ID: id, Error: "unknown event type"}}}, outboxdriver.Claim{}); err != nil {
		t.Fatal(err)
	}

	if out := mustCLI(t, with("dead", "list")...); !strings.Contains(out, id.String()) || !strings.Contains(out, "unknown event type") {
		t.Fatalf("dead list printed %q, want the message and its error", out)
	}
	var shown map[string]any
	if err := json.Unmarshal([]byte(mustCLI(t, with("dead", "show", id.String())...)), &shown); err != nil || shown["status"] != "dead" || shown["last_error"] != "unknown event type" {
		t.Fatalf("dead show: %v, %v", shown, err)
	}
	if out := mustCLI(t, with("dead", "retry", id.String())...); !strings.Contains(out, "1 message(s) pending again") {
		t.Fatalf("dead retry printed %q", out)
	}
	if code, _, errOut := cli(t, with("dead", "retry", id.String())...); code != 1 || !strings.Contains(errOut, "matched no dead message") {
		t.Fatalf("retrying a message that is not dead: exit %d, %q; want exit 1 saying so", code, errOut)
	}
	// Dead again, then discarded.
	token = uuid.New()
	if _, err := store.SettleAndClaim(ctx, outboxdriver.Settlement{}, outboxdriver.Claim{Limit: 10, Lease: time.Minute, Token: token}); err != nil {
		t.Fatal(err)
	}
	if _, err := store.SettleAndClaim(ctx, outboxdriver.Settlement{Token: token, Dead: []outboxdriver.Failure{{ID: id, Error: "again"}}}, outboxdriver.Claim{}); err != nil {
		t.Fatal(err)
	}
	if out := mustCLI(t, with("dead", "discard", id.String())...); !strings.Contains(out, "1 message(s) discarded") {
		t.Fatalf("dead discard printed %q", out)
	}
	if err := json.Unmarshal([]byte(mustCLI(t, with("status", "--json")...)), &st); err != nil || st.Pending != 0 || st.Dead != 0 {
		t.Fatalf("status after discard: %+v, %v; want empty", st, err)
	}
	// One step: the latest migration of the backend's own numbering.
	if out := mustCLI(t, with("migrate", "down")...); !regexp.MustCompile(`reverted migration\(s\) [0-9]+\n$`).MatchString(out) {
		t.Fatalf("migrate down printed %q; want one migration reverted", out)
	}
}

func TestCLIErrorsAreOneLineWithTheFixAndNoPassword(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		args     []string
		code     int
		contains string
	}{
		{"no database", []string{"status"}, 2, "pass --database-url or set DATABASE_URL"},
		{"unknown scheme", []string{"status", "--database-url", "sqlserver://u:pw@h/db"}, 2, `scheme "sqlserver" is not supported`},
		{"unreachable server keeps the password secret", []string{"status", "--database-url", "postgres://u:s3cr3t-pw@127.0.0.1:1/db?connect_timeout=2"}, 1, "connect to PostgreSQL"},
		{"bad table name", []string{"migrate", "sql", "--table", "Robert'); DROP TABLE students;--"}, 1, "outboxpg.Options.Table"},
		{"bad migrate sql direction", []string{"migrate", "sql", "sideways"}, 2, "use up or down"},
		{"bad message id", []string{"dead", "show", "not-a-uuid", "--database-url", "postgres://x@127.0.0.1:1/db"}, 2, "is not a message id"},
		{"retry needs ids or --all", []string{"dead", "retry", "--database-url", "postgres://x@127.0.0.1:1/db"}, 2, "--all"},
		{"send needs a payload", []string{"send", "--topic", "t", "--database-url", "postgres://x@127.0.0.1:1/db"}, 2, "--payload"},
		{"bad header", []string{"send", "--topic", "t", "--payload", "x", "--header", "novalue", "--database-url", "postgres://x@127.0.0.1:1/db"}, 2, "name=value"},
		{"unknown publisher", []string{"relay", "--publisher", "carrier-pigeon://coop", "--database-url", "postgres://x@127.0.0.1:1/db"}, 2, "unknown scheme"},
		{"invalid relay config names the flag", []string{"relay", "--batch-size", "-5", "--database-url", "postgres://x@127.0.0.1:1/db"}, 2, "--batch-size -5: use 1 to 10000"},
		{"relay intervals out of order", []string{"relay", "--poll-interval", "5ms", "--database-url", "postgres://x@127.0.0.1:1/db"}, 2, "--active-poll-interval 10ms: must be at most --poll-interval (5ms)"},
		{"negative shutdown timeout", []string{"relay", "--shutdown-timeout", "-1s", "--database-url", "postgres://x@127.0.0.1:1/db"}, 2, "--shutdown-timeout -1s"},
		{"unknown flag", []string{"status", "--frobnicate"}, 2, "unknown flag"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			code, _, errOut := cli(t, tt.args...)
			if code != tt.code || !strings.Contains(errOut, tt.contains) {
				t.Fatalf("exit %d, stderr %q; want exit %d and %q", code, errOut, tt.code, tt.contains)
			}
			if strings.Count(strings.TrimSpace(errOut), "\n") != 0 {
				t.Fatalf("stderr %q is not one line", errOut)
			}
			if strings.Contains(errOut, "s3cr3t-pw") {
				t.Fatalf("stderr %q shows the password", errOut)
			}
		})
	}
}

func TestMigrateSQLPrintsTheSchemaWithoutADatabase(t *testing.T) {
	t.Parallel()
	up := mustCLI(t, "migrate", "sql", "--schema", "app", "--table", "events_outbox")
	if !strings.Contains(up, `CREATE TABLE "app"."events_outbox"`) {
		t.Fatalf("migrate sql printed:\n%s\nwant the CREATE TABLE with the given names", up)
	}
	down := mustCLI(t, "migrate", "sql", "down", "--schema", "app", "--table", "events_outbox")
	if !strings.Contains(down, `DROP TABLE`) {
		t.Fatalf("migrate sql down printed:\n%s", down)
	}
}

func TestRedactRemovesPasswordsFromURLsAndKeyValueStrings(t *testing.T) {
	rememberSecret("postgres://app:pa%24%24word@db:5432/x")
	for _, in := range []string{
		"dial postgres://app:pa$$word@db:5432/x failed",
		"dial postgres://app:pa%24%24word@db:5432/x failed",
		"host=db password=pa$$word user=app",
	} {
		if out := redact(in); strings.Contains(out, "pa$$word") || strings.Contains(out, "pa%24%24word") {
			t.Errorf("redact(%q) = %q, still shows the password", in, out)
		}
	}
}

func TestMigrateSQLSpeaksTheDialectOfTheDatabaseURL(t *testing.T) {
	t.Parallel()
	out := mustCLI(t, "migrate", "sql", "--database-url", "sqlite:app.db", "--table", "events_outbox")
	if !strings.Contains(out, "CREATE TABLE") || strings.Contains(out, "jsonb") || strings.Contains(out, "CREATE SCHEMA") {
		t.Fatalf("migrate sql for sqlite: printed:\n%s\nwant SQLite DDL", out)
	}
}

func TestURLSchemeNeverReturnsMoreThanTheScheme(t *testing.T) {
	t.Parallel()
	for raw, want := range map[string]string{
		"postgres://u:p@h/db":             "postgres",
		"POSTGRESQL://h/db":               "postgresql",
		"sqlite:relative.db":              "sqlite",
		"sqlite:///abs/app.db":            "sqlite",
		"host=h password=secret:1 user=u": "",
		"":                                "",
		"no-colon":                        "",
	} {
		if got := urlScheme(raw); got != want {
			t.Errorf("urlScheme(%q) = %q, want %q", raw, got, want)
		}
	}
}

// Every command that uses the table says, when the table is missing or at an
// older migration, that `outbox migrate up` is the fix, and exits 1, instead
// of printing the database's error about a missing table (or, for the relay,
// logging a failed claim every poll for as long as it runs).
func TestCommandsOnATableNotMigratedNameMigrateUp(t *testing.T) {
	t.Parallel()
	pgSchema := pgtest.Schema(t)
	m, err := outboxpg.NewMigrator(pgtest.Pool(t), outboxpg.Options{Schema: pgSchema, Table: "outdated"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.To(t.Context(), 2); err != nil {
		t.Fatal(err)
	}
	sqliteURL := "sqlite://" + filepath.Join(t.TempDir(), "app.db")
	mustCLI(t, "migrate", "up", "--database-url", sqliteURL, "--table", "other")
	databases := map[string][]string{
		"postgres, no table":    {"--database-url", pgtest.URL(t), "--schema", pgSchema},
		"postgres, migration 2": {"--database-url", pgtest.URL(t), "--schema", pgSchema, "--table", "outdated"},
		"sqlite, no table":      {"--database-url", sqliteURL},
		"sqlite, no file":       {"--database-url", "sqlite://" + filepath.Join(t.TempDir(), "missing.db")},
	}
	commands := [][]string{
		{"status"},
		{"dead", "list"},
		{"dead", "retry", "--all"},
		{"send", "--topic", "t", "--payload", "x"},
		{"relay"},
	}
	for name, db := range databases {
		for _, c := range commands {
			t.Run(name+"/"+strings.Join(c, " "), func(t *testing.T) {
				t.Parallel()
				code, _, errOut := cli(t, append(slices.Clone(c), db...)...)
				if code != 1 || !strings.Contains(errOut, "outbox migrate up") {
					t.Fatalf("exit %d, stderr %q; want exit 1 and the fix `outbox migrate up`", code, errOut)
				}
			})
		}
	}
}

// A library logging through slog's default after the command returned (as
// go-redis does from its own goroutines) must not write into the caller's
// stderr, which the caller may be reading by then.
func TestRunStopsWritingToItsStderrWhenItReturns(t *testing.T) {
	prev := slog.Default()
	t.Cleanup(func() { slog.SetDefault(prev) })
	var stderr bytes.Buffer
	db := "sqlite:" + filepath.Join(t.TempDir(), "app.db")
	if code := run(context.Background(), []string{"migrate", "up", "--database-url", db}, io.Discard, &stderr); code != 0 {
		t.Fatalf("outbox migrate up: exit %d, stderr %q", code, stderr.String())
	}
	before := stderr.Len()
	slog.Warn("a line logged after the command returned")
	if stderr.Len() != before {
		t.Fatalf("a line logged through slog's default after run returned reached the caller's stderr: %q", stderr.String()[before:])
	}
}
