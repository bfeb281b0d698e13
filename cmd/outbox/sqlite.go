package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/outboxdriver"
	"github.com/go-outbox/outbox/outboxsqlite"
)

// SQLite database URLs name a local file:
//
//	sqlite:///var/lib/app/app.db    absolute path (three slashes)
//	sqlite:data/app.db              relative to the working directory
//
// Only `migrate up` creates a missing file. The other commands fail with an
// error that says to run it; a relay started before the file exists logs
// that error and starts working once `migrate up` has run.

// shownURL quotes raw for an error message, unless it holds user
// information, which may be a password that redaction cannot recognise in a
// URL that does not parse.
func shownURL(raw string) string {
	if strings.Contains(raw, "@") {
		return "(not shown: it holds user information)"
	}
	return strconv.Quote(raw)
}

// sqlitePath returns the file a sqlite: URL names.
func sqlitePath(raw string) (string, error) {
	const forms = "use sqlite:///absolute/path/app.db (three slashes) or sqlite:relative/path/app.db"
	u, err := url.Parse(raw)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // url.Error quotes the whole URL
		}
		return "", usagef("database URL %s cannot be parsed (%v); %s", shownURL(raw), err, forms)
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return "", usagef("database URL %s: SQLite URLs take no parameters; %s", shownURL(raw), forms)
	}
	path := u.Path
	switch {
	case u.Opaque != "":
		if path, err = url.PathUnescape(u.Opaque); err != nil {
			return "", usagef("database URL %s: %v; %s", shownURL(raw), err, forms)
		}
	case u.Host != "":
		return "", usagef("database URL %s names the host %q, but an SQLite database is a local file; %s", shownURL(raw), u.Host, forms)
	}
	if path == "" {
		return "", usagef("database URL %s names no file; %s", shownURL(raw), forms)
	}
	return path, nil
}

func (g *globalFlags) openSQLite(ctx context.Context, raw string, mode storeMode) (*backend, error) {
	path, err := sqlitePath(raw)
	if err != nil {
		return nil, err
	}
	if g.schema != "" {
		return nil, usagef("--schema %q: SQLite databases have no schemas; leave --schema out (--table names the table in the file)", g.schema)
	}
	if mode.watchWAL {
		return nil, usagef("--watch-wal is for PostgreSQL; an SQLite relay learns of writes to its file by itself")
	}
	if mode.txLeases {
		return nil, usagef("--transaction-leases is for PostgreSQL; SQLite has one writer, which a transaction held open would block")
	}
	opts := outboxsqlite.Options{Table: g.table, OrderByKey: mode.orderByKey, SkipDeadInKeyOrder: mode.skipDead}
	names, err := outboxsqlite.New(&sql.DB{}, opts) // validates --table; touches no database
	if err != nil {
		return nil, err
	}
	db := &sqliteDB{name: names.Name(), path: path, opts: opts}
	// Open now, so that a damaged or unwritable file fails every command at
	// once; only a missing file waits for `migrate up`.
	if _, err := db.open(ctx, false); err != nil && !errors.Is(err, outboxsqlite.ErrNoDatabaseFile) {
		return nil, err
	}
	return &backend{store: db, admin: db, migrator: db, send: db.send, inbox: db.inbox, close: db.close}, nil
}

// sqliteDB opens the database file when first needed: `migrate up` creates
// it, every other command needs it to exist.
type sqliteDB struct {
	name string
	opts outboxsqlite.Options
	path string

	mu    sync.Mutex
	store *outboxsqlite.Store
}

// The interfaces sqliteDB passes through from the store.
var (
	_ outboxdriver.Store           = (*sqliteDB)(nil)
	_ outboxdriver.Admin           = (*sqliteDB)(nil)
	_ outboxdriver.WriteListener   = (*sqliteDB)(nil)
	_ outboxdriver.SchemaChecker   = (*sqliteDB)(nil)
	_ outboxdriver.RelayRegistry   = (*sqliteDB)(nil)
	_ outboxdriver.StuckKeyFinder  = (*sqliteDB)(nil)
	_ outboxdriver.AttemptRecorder = (*sqliteDB)(nil)
	_ outboxdriver.Replayer        = (*sqliteDB)(nil)
	_ outboxdriver.TopicPauser     = (*sqliteDB)(nil)
	_ migrator                     = (*sqliteDB)(nil)
)

func (d *sqliteDB) open(ctx context.Context, create bool) (*outboxsqlite.Store, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.store != nil {
		return d.store, nil
	}
	opts := d.opts
	opts.CreateIfMissing = create
	s, err := outboxsqlite.Open(ctx, d.path, opts)
	if err != nil {
		return nil, err
	}
	d.store = s
	return s, nil
}

// inbox opens the inbox table named table in the database file, which must
// exist.
func (d *sqliteDB) inbox(ctx context.Context, table string) (inboxTable, error) {
	s, err := d.get(ctx)
	if err != nil {
		return nil, err
	}
	return outboxsqlite.NewInboxTable(s, table)
}

