package outboxsqlite

import (
	"bytes"
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"modernc.org/sqlite"
)

// maxOpenConns bounds the connections of a *sql.DB made by Open. SQLite runs
// one write transaction at a time whatever the number, and readers in WAL
// mode do not block; beyond a few connections, more only cost memory (each
// has its own page cache).
const maxOpenConns = 8

// ErrNoDatabaseFile is wrapped by the error of Open for a database file that
// does not exist (in a directory that does), when Options.CreateIfMissing is
// not set. errors.Is(ErrNoDatabaseFile, fs.ErrNotExist) holds too.
var ErrNoDatabaseFile error = noDatabaseFile{}

type noDatabaseFile struct{}

func (noDatabaseFile) Error() string        { return "no such database file" }
func (noDatabaseFile) Is(target error) bool { return target == fs.ErrNotExist }

// sqliteHeader starts every SQLite database file.
var sqliteHeader = []byte("SQLite format 3\x00")

// Open opens the SQLite database file at path and returns a Store for the
// table opts names; Close closes it. It does not create the table: run a
// Migrator on Store.DB first.
//
// A missing file is an error unless Options.CreateIfMissing is set, so that
// reading commands (outbox status) never leave an empty database behind a
// mistyped path. The directory must exist either way. Open fails with an
// error naming the path and the fix when the file is not an SQLite database,
// is damaged at its start, is not writable by this process, or is on a
// file system without the shared memory WAL mode needs; if it created the
// file, it removes it again.
//
// Every connection is set up with:
//
//   - journal_mode=WAL (stored in the file): readers never block the writer
//     or each other, so relays probing and operators reading do not slow the
//     application's commits.
//   - busy_timeout=Options.BusyTimeout (5 s): a writer waits this long for
//     another to finish instead of failing at once.
//   - synchronous=FULL: each commit reaches the disk before it returns. In
//     WAL mode NORMAL syncs only at checkpoints, so on power loss the last
//     commits can vanish after a relay read and published them: a message
//     published for a transaction that, in the end, did not happen. FULL
//     costs one fsync per commit (about 0.35 ms here: some 2,800 commits/s
//     from 8 writers instead of 19,000).
//   - _txlock=immediate: every read-write transaction of the *sql.DB,
//     RunInTx's and the application's, starts with BEGIN IMMEDIATE, which
//     takes the write lock before the first read, so a transaction that
//     reads and then writes never fails for lack of a lock it could have
//     waited for. Read-only transactions (sql.TxOptions.ReadOnly) stay
//     deferred.
func Open(ctx context.Context, path string, opts Options) (*Store, error) {
	return openWith(ctx, path, opts, nil)
}

// openWith is Open with wrap, if not nil, applied to the driver's connector
// (tests count statements with it).
func openWith(ctx context.Context, path string, opts Options, wrap func(driver.Connector) driver.Connector) (*Store, error) {
	set, err := opts.resolve()
	if err != nil {
		return nil, err
	}
	abs, existed, err := checkPath(path, set.createIfMissing)
	if err != nil {
		return nil, err
	}
	q := url.Values{}
	q.Set("mode", "rw") // never create the file, whatever happened since checkPath
	if set.createIfMissing {
		q.Set("mode", "rwc")
	}
	q.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", set.busyTimeout.Milliseconds()))
	q.Add("_pragma", "synchronous(FULL)")
	q.Set("_txlock", "immediate")
	dsn := (&url.URL{Scheme: "file", Path: abs, RawQuery: q.Encode()}).String()
	connector, err := sqlite.NewConnector(dsn)
	if err != nil {
		return nil, fmt.Errorf("outboxsqlite: open %s: %w", abs, err)
	}
	if wrap != nil {
		connector = wrap(connector)
	}
	db := sql.OpenDB(connector)
	db.SetMaxOpenConns(maxOpenConns)
	db.SetMaxIdleConns(maxOpenConns)
	if err := setUp(ctx, db, abs, set.busyTimeout); err != nil {
		_ = db.Close()
		if !existed {
			// Leave nothing behind that was not there before.
			for _, p := range []string{abs, abs + "-wal", abs + "-shm", abs + "-journal"} {
				_ = os.Remove(p)
			}
		}
		return nil, err
	}
	return newStore(db, set, abs, true), nil
}

