package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/pgtest"
	"github.com/go-outbox/outbox/outboxpg"
	"github.com/go-outbox/outbox/outboxsqlite"
)

// applyFunc applies a message through consumer "billing"'s inbox; with
// outgoing, its handler writes a message to the outbox.
type applyFunc func(t *testing.T, id uuid.UUID, outgoing bool)

// testInboxCommands runs `outbox inbox migrate|status|purge` against a
// migrated outbox table (db: the database flags) whose inbox table apply
// opens once `inbox migrate` made it.
func testInboxCommands(t *testing.T, db []string, apply func(t *testing.T) applyFunc) {
	with := func(args ...string) []string { return append(append([]string{}, args...), db...) }
	if out := mustCLI(t, with("inbox", "migrate")...); !strings.Contains(out, "is ready") {
		t.Fatalf("inbox migrate printed %q", out)
	}
	mustCLI(t, with("inbox", "migrate")...) // idempotent
	if out := mustCLI(t, with("inbox", "status")...); !strings.Contains(out, "no records") {
		t.Fatalf("inbox status of an empty table printed %q", out)
	}
	a := apply(t)
	quiet, busy := uuid.Must(uuid.NewV7()), uuid.Must(uuid.NewV7())
	a(t, quiet, false)
	a(t, busy, true)
	a(t, quiet, false) // delivered again: a duplicate, skipped and counted

	var st struct {
		Consumers []struct {
			Consumer         string `json:"consumer"`
			Records          int64  `json:"records"`
			AwaitingOutgoing int64  `json:"awaiting_outgoing"`
			Duplicates       int64  `json:"duplicates"`
		} `json:"consumers"`
	}
	if err := json.Unmarshal([]byte(mustCLI(t, with("inbox", "status", "--json")...)), &st); err != nil ||
		len(st.Consumers) != 1 || st.Consumers[0].Consumer != "billing" || st.Consumers[0].Records != 2 || st.Consumers[0].AwaitingOutgoing != 1 || st.Consumers[0].Duplicates != 1 {
		t.Fatalf("inbox status --json: %+v, %v; want billing with 2 records, 1 awaiting its outgoing message, 1 duplicate", st, err)
	}
	if out := mustCLI(t, with("inbox", "status")...); !strings.Contains(out, "billing") {
		t.Fatalf("inbox status printed %q; want the consumer's row", out)
	}
	// Every record is older than 0s, but the one whose outgoing message is
	// pending stays.
	if out := mustCLI(t, with("inbox", "purge", "--retention", "0s", "--batch", "1")...); !strings.Contains(out, "deleted 1 records") {
		t.Fatalf("inbox purge printed %q; want 1 record deleted", out)
	}
	if code, _, errOut := cli(t, with("inbox", "purge", "--retention", "-1h")...); code != 2 || !strings.Contains(errOut, "--retention") {
		t.Fatalf("inbox purge --retention -1h: exit %d, %q; want a usage error naming the flag", code, errOut)
	}
}

func TestInboxCommandsOnPostgreSQL(t *testing.T) {
	t.Parallel()
	schema := pgtest.Schema(t)
	db := []string{"--database-url", pgtest.URL(t), "--schema", schema}
	mustCLI(t, append([]string{"migrate", "up"}, db...)...)
	testInboxCommands(t, db, func(t *testing.T) applyFunc {
		pool := pgtest.Pool(t)
		store, err := outboxpg.New(pool, outboxpg.Options{Schema: schema})
		if err != nil {
			t.Fatal(err)
		}
		table, err := outboxpg.NewInboxTable(pool, outboxpg.InboxOptions{Schema: schema})
		if err != nil {
			t.Fatal(err)
		}
		return inboxApplier(t, table, store)
	})
}

func TestInboxCommandsOnSQLite(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "app.db")
	db := []string{"--database-url", "sqlite://" + path}
	mustCLI(t, append([]string{"migrate", "up"}, db...)...)
	testInboxCommands(t, db, func(t *testing.T) applyFunc {
		store, err := outboxsqlite.Open(t.Context(), path, outboxsqlite.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = store.Close() })
		table, err := outboxsqlite.NewInboxTable(store, "")
		if err != nil {
			t.Fatal(err)
		}
		return inboxApplier(t, table, store)
	})
}

