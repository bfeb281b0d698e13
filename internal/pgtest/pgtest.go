// Package pgtest gives tests a PostgreSQL connection pool and a throwaway
// schema in the database named by TEST_DATABASE_URL, so tests that need a
// server can run in parallel without seeing each other's tables.
//
// Without TEST_DATABASE_URL the tests are skipped, except when CI is "true":
// there a missing server fails the test, so a broken CI set-up cannot pass by
// skipping everything.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// EnvURL names the environment variable holding the test database's URL.
const EnvURL = "TEST_DATABASE_URL"

// sharedMaxConns bounds the shared pool: many parallel tests share it, and
// several test binaries may run at once against one server.
const sharedMaxConns = 24

var shared struct {
	sync.Mutex
	pool *pgxpool.Pool
}

// URL returns TEST_DATABASE_URL, or skips the test (fails it when CI=true) if
// it is unset.
func URL(t testing.TB) string {
	t.Helper()
	url := os.Getenv(EnvURL)
	if url == "" {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s is not set; CI must provide a PostgreSQL server for this test", EnvURL)
		}
		t.Skipf("%s is not set; set it to a PostgreSQL URL, e.g. postgres://postgres@127.0.0.1:5432/outbox_test?sslmode=disable, to run this test", EnvURL)
	}
	return url
}

// Config returns a fresh pool configuration for TEST_DATABASE_URL, for tests
// that need their own pool (with a tracer, say). Close such pools in
// t.Cleanup.
func Config(t testing.TB) *pgxpool.Config {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(URL(t))
	if err != nil {
		// The error of ParseConfig may quote the URL; do not print it.
		t.Fatalf("pgtest: %s cannot be parsed as a PostgreSQL URL", EnvURL)
	}
	return cfg
}

// Pool returns a pool shared by all tests of the process. Do not close it.
func Pool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	cfg := Config(t)
	shared.Lock()
	defer shared.Unlock()
	if shared.pool != nil {
		return shared.pool
	}
	cfg.MaxConns = sharedMaxConns
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatalf("pgtest: create pool: %v", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		t.Fatalf("pgtest: connect to the database of %s: %v", EnvURL, err)
	}
	shared.pool = pool
	return pool
}

// Schema creates a schema with a fresh random name, drops it with everything
// in it when the test ends, and returns its name (a valid identifier, never
// quoted).
func Schema(t testing.TB) string {
	t.Helper()
	pool := Pool(t)
	name := randomName()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := pool.Exec(ctx, `CREATE SCHEMA "`+name+`"`); err != nil {
		t.Fatalf("pgtest: create schema %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := pool.Exec(ctx, `DROP SCHEMA "`+name+`" CASCADE`); err != nil {
			t.Errorf("pgtest: drop schema %s: %v", name, err)
		}
	})
	return name
}

// Database creates a database with a fresh random name on the server of
// TEST_DATABASE_URL, drops it when the test ends, and returns a pool on it
// (closed before the drop). Tests that run VACUUM and need it to remove what
// they deleted use one: VACUUM keeps every row version that a transaction
// open in the same database might still see, and the shared database has
// other tests' transactions open.
func Database(t testing.TB) *pgxpool.Pool {
	t.Helper()
	admin := Pool(t)
	name := randomName()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := admin.Exec(ctx, `CREATE DATABASE "`+name+`"`); err != nil {
		t.Fatalf("pgtest: create database %s: %v", name, err)
	}
	cfg := Config(t)
	cfg.ConnConfig.Database = name
	// Room for 8 claims kept open in transactions (outboxpg keeps them on
	// at most half of a pool's connections).
	cfg.MaxConns = 16
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatalf("pgtest: pool on database %s: %v", name, err)
	}
	t.Cleanup(func() {
		pool.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := admin.Exec(ctx, `DROP DATABASE "`+name+`" WITH (FORCE)`); err != nil {
			t.Errorf("pgtest: drop database %s: %v", name, err)
		}
	})
	return pool
}

// randomName is a fresh name for a throwaway schema or database: a valid
// identifier that no other test draws.
func randomName() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return "test_" + hex.EncodeToString(b[:])
}