func (d *sqliteDB) get(ctx context.Context) (*outboxsqlite.Store, error) { return d.open(ctx, false) }

// withStore calls fn with the store, opened on first use: the methods
// below pass each call through to it.
func withStore[T any](ctx context.Context, d *sqliteDB, fn func(*outboxsqlite.Store) (T, error)) (T, error) {
	s, err := d.get(ctx)
	if err != nil {
		var zero T
		return zero, err
	}
	return fn(s)
}

// withStore0 is withStore for calls that return only an error.
func withStore0(ctx context.Context, d *sqliteDB, fn func(*outboxsqlite.Store) error) error {
	_, err := withStore(ctx, d, func(s *outboxsqlite.Store) (struct{}, error) { return struct{}{}, fn(s) })
	return err
}

func (d *sqliteDB) close() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.store != nil {
		_ = d.store.Close()
	}
}

func (d *sqliteDB) send(ctx context.Context, msgs ...*outbox.Message) error {
	s, err := d.get(ctx)
	if err != nil {
		return err
	}
	w, err := outbox.NewWriter[*sql.Tx](s, outbox.WriterConfig{})
	if err != nil {
		return err
	}
	// Relays in other processes see the commit through their write watcher.
	return w.Transact(ctx, func(ctx context.Context, tx *sql.Tx) error { return w.Write(ctx, tx, msgs...) })
}

func (d *sqliteDB) Name() string { return d.name }

func (d *sqliteDB) SettleAndClaim(ctx context.Context, settle outboxdriver.Settlement, claim outboxdriver.Claim) ([]outbox.Message, error) {
	return withStore(ctx, d, func(s *outboxsqlite.Store) ([]outbox.Message, error) { return s.SettleAndClaim(ctx, settle, claim) })
}

func (d *sqliteDB) Release(ctx context.Context, token uuid.UUID, ids []uuid.UUID) error {
	return withStore0(ctx, d, func(s *outboxsqlite.Store) error { return s.Release(ctx, token, ids) })
}

func (d *sqliteDB) NextDue(ctx context.Context) (time.Duration, bool, error) {
	s, err := d.get(ctx)
	if err != nil {
		return 0, false, err
	}
	return s.NextDue(ctx)
}

func (d *sqliteDB) PurgePublished(ctx context.Context, olderThan time.Duration, limit int) (int, error) {
	return withStore(ctx, d, func(s *outboxsqlite.Store) (int, error) { return s.PurgePublished(ctx, olderThan, limit) })
}

// CheckSchema says a missing file is a table not migrated yet, like a
// missing table in an existing file.
func (d *sqliteDB) CheckSchema(ctx context.Context) error {
	s, err := d.get(ctx)
	if errors.Is(err, outboxsqlite.ErrNoDatabaseFile) {
		return fmt.Errorf("%w: %w; run `outbox migrate up` to create it", outboxdriver.ErrNotMigrated, err)
	}
	if err != nil {
		return err
	}
	return s.CheckSchema(ctx)
}