// inboxApplier returns an applyFunc over an inbox table and the outbox
// table beside it.
func inboxApplier[TTx any](t *testing.T, table outbox.InboxStore[TTx], store outbox.Inserter[TTx]) applyFunc {
	in, err := outbox.NewInbox(table, "billing")
	if err != nil {
		t.Fatal(err)
	}
	w, err := outbox.NewWriter(store, outbox.WriterConfig{})
	if err != nil {
		t.Fatal(err)
	}
	return func(t *testing.T, id uuid.UUID, outgoing bool) {
		_, err := in.Handle(t.Context(), id, func(ctx context.Context, tx TTx) error {
			if !outgoing {
				return nil
			}
			return w.Write(ctx, tx, &outbox.Message{Topic: "invoices.sent", Payload: []byte("{}")})
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}

var (
	_ outbox.InboxStore[pgx.Tx]  = (*outboxpg.InboxTable)(nil)
	_ outbox.InboxStore[*sql.Tx] = (*outboxsqlite.InboxTable)(nil)
)

// --watch-wal is PostgreSQL's: on SQLite it is a usage error that says so.
func TestWatchWALOnSQLiteIsAUsageError(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "app.db")
	mustCLI(t, "migrate", "up", "--database-url", "sqlite://"+path)
	code, _, errOut := cli(t, "relay", "--watch-wal", "--database-url", "sqlite://"+path)
	if code != 2 || !strings.Contains(errOut, "--watch-wal is for PostgreSQL") {
		t.Fatalf("relay --watch-wal on SQLite: exit %d, %q; want 2 naming the flag", code, errOut)
	}
}

// `outbox inbox purge --schemas PATTERN` purges the inbox table of every
// matching schema and leaves the others alone.
func TestInboxPurgeAcrossTheSchemasAPatternMatches(t *testing.T) {
	t.Parallel()
	url, pool, prefix := pgtest.URL(t), pgtest.Pool(t), pgtest.Schema(t)
	withRecord := func(schema string) {
		t.Helper()
		db := []string{"--database-url", url, "--schema", schema}
		mustCLI(t, append([]string{"migrate", "up"}, db...)...)
		mustCLI(t, append([]string{"inbox", "migrate"}, db...)...)
		store, err := outboxpg.New(pool, outboxpg.Options{Schema: schema})
		if err != nil {
			t.Fatal(err)
		}
		table, err := outboxpg.NewInboxTable(pool, outboxpg.InboxOptions{Schema: schema})
		if err != nil {
			t.Fatal(err)
		}
		inboxApplier(t, table, store)(t, uuid.Must(uuid.NewV7()), false)
	}
	for _, name := range []string{"a", "b"} {
		schema := prefix + "_" + name
		t.Cleanup(func() { dropSchema(t, schema) })
		withRecord(schema)
	}
	other := pgtest.Schema(t)
	withRecord(other)

	out := mustCLI(t, "inbox", "purge", "--database-url", url, "--schemas", prefix+"_*", "--retention", "0s")
	for _, want := range []string{
		"deleted 1 records of " + prefix + "_a.processed_messages", "deleted 1 records of " + prefix + "_b.processed_messages",
		"deleted 2 records of 2 inbox tables",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("inbox purge --schemas printed %q; want %q", out, want)
		}
	}
	var st struct {
		Consumers []struct{ Records int64 } `json:"consumers"`
	}
	if err := json.Unmarshal([]byte(mustCLI(t, "inbox", "status", "--json", "--database-url", url, "--schema", other)), &st); err != nil ||
		len(st.Consumers) != 1 || st.Consumers[0].Records != 1 {
		t.Errorf("the inbox of %s, which the pattern does not match: %+v, %v; want its record kept", other, st, err)
	}
	for _, tc := range []struct{ args, want string }{
		{"--schemas=" + prefix + "_zz*", "no schema matching it has an inbox table"},
		{"--schemas=Tenant_*", "lower-case letters"},
		{"--schema=" + other, "leave out --schema"},
	} {
		args := []string{"inbox", "purge", "--database-url", url, tc.args}
		if !strings.HasPrefix(tc.args, "--schemas") {
			args = append(args, "--schemas", prefix+"_*")
		}
		code, _, stderr := cli(t, args...)
		if code != 2 || !strings.Contains(stderr, tc.want) {
			t.Errorf("inbox purge %s: exit %d, stderr %q; want exit 2 saying %q", tc.args, code, stderr, tc.want)
		}
	}
}
