// Package redistest gives tests the Redis server named by TEST_REDIS_URL, a
// client for it and stream names no other test uses, so tests that need a
// server can run in parallel on one server.
//
// TEST_REDIS_URL has the form redis://[user:password@]host[:port][/db]
// (scripts/redis-up and scripts/test set it). Without it the tests are
// skipped, except when CI is "true": there a missing server fails the test,
// so a broken CI set-up cannot pass by skipping everything.
package redistest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// EnvURL names the environment variable holding the test server's URL.
const EnvURL = "TEST_REDIS_URL"

// URL returns TEST_REDIS_URL, or skips the test (fails it when CI=true) if
// it is unset.
func URL(t testing.TB) string {
	t.Helper()
	u := os.Getenv(EnvURL)
	if u == "" {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s is not set; CI must provide a Redis server for this test (scripts/test starts one)", EnvURL)
		}
		t.Skipf("%s is not set; set it to a Redis URL, e.g. redis://127.0.0.1:6379/0 (eval \"$(scripts/redis-up)\" starts a server), to run this test", EnvURL)
	}
	return u
}

// Client returns a client for TEST_REDIS_URL that has answered a PING, closed
// when the test ends. It skips or fails the test as URL does.
func Client(t testing.TB) *redis.Client {
	t.Helper()
	opts, err := redis.ParseURL(URL(t))
	if err != nil {
		// The error may quote the URL, password and all.
		t.Fatalf("redistest: %s is not a redis:// URL", EnvURL)
	}
	c := redis.NewClient(opts)
	t.Cleanup(func() { _ = c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("redistest: the server at %s does not answer PING: %v", EnvURL, err)
	}
	return c
}

// Stream returns a stream key no other test uses, starting with prefix, and
// deletes it when the test ends.
func Stream(t testing.TB, c redis.UniversalClient, prefix string) string {
	t.Helper()
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	name := prefix + strings.ToLower(t.Name()[:min(len(t.Name()), 40)]) + "." + hex.EncodeToString(b)
	name = strings.NewReplacer("/", ".", " ", "_").Replace(name)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = c.Del(ctx, name).Err()
	})
	return name
}

// ClosedURL returns a redis:// URL of a local port where nothing listens.
func ClosedURL(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return "redis://" + addr + "/0"
}
