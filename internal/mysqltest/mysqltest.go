// Package mysqltest gives tests a throwaway MySQL or MariaDB database on the
// server named by TEST_MYSQL_URL, one per test, so tests that need a server
// can run in parallel without seeing each other's tables.
//
// TEST_MYSQL_URL has the form mysql://user[:password]@host[:port]/database
// (scripts/mysql-up and scripts/test set it). Without it the tests are
// skipped, except when CI is "true": there a missing server fails the test,
// so a broken CI set-up cannot pass by skipping everything.
package mysqltest

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
)

// EnvURL names the environment variable holding the test server's URL.
const EnvURL = "TEST_MYSQL_URL"

// maxConns bounds each test database's pool: many tests run in parallel,
// and several test binaries may run at once against one server.
const maxConns = 12

var admin struct {
	sync.Mutex
	db *sql.DB
}

// URL returns TEST_MYSQL_URL, or skips the test (fails it when CI=true) if
// it is unset.
func URL(t testing.TB) string {
	t.Helper()
	u := os.Getenv(EnvURL)
	if u == "" {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s is not set; CI must provide a MySQL or MariaDB server for this test (scripts/test starts one)", EnvURL)
		}
		t.Skipf("%s is not set; set it to a MySQL URL, e.g. mysql://root@127.0.0.1:3306/outbox_test (eval \"$(scripts/mysql-up)\" starts a server), to run this test", EnvURL)
	}
	return u
}

// ParseURL turns a mysql://user[:password]@host[:port]/database?param=value
// URL into a go-sql-driver/mysql configuration. Query parameters are the
// driver's DSN parameters. It sets what the tests rely on unless the URL
// says otherwise: parseTime=true, loc=UTC and interpolateParams=true.
func ParseURL(raw string) (*mysql.Config, error) {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != "mysql" || u.Host == "" {
		// The error of url.Parse may quote the URL, password and all.
		return nil, fmt.Errorf("mysqltest: want a URL of the form mysql://user[:password]@host[:port]/database")
	}
	host := u.Host
	if u.Port() == "" {
		host += ":3306"
	}
	q := u.Query()
	for k, v := range map[string]string{"parseTime": "true", "loc": "UTC", "interpolateParams": "true"} {
		if !q.Has(k) {
			q.Set(k, v)
		}
	}
	dsn := "tcp(" + host + ")/" + u.Path[min(1, len(u.Path)):] + "?" + q.Encode()
	if u.User != nil {
		pass, _ := u.User.Password()
		dsn = u.User.Username() + ":" + pass + "@" + dsn
	}
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return nil, fmt.Errorf("mysqltest: the URL's parameters: %w", err)
	}
	return cfg, nil
}

// Config returns the configuration of TEST_MYSQL_URL.
func Config(t testing.TB) *mysql.Config {
	t.Helper()
	cfg, err := ParseURL(URL(t))
	if err != nil {
		t.Fatalf("%s: %v", EnvURL, err)
	}
	return cfg
}

// adminDB is a pool on the server shared by all tests of the process, for
// creating and dropping their databases. Do not close it.
func adminDB(t testing.TB) *sql.DB {
	t.Helper()
	cfg := Config(t)
	admin.Lock()
	defer admin.Unlock()
	if admin.db != nil {
		return admin.db
	}
	db, err := open(cfg)
	if err != nil {
		t.Fatalf("mysqltest: connect to the server of %s: %v", EnvURL, err)
	}
	db.SetMaxOpenConns(4)
	admin.db = db
	return db
}

func open(cfg *mysql.Config) (*sql.DB, error) {
	conn, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, err
	}
	db := sql.OpenDB(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := db.PingContext(ctx); err != nil {
		_ = db.Close()
		return nil, err
	}
	return db, nil
}

// Database creates a database with a fresh random name on the server of
// TEST_MYSQL_URL, drops it when the test ends, and returns its name and a
// pool on it (closed before the drop).
func Database(t testing.TB) (string, *sql.DB) {
	t.Helper()
	a := adminDB(t)
	name := randomName()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := a.ExecContext(ctx, "CREATE DATABASE `"+name+"` CHARACTER SET utf8mb4"); err != nil {
		t.Fatalf("mysqltest: create database %s: %v", name, err)
	}
	cfg := Config(t)
	cfg.DBName = name
	db, err := open(cfg)
	if err != nil {
		t.Fatalf("mysqltest: pool on database %s: %v", name, err)
	}
	db.SetMaxOpenConns(maxConns)
	db.SetMaxIdleConns(maxConns)
	t.Cleanup(func() {
		_ = db.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := a.ExecContext(ctx, "DROP DATABASE `"+name+"`"); err != nil {
			t.Errorf("mysqltest: drop database %s: %v", name, err)
		}
	})
	return name, db
}

// DB is Database without the name.
func DB(t testing.TB) *sql.DB {
	t.Helper()
	_, db := Database(t)
	return db
}

// randomName is a fresh name for a throwaway database: a valid identifier
// that no other test draws.
func randomName() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return "test_" + hex.EncodeToString(b[:])
}
