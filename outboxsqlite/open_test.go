package outboxsqlite_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/outboxsqlite"
)

func TestOpenSetsWALFullSyncAndBusyTimeout(t *testing.T) {
	t.Parallel()
	store := openFile(t, outboxsqlite.Options{BusyTimeout: 1234 * 1e6})
	ctx := t.Context()
	// Every connection of the pool, not only the first.
	conns := make([]*sql.Conn, 3)
	for i := range conns {
		c, err := store.DB().Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		conns[i] = c
	}
	for i, c := range conns {
		var mode string
		var sync, busy int
		if err := c.QueryRowContext(ctx, `SELECT (SELECT journal_mode FROM pragma_journal_mode), (SELECT synchronous FROM pragma_synchronous), (SELECT timeout FROM pragma_busy_timeout)`).Scan(&mode, &sync, &busy); err != nil {
			t.Fatal(err)
		}
		if mode != "wal" || sync != 2 || busy != 1234 {
			t.Fatalf("connection %d: journal_mode %s, synchronous %d, busy_timeout %d; want wal, 2 (FULL), 1234", i, mode, sync, busy)
		}
	}
}

// Reading commands must not leave an empty database behind a mistyped path.
func TestOpenMissingFileFailsAndCreatesNothing(t *testing.T) {
	t.Parallel()
	path := dbPath(t)
	_, err := outboxsqlite.Open(t.Context(), path, outboxsqlite.Options{})
	if err == nil || !errors.Is(err, fs.ErrNotExist) || !errors.Is(err, outboxsqlite.ErrNoDatabaseFile) || !strings.Contains(err.Error(), path) ||
		!strings.Contains(err.Error(), "no such database file") || !strings.Contains(err.Error(), "outbox migrate up") {
		t.Fatalf("open of a missing file: %v; want fs.ErrNotExist naming %s and `outbox migrate up`", err, path)
	}
	assertNoFiles(t, filepath.Dir(path))

	s, err := outboxsqlite.Open(t.Context(), path, outboxsqlite.Options{CreateIfMissing: true})
	if err != nil {
		t.Fatalf("open with CreateIfMissing: %v", err)
	}
	_ = s.Close()
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("open with CreateIfMissing did not create %s: %v", path, err)
	}
}

func TestOpenMissingDirectoryNamesIt(t *testing.T) {
	t.Parallel()
	base := t.TempDir()
	dir := filepath.Join(base, "no", "such", "dir")
	_, err := outboxsqlite.Open(t.Context(), filepath.Join(dir, "outbox.db"), outboxsqlite.Options{CreateIfMissing: true})
	if err == nil || !strings.Contains(err.Error(), "directory "+dir+" does not exist") || !strings.Contains(err.Error(), "mkdir -p") ||
		errors.Is(err, outboxsqlite.ErrNoDatabaseFile) {
		t.Fatalf("open in a missing directory: %v; want an error naming %s and the fix", err, dir)
	}
	assertNoFiles(t, base)
}

func TestOpenRejectsWhatIsNotADatabaseFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	garbage := bytes.Repeat([]byte("this is a text file, not a database\n"), 200)
	tests := []struct {
		name    string
		path    string
		content []byte // written first if not nil
		want    string
	}{
		{"empty path", "", nil, "path is empty"},
		{"in-memory database", ":memory:", nil, ":memory:"},
		{"SQLite URI", "file:" + filepath.Join(dir, "x.db") + "?mode=memory", nil, "not an SQLite URI"},
		{"directory", dir, nil, "is a directory"},
		{"text file", filepath.Join(dir, "notes.txt"), garbage, "not an SQLite database"},
		{"short file", filepath.Join(dir, "short.db"), []byte("SQLite"), "not an SQLite database"},
		{"damaged header", filepath.Join(dir, "header.db"), append([]byte("SQLite format 3\x00"), garbage...), "damaged or not an SQLite database"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.content != nil {
				if err := os.WriteFile(tt.path, tt.content, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			for _, create := range []bool{false, true} {
				_, err := outboxsqlite.Open(t.Context(), tt.path, outboxsqlite.Options{CreateIfMissing: create})
				if err == nil || !strings.Contains(err.Error(), tt.want) || (tt.content != nil && !strings.Contains(err.Error(), tt.path)) {
					t.Fatalf("open %q (create %v): %v; want an error saying %q and naming the path", tt.path, create, err, tt.want)
				}
			}
			if tt.content != nil {
				if got, _ := os.ReadFile(tt.path); !bytes.Equal(got, tt.content) {
					t.Fatalf("open changed %s", tt.path)
				}
				for _, suffix := range []string{"-wal", "-shm", "-journal"} {
					if _, err := os.Stat(tt.path + suffix); err == nil {
						t.Fatalf("open left %s%s behind", tt.path, suffix)
					}
				}
			}
		})
	}
}

// A database damaged past its first page opens, and the first query that
// reads the damage says what it is and what to do.
func TestDamagedDatabaseErrorsNameTheFileAndTheFix(t *testing.T) {
	t.Parallel()
	path := dbPath(t)
	store := openMigrated(t, path, outboxsqlite.Options{}, nil)
	w := newWriter(t, store)
	ctx := t.Context()
	msgs := make([]*outbox.Message, 200)
	for i := range msgs {
		msgs[i] = &outbox.Message{Topic: "t", Payload: bytes.Repeat([]byte{'x'}, 500)}
	}
	if err := w.Transact(ctx, func(ctx context.Context, tx *sql.Tx) error { return w.Write(ctx, tx, msgs...) }); err != nil {
		t.Fatal(err)
	}
	if err := store.Close(); err != nil { // checkpoints the WAL into the file
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for i := 4096; i < len(b); i++ { // every page after the first
		b[i] = 0xA5
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	damaged, err := outboxsqlite.Open(ctx, path, outboxsqlite.Options{})
	if err != nil {
		if !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "damaged") {
			t.Fatalf("open of a damaged database: %v; want an error naming %s and the damage", err, path)
		}
		return
	}
	defer damaged.Close()
	_, err = damaged.Stats(ctx)
	if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "restore it from a backup") {
		t.Fatalf("stats of a damaged database: %v; want an error naming %s and the fix", err, path)
	}
}

func TestOpenReadOnlyFileSaysSo(t *testing.T) {
	t.Parallel()
	if os.Geteuid() == 0 {
		t.Skip("root may write to any file; cmd/outbox TestSQLiteStatusOnReadOnlyFile runs the CLI as nobody instead")
	}
	path := dbPath(t)
	s := openMigrated(t, path, outboxsqlite.Options{}, nil)
	_ = s.Close()
	if err := os.Chmod(path, 0o444); err != nil {
		t.Fatal(err)
	}
	_, err := outboxsqlite.Open(t.Context(), path, outboxsqlite.Options{})
	if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "not writable") {
		t.Fatalf("open of a read-only file: %v; want an error naming %s and saying it is not writable", err, path)
	}
}

// A file without the table opens (the migrator needs that), and the store's
// calls say to migrate.
func TestMissingTableSaysToMigrate(t *testing.T) {
	t.Parallel()
	store := openFile(t, outboxsqlite.Options{})
	_, err := store.Stats(context.Background())
	if err == nil || !strings.Contains(err.Error(), "outbox migrate up") || !strings.Contains(err.Error(), outboxsqlite.Path(store)) {
		t.Fatalf("stats without the table: %v; want an error saying to run outbox migrate up", err)
	}
}

func assertNoFiles(t *testing.T, dir string) {
	t.Helper()
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			t.Errorf("file %s was created", p)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}
