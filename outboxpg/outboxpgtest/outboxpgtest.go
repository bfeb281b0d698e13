// Package outboxpgtest gives an application's tests a throwaway PostgreSQL
// database each, with the outbox table (and, if asked, the inbox table)
// migrated: the first database a process asks for makes a template database
// once, and each test's database is a copy of it (CREATE DATABASE ...
// TEMPLATE), dropped when the test ends. With outboxtest, its Database
// reads what a transaction wrote and drains the table with a relay.
//
// The server comes from the environment variable Config.URLEnv names
// (TEST_DATABASE_URL by default); the role needs the CREATEDB privilege.
// Without it the test is skipped, or fails when CI is "true", so that a CI
// set-up that lost its database cannot pass by skipping.
package outboxpgtest

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/outboxpg"
	"github.com/go-outbox/outbox/outboxtest"
)

// URLEnvDefault is Config.URLEnv when empty.
const URLEnvDefault = "TEST_DATABASE_URL"

// MaxConnsDefault is Config.MaxConns when zero.
const MaxConnsDefault = 10

// setupTimeout bounds making a template or a database, and dropping one.
const setupTimeout = time.Minute

// Config says where and what to make. The zero value migrates
// public.outbox on the server of TEST_DATABASE_URL.
type Config struct {
	// Inbox, if set, makes the inbox table it names too (Database.Inbox).
	Inbox *outboxpg.InboxOptions
	// MaxConns bounds the pool of each database. Default MaxConnsDefault.
	MaxConns int32
	// Options names the outbox table and sets the Store's options.
	Options outboxpg.Options
	// Setup, if set, runs on each new database after the outbox's tables
	// are there: the application's own migrations, typically.
	Setup func(ctx context.Context, pool *pgxpool.Pool) error
	// URLEnv names the environment variable holding the server's URL.
	// Default URLEnvDefault. The database in the URL is where the
	// databases are made from; it is left alone.
	URLEnv string
}

// Database is a test's own database.
type Database struct {
	// Inbox is the inbox table, if Config.Inbox asked for one.
	Inbox *outboxpg.InboxTable
	// Name is the database's name on the server.
	Name string
	// Options are Config.Options, for a Writer's or another Store's use.
	Options outboxpg.Options
	// Pool is connected to the database; it is closed when the test ends.
	Pool *pgxpool.Pool
	// Store is the outbox table's store, made with Options.
	Store *outboxpg.Store
}

// NewDatabase makes a database for t with the outbox migrated, drops it
// when t ends (after closing its pool), and returns it.
func NewDatabase(t testing.TB, cfg Config) *Database {
	t.Helper()
	env := cfg.URLEnv
	if env == "" {
		env = URLEnvDefault
	}
	url := os.Getenv(env)
	if url == "" {
		if os.Getenv("CI") == "true" {
			t.Fatalf("outboxpgtest: %s is not set; CI must provide a PostgreSQL server for this test", env)
		}
		t.Skipf("outboxpgtest: %s is not set; set it to a PostgreSQL URL such as postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable to run this test", env)
	}
	poolCfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		// The error may quote the URL and its password.
		t.Fatalf("outboxpgtest: %s is not a PostgreSQL URL", env)
	}
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	srv, err := serverFor(ctx, url, poolCfg)
	if err != nil {
		t.Fatalf("outboxpgtest: %v", err)
	}
	tpl, err := srv.template(ctx, cfg)
	if err != nil {
		t.Fatalf("outboxpgtest: %v", err)
	}
	name := "outboxtest_" + randomHex(8)
	if err := srv.execRetrying(ctx, `CREATE DATABASE `+pgx.Identifier{name}.Sanitize()+` TEMPLATE `+pgx.Identifier{tpl}.Sanitize()); err != nil {
		t.Fatalf("outboxpgtest: create database %s from template %s: %v", name, tpl, err)
	}
	db := &Database{Name: name, Options: cfg.Options}
	t.Cleanup(func() {
		if db.Pool != nil {
			db.Pool.Close()
		}
		ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
		defer cancel()
		if _, err := srv.admin.Exec(ctx, `DROP DATABASE IF EXISTS `+pgx.Identifier{name}.Sanitize()+` WITH (FORCE)`); err != nil {
			t.Errorf("outboxpgtest: drop database %s: %v", name, err)
		}
	})
	dbCfg := poolCfg.Copy()
	dbCfg.ConnConfig.Database = name
	dbCfg.MaxConns = cfg.MaxConns
	if dbCfg.MaxConns <= 0 {
		dbCfg.MaxConns = MaxConnsDefault
	}
	if db.Pool, err = pgxpool.NewWithConfig(ctx, dbCfg); err != nil {
		t.Fatalf("outboxpgtest: connect to database %s: %v", name, err)
	}
	// The template holds the migrations of the release that made it; a
	// newer one's are applied here, which costs a query when there are
	// none.
	if err := migrate(ctx, db.Pool, cfg); err != nil {
		t.Fatalf("outboxpgtest: database %s: %v", name, err)
	}
	if db.Store, err = outboxpg.New(db.Pool, cfg.Options); err != nil {
		t.Fatalf("outboxpgtest: %v", err)
	}
	if cfg.Inbox != nil {
		if db.Inbox, err = outboxpg.NewInboxTable(db.Pool, *cfg.Inbox); err != nil {
			t.Fatalf("outboxpgtest: %v", err)
		}
	}
	if cfg.Setup != nil {
		if err := cfg.Setup(ctx, db.Pool); err != nil {
			t.Fatalf("outboxpgtest: Config.Setup on database %s: %v", name, err)
		}
	}
	return db
}

