package main

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/outboxpg"
)

// backend is one open outbox table, whatever the database.
type backend struct {
	store    outbox.Store
	admin    outbox.Admin
	migrator migrator
	// send writes messages in one committed transaction and wakes relays.
	send  func(ctx context.Context, msgs ...*outbox.Message) error
	close func()
}

// migrator is what `outbox migrate` needs from a store's migrations.
type migrator interface {
	Up(ctx context.Context) ([]int, error)
	Down(ctx context.Context, steps int) ([]int, error)
	List(ctx context.Context) ([]migrationStatus, error)
}

type migrationStatus struct {
	Version   int
	Name      string
	Applied   bool
	AppliedAt time.Time
}

// resolveURL returns the URL from the flag or DATABASE_URL.
func (g *globalFlags) resolveURL() (string, error) {
	u := g.databaseURL
	if u == "" {
		u = os.Getenv("DATABASE_URL")
	}
	if u == "" {
		return "", usagef("no database: pass --database-url or set DATABASE_URL (e.g. postgres://user@localhost:5432/app)")
	}
	rememberSecret(u)
	return u, nil
}

// open connects to the database and opens the outbox table. notify makes
// writes wake relays in other processes (used by `send`).
func (g *globalFlags) open(ctx context.Context, notify bool) (*backend, error) {
	raw, err := g.resolveURL()
	if err != nil {
		return nil, err
	}
	scheme, _, _ := strings.Cut(raw, "://")
	switch strings.ToLower(scheme) {
	case "postgres", "postgresql":
		return g.openPostgres(ctx, raw, notify)
	case "sqlite", sqliteOpaque(raw): // sqlite:///abs/app.db, sqlite:relative/app.db
		return g.openSQLite(ctx, raw)
	default:
		return nil, usagef("database URL scheme %q is not supported; use postgres://user:password@host:5432/db", scheme)
	}
}

func (g *globalFlags) openPostgres(ctx context.Context, raw string, notify bool) (*backend, error) {
	cfg, err := pgxpool.ParseConfig(raw)
	if err != nil {
		return nil, fmt.Errorf("parse database URL: %w", err)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connect to PostgreSQL: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("connect to PostgreSQL at %s: %w", cfg.ConnConfig.Host, err)
	}
	opts := outboxpg.Options{Schema: g.schema, Table: g.table, Notify: notify}
	store, err := outboxpg.New(pool, opts)
	if err != nil {
		pool.Close()
		return nil, err
	}
	w, err := outbox.NewWriter(store, outbox.WriterConfig{})
	if err != nil {
		pool.Close()
		return nil, err
	}
	m, err := outboxpg.NewMigrator(pool, opts)
	if err != nil {
		pool.Close()
		return nil, err
	}
	return &backend{
		store:    store,
		admin:    store,
		migrator: pgMigrator{m},
		send: func(ctx context.Context, msgs ...*outbox.Message) error {
			return w.Transact(ctx, func(tx pgx.Tx) error { return w.Write(ctx, tx, msgs...) })
		},
		close: pool.Close,
	}, nil
}

// Secrets seen in URLs, removed from every error message.
var secrets []string

func rememberSecret(raw string) {
	u, err := url.Parse(raw)
	if err == nil && u.User != nil {
		if p, ok := u.User.Password(); ok && p != "" {
			secrets = append(secrets, p, url.QueryEscape(p), url.PathEscape(p))
		}
	}
	if err == nil {
		if p := u.Query().Get("password"); p != "" {
			secrets = append(secrets, p)
		}
	}
	// URLs that do not parse still have a recognisable user:password@.
	for _, m := range urlPassword.FindAllStringSubmatch(raw, -1) {
		secrets = append(secrets, m[2])
	}
	// Key-value connection strings: password=...
	for _, m := range kvPassword.FindAllStringSubmatch(raw, -1) {
		secrets = append(secrets, m[1])
	}
}

var (
	kvPassword  = regexp.MustCompile(`password=([^\s&]+)`)
	urlPassword = regexp.MustCompile(`(://[^:/@\s]*:)([^@\s]+)@`)
)

// redact removes passwords from s.
func redact(s string) string {
	for _, p := range secrets {
		if len(p) >= 1 {
			s = strings.ReplaceAll(s, p, "xxxxx")
		}
	}
	return urlPassword.ReplaceAllString(s, "${1}xxxxx@")
}