// checkPath turns path into an absolute one and checks what can be checked
// before SQLite opens it, for errors that say what to do. existed reports
// whether the file was there.
func checkPath(path string, create bool) (abs string, existed bool, err error) {
	switch {
	case path == "":
		return "", false, errors.New("outboxsqlite: open: the database path is empty; pass the path of the database file, e.g. /var/lib/app/outbox.db")
	case path == ":memory:" || strings.HasPrefix(path, "file:"):
		return "", false, fmt.Errorf("outboxsqlite: open %q: pass the path of a database file, not an SQLite URI or :memory: (an in-memory database belongs to one connection, and writers and relays need several; in tests, use a file in t.TempDir())", path)
	}
	abs, err = filepath.Abs(path)
	if err != nil {
		return "", false, fmt.Errorf("outboxsqlite: open %s: %w", path, err)
	}
	dir := filepath.Dir(abs)
	switch fi, err := os.Stat(dir); {
	case errors.Is(err, fs.ErrNotExist):
		return "", false, fmt.Errorf("outboxsqlite: open %s: the directory %s does not exist; create it (mkdir -p %s) or fix the path", abs, dir, dir)
	case err != nil:
		return "", false, fmt.Errorf("outboxsqlite: open %s: %w", abs, err)
	case !fi.IsDir():
		return "", false, fmt.Errorf("outboxsqlite: open %s: %s is not a directory; fix the path", abs, dir)
	}
	fi, err := os.Stat(abs)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if create {
			return abs, false, nil
		}
		return "", false, fmt.Errorf("outboxsqlite: %w %s; run `outbox migrate up` first to create it (or open it with Options.CreateIfMissing and run Migrator.Up), or fix the path",
			ErrNoDatabaseFile, abs)
	case err != nil:
		return "", false, fmt.Errorf("outboxsqlite: open %s: %w", abs, err)
	case fi.IsDir():
		return "", false, fmt.Errorf("outboxsqlite: open %s: it is a directory, not a database file; name a file in it, e.g. %s", abs, filepath.Join(abs, "outbox.db"))
	}
	f, err := os.OpenFile(abs, os.O_RDWR, 0)
	if err != nil {
		if errors.Is(err, fs.ErrPermission) {
			return "", false, fmt.Errorf("outboxsqlite: the database file %s is not writable by this process; writers, relays and even `outbox status` (WAL mode) need write access to it and its directory: fix the owner or permissions: %w", abs, err)
		}
		return "", false, fmt.Errorf("outboxsqlite: open %s: %w", abs, err)
	}
	defer f.Close()
	head := make([]byte, len(sqliteHeader))
	n, err := io.ReadFull(f, head)
	switch {
	case n == 0 && (err == io.EOF || err == nil):
		// An empty file is an empty database.
	case err != nil && !errors.Is(err, io.ErrUnexpectedEOF):
		return "", false, fmt.Errorf("outboxsqlite: read %s: %w", abs, err)
	case !bytes.Equal(head[:n], sqliteHeader):
		return "", false, fmt.Errorf("outboxsqlite: %s is not an SQLite database (it does not start with the SQLite header); check the path, and if it is a damaged outbox database, restore it from a backup", abs)
	}
	return abs, true, nil
}

// setUp checks that SQLite can read the file and write to it, and switches it
// to WAL mode.
func setUp(ctx context.Context, db *sql.DB, path string, busyTimeout time.Duration) error {
	c, err := db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("outboxsqlite: open %s: %w", path, explain(err, path))
	}
	defer c.Close()
	// Reading the schema reads the header and the first page.
	var tables int
	if err := c.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_schema`).Scan(&tables); err != nil {
		return fmt.Errorf("outboxsqlite: open %s: %w", path, explain(err, path))
	}
	err = c.Raw(func(dc any) error {
		ro, ok := dc.(interface{ IsReadOnly(string) (bool, error) })
		if !ok {
			return nil
		}
		readOnly, err := ro.IsReadOnly("main")
		if err == nil && readOnly {
			return fmt.Errorf("outboxsqlite: SQLite opened %s read-only; writers, relays and even `outbox status` (WAL mode) need write access to it and its directory: fix the owner or permissions", path)
		}
		return err
	})
	if err != nil {
		return err
	}
	// Switching to WAL needs the file to itself for a moment, and SQLite
	// answers "database is locked" at once, without its busy_timeout, when
	// another connection reads it: processes that open a new file together
	// try again. Once in WAL mode (stored in the file), the pragma only reads.
	var mode string
	deadline := time.Now().Add(busyTimeout)
	for {
		err := c.QueryRowContext(ctx, `PRAGMA journal_mode = WAL`).Scan(&mode)
		if err == nil {
			break
		}
		if !isBusy(err) || !time.Now().Before(deadline) {
			return fmt.Errorf("outboxsqlite: switch %s to WAL mode: %w", path, explain(err, path))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("outboxsqlite: switch %s to WAL mode: %w", path, ctx.Err())
		case <-time.After(time.Millisecond):
		}
	}
	if !strings.EqualFold(mode, "wal") {
		return fmt.Errorf("outboxsqlite: %s stayed in journal mode %q instead of WAL; WAL needs shared memory, which network file systems lack: keep the database on a local disk", path, mode)
	}
	return nil
}