// Pending returns the outbox table's pending messages, oldest first: it
// makes a Database an outboxtest.Table.
func (d *Database) Pending(ctx context.Context) ([]outbox.Message, error) {
	return pending(ctx, d.Pool, d.Store)
}

// Table returns an outboxtest.Table for store's table on pool, for a
// database the test did not get from NewDatabase, or a second table.
func Table(pool *pgxpool.Pool, store *outboxpg.Store) outboxtest.Table {
	return table{pool: pool, store: store}
}

type table struct {
	pool  *pgxpool.Pool
	store *outboxpg.Store
}

func (tb table) Pending(ctx context.Context) ([]outbox.Message, error) {
	return pending(ctx, tb.pool, tb.store)
}

// pending reads the ids of the pending messages and then each message
// through the store, which knows how its rows decode.
func pending(ctx context.Context, pool *pgxpool.Pool, store *outboxpg.Store) ([]outbox.Message, error) {
	// Store.Name is schema.table of validated identifiers, unquoted.
	q := `SELECT id FROM ` + quoteName(store.Name()) + ` WHERE status = 'pending' ORDER BY id`
	rows, err := pool.Query(ctx, q)
	if err != nil {
		return nil, fmt.Errorf("list the pending messages of %s: %w", store.Name(), err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[[16]byte])
	if err != nil {
		return nil, fmt.Errorf("list the pending messages of %s: %w", store.Name(), err)
	}
	msgs := make([]outbox.Message, 0, len(ids))
	for _, id := range ids {
		m, err := store.Get(ctx, id)
		if errors.Is(err, outbox.ErrNotFound) {
			continue // published since the list was read
		}
		if err != nil {
			return nil, err
		}
		msgs = append(msgs, m)
	}
	return msgs, nil
}

func quoteName(name string) string {
	for i := range len(name) {
		if name[i] == '.' {
			return pgx.Identifier{name[:i], name[i+1:]}.Sanitize()
		}
	}
	return pgx.Identifier{name}.Sanitize()
}

// migrate brings the outbox table, and the inbox table if asked, up to
// this release.
func migrate(ctx context.Context, pool *pgxpool.Pool, cfg Config) error {
	m, err := outboxpg.NewMigrator(pool, cfg.Options)
	if err != nil {
		return err
	}
	if _, err := m.Up(ctx); err != nil {
		return fmt.Errorf("migrate the outbox table: %w", err)
	}
	if cfg.Inbox != nil {
		in, err := outboxpg.NewInboxTable(pool, *cfg.Inbox)
		if err != nil {
			return err
		}
		if err := in.Migrate(ctx); err != nil {
			return fmt.Errorf("migrate the inbox table: %w", err)
		}
	}
	return nil
}

// server is one PostgreSQL server of the process: a small pool on the
// URL's own database, for making and dropping the tests' databases, and
// the templates made so far.
type server struct {
	admin     *pgxpool.Pool
	base      *pgxpool.Config
	mu        sync.Mutex
	templates map[string]*templateOnce
}

type templateOnce struct {
	once sync.Once
	err  error
}

var servers struct {
	sync.Mutex
	byURL map[string]*server
}

func serverFor(ctx context.Context, url string, cfg *pgxpool.Config) (*server, error) {
	servers.Lock()
	defer servers.Unlock()
	if s := servers.byURL[url]; s != nil {
		return s, nil
	}
	adminCfg := cfg.Copy()
	adminCfg.MaxConns = 4
	admin, err := pgxpool.NewWithConfig(ctx, adminCfg)
	if err != nil {
		return nil, fmt.Errorf("connect to the server: %w", err)
	}
	if err := admin.Ping(ctx); err != nil {
		admin.Close()
		return nil, fmt.Errorf("connect to the server: %w", err)
	}
	s := &server{admin: admin, base: cfg, templates: map[string]*templateOnce{}}
	if servers.byURL == nil {
		servers.byURL = map[string]*server{}
	}
	servers.byURL[url] = s
	return s, nil
}

// template returns the name of a database holding the outbox's tables as
// cfg asks, making it if no process made it before. Its name is a hash of
// the migrations' SQL and the inbox's names, so every process and every run
// of one release shares it, and another release makes its own. It is kept
// (drop databases named outboxtest_tpl_* to reclaim the space).
func (s *server) template(ctx context.Context, cfg Config) (string, error) {
	m, err := outboxpg.NewMigrator(nil, cfg.Options)
	if err != nil {
		return "", err
	}
	sum := sha256.New()
	fmt.Fprintf(sum, "%s\x00%v", m.SQL(outboxpg.DirectionUp), cfg.Inbox != nil)
	if cfg.Inbox != nil {
		fmt.Fprintf(sum, "\x00%s\x00%s", cfg.Inbox.Schema, cfg.Inbox.Table)
	}
	name := "outboxtest_tpl_" + hex.EncodeToString(sum.Sum(nil)[:8])

	s.mu.Lock()
	once := s.templates[name]
	if once == nil {
		once = &templateOnce{}
		s.templates[name] = once
	}
	s.mu.Unlock()
	once.once.Do(func() { once.err = s.makeTemplate(ctx, name, cfg) })
	if once.err != nil {
		return "", once.err
	}
	return name, nil
}

// makeTemplate makes the template under a name of its own and renames it
// when it is complete, under an advisory lock so that concurrent test
// processes make it once: a process that dies half-way leaves no template
// that looks complete.
func (s *server) makeTemplate(ctx context.Context, name string, cfg Config) error {
	conn, err := s.admin.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("make template %s: %w", name, err)
	}
	defer conn.Release()
	lock := `SELECT pg_advisory_lock(hashtext($1))`
	if _, err := conn.Exec(ctx, lock, name); err != nil {
		return fmt.Errorf("make template %s: %w", name, err)
	}
	defer func() {
		if _, err := conn.Exec(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock(hashtext($1))`, name); err != nil {
			conn.Conn().Close(context.Background()) // ends the session and its lock
		}
	}()
	var exists bool
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_database WHERE datname = $1)`, name).Scan(&exists); err != nil {
		return fmt.Errorf("make template %s: %w", name, err)
	}
	if exists {
		return nil
	}
	building := name + "_" + randomHex(4)
	if _, err := conn.Exec(ctx, `CREATE DATABASE `+pgx.Identifier{building}.Sanitize()); err != nil {
		return fmt.Errorf("make template %s: %w", name, err)
	}
	built := false
	defer func() {
		if !built {
			_, _ = s.admin.Exec(context.WithoutCancel(ctx), `DROP DATABASE IF EXISTS `+pgx.Identifier{building}.Sanitize()+` WITH (FORCE)`)
		}
	}()
	poolCfg := s.base.Copy()
	poolCfg.ConnConfig.Database = building
	poolCfg.MaxConns = 2
	pool, err := pgxpool.NewWithConfig(ctx, poolCfg)
	if err != nil {
		return fmt.Errorf("make template %s: %w", name, err)
	}
	err = migrate(ctx, pool, cfg)
	pool.Close()
	if err != nil {
		return fmt.Errorf("make template %s: %w", name, err)
	}
	if err := s.execRetrying(ctx, `ALTER DATABASE `+pgx.Identifier{building}.Sanitize()+` RENAME TO `+pgx.Identifier{name}.Sanitize()); err != nil {
		return fmt.Errorf("make template %s: %w", name, err)
	}
	built = true
	return nil
}

// execRetrying runs a statement that needs a database nobody is connected
// to: a backend whose client just closed its connection may still be there
// for a moment (object_in_use), so it tries again until ctx ends.
func (s *server) execRetrying(ctx context.Context, stmt string) error {
	pause := 10 * time.Millisecond
	for {
		_, err := s.admin.Exec(ctx, stmt)
		var pgErr *pgconn.PgError
		if err == nil || !errors.As(err, &pgErr) || pgErr.Code != "55006" {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(pause):
		}
		pause = min(2*pause, 200*time.Millisecond)
	}
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