// ListenForWrites waits for the file to exist, then watches it.
func (d *sqliteDB) ListenForWrites(ctx context.Context, wake func()) error {
	for {
		s, err := d.get(ctx)
		if err == nil {
			return s.ListenForWrites(ctx, wake)
		}
		t := time.NewTimer(time.Second)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

func (d *sqliteDB) Stats(ctx context.Context) (outboxdriver.Stats, error) {
	return withStore(ctx, d, func(s *outboxsqlite.Store) (outboxdriver.Stats, error) { return s.Stats(ctx) })
}

func (d *sqliteDB) RecordAttempts(ctx context.Context, attempts []outboxdriver.Attempt) error {
	return withStore0(ctx, d, func(s *outboxsqlite.Store) error { return s.RecordAttempts(ctx, attempts) })
}

func (d *sqliteDB) Attempts(ctx context.Context, id uuid.UUID) ([]outboxdriver.Attempt, error) {
	return withStore(ctx, d, func(s *outboxsqlite.Store) ([]outboxdriver.Attempt, error) { return s.Attempts(ctx, id) })
}

func (d *sqliteDB) ForgetAttempts(ctx context.Context, ids []uuid.UUID) error {
	return withStore0(ctx, d, func(s *outboxsqlite.Store) error { return s.ForgetAttempts(ctx, ids) })
}

func (d *sqliteDB) LastFailures(ctx context.Context, ids []uuid.UUID) (map[uuid.UUID]time.Time, error) {
	return withStore(ctx, d, func(s *outboxsqlite.Store) (map[uuid.UUID]time.Time, error) { return s.LastFailures(ctx, ids) })
}

func (d *sqliteDB) PurgeAttempts(ctx context.Context, limit int) (int, error) {
	return withStore(ctx, d, func(s *outboxsqlite.Store) (int, error) { return s.PurgeAttempts(ctx, limit) })
}

func (d *sqliteDB) Replay(ctx context.Context, f outboxdriver.ReplayFilter, limit int, dryRun bool) (int, error) {
	return withStore(ctx, d, func(s *outboxsqlite.Store) (int, error) { return s.Replay(ctx, f, limit, dryRun) })
}

func (d *sqliteDB) PauseTopic(ctx context.Context, topic, by, reason string) (int, error) {
	return withStore(ctx, d, func(s *outboxsqlite.Store) (int, error) { return s.PauseTopic(ctx, topic, by, reason) })
}

func (d *sqliteDB) ResumeTopic(ctx context.Context, topic string) (int, error) {
	return withStore(ctx, d, func(s *outboxsqlite.Store) (int, error) { return s.ResumeTopic(ctx, topic) })
}

func (d *sqliteDB) MoveBackUnpaused(ctx context.Context) (int, error) {
	return withStore(ctx, d, func(s *outboxsqlite.Store) (int, error) { return s.MoveBackUnpaused(ctx) })
}

func (d *sqliteDB) PausedTopics(ctx context.Context) ([]outboxdriver.PausedTopic, error) {
	return withStore(ctx, d, func(s *outboxsqlite.Store) ([]outboxdriver.PausedTopic, error) { return s.PausedTopics(ctx) })
}

func (d *sqliteDB) PausedTopicNames(ctx context.Context) ([]string, error) {
	return withStore(ctx, d, func(s *outboxsqlite.Store) ([]string, error) { return s.PausedTopicNames(ctx) })
}

func (d *sqliteDB) PausedAmong(ctx context.Context, topics []string) ([]string, error) {
	return withStore(ctx, d, func(s *outboxsqlite.Store) ([]string, error) { return s.PausedAmong(ctx, topics) })
}

func (d *sqliteDB) StuckKeys(ctx context.Context, olderThan time.Duration, limit int) ([]outboxdriver.StuckKey, int, error) {
	s, err := d.get(ctx)
	if err != nil {
		return nil, 0, err
	}
	return s.StuckKeys(ctx, olderThan, limit)
}

func (d *sqliteDB) BeatRelay(ctx context.Context, beat outboxdriver.RelayBeat) error {
	return withStore0(ctx, d, func(s *outboxsqlite.Store) error { return s.BeatRelay(ctx, beat) })
}

func (d *sqliteDB) RemoveRelay(ctx context.Context, id uuid.UUID) error {
	return withStore0(ctx, d, func(s *outboxsqlite.Store) error { return s.RemoveRelay(ctx, id) })
}

func (d *sqliteDB) Relays(ctx context.Context) ([]outboxdriver.RelayRow, time.Time, error) {
	s, err := d.get(ctx)
	if err != nil {
		return nil, time.Time{}, err
	}
	return s.Relays(ctx)
}

func (d *sqliteDB) Get(ctx context.Context, id uuid.UUID) (outbox.Message, error) {
	return withStore(ctx, d, func(s *outboxsqlite.Store) (outbox.Message, error) { return s.Get(ctx, id) })
}

func (d *sqliteDB) ListDead(ctx context.Context, after uuid.UUID, limit int) ([]outbox.Message, error) {
	return withStore(ctx, d, func(s *outboxsqlite.Store) ([]outbox.Message, error) { return s.ListDead(ctx, after, limit) })
}

func (d *sqliteDB) RetryDead(ctx context.Context, ids ...uuid.UUID) (int, error) {
	return withStore(ctx, d, func(s *outboxsqlite.Store) (int, error) { return s.RetryDead(ctx, ids...) })
}

func (d *sqliteDB) RetryAllDead(ctx context.Context) (int, error) {
	return withStore(ctx, d, func(s *outboxsqlite.Store) (int, error) { return s.RetryAllDead(ctx) })
}

func (d *sqliteDB) DiscardDead(ctx context.Context, ids ...uuid.UUID) (int, error) {
	return withStore(ctx, d, func(s *outboxsqlite.Store) (int, error) { return s.DiscardDead(ctx, ids...) })
}

// Up creates the database file if it is missing, then the table.
func (d *sqliteDB) Up(ctx context.Context) ([]int, error) {
	m, err := d.migrator(ctx, true)
	if err != nil {
		return nil, err
	}
	return m.Up(ctx)
}

func (d *sqliteDB) Down(ctx context.Context, steps int) ([]int, error) {
	m, err := d.migrator(ctx, false)
	if err != nil {
		return nil, err
	}
	return m.Down(ctx, steps)
}

func (d *sqliteDB) List(ctx context.Context) ([]migrationStatus, error) {
	m, err := d.migrator(ctx, false)
	if err != nil {
		return nil, err
	}
	all, err := m.List(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]migrationStatus, len(all))
	for i, s := range all {
		out[i] = migrationStatus{Version: s.Version, Name: s.Name, Applied: s.Applied, AppliedAt: s.AppliedAt}
	}
	return out, nil
}

func (d *sqliteDB) migrator(ctx context.Context, create bool) (*outboxsqlite.Migrator, error) {
	s, err := d.open(ctx, create)
	if err != nil {
		return nil, err
	}
	return outboxsqlite.NewMigrator(s.DB(), d.opts)
}
