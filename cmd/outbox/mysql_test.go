package main

import (
	"database/sql"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/go-outbox/outbox/internal/mysqltest"
	"github.com/go-outbox/outbox/outboxmysql"
)

// mysqlURL returns a mysql:// URL of a fresh database on the test server,
// and the database.
func mysqlURL(t *testing.T) (string, *sql.DB) {
	t.Helper()
	name, db := mysqltest.Database(t)
	base := mysqltest.URL(t)
	i := strings.LastIndex(base, "/")
	if i < len("mysql://") {
		t.Fatalf("TEST_MYSQL_URL has no database path")
	}
	rest := base[i+1:]
	query := ""
	if j := strings.IndexByte(rest, '?'); j >= 0 {
		query = rest[j:]
	}
	return base[:i+1] + name + query, db
}

func TestMySQLCLIMigrateSendStatusAndRelay(t *testing.T) {
	t.Parallel()
	raw, db := mysqlURL(t)
	with := func(args ...string) []string { return append(args, "--database-url", raw, "--table", "events") }

	if out := mustCLI(t, with("migrate", "up")...); !strings.Contains(out, "applied migration(s) 1") {
		t.Fatalf("migrate up printed %q, want the applied versions", out)
	}
	if out := mustCLI(t, with("migrate", "up")...); !strings.Contains(out, "nothing to do") {
		t.Fatalf("second migrate up printed %q, want nothing to do", out)
	}
	if out := mustCLI(t, with("migrate", "list")...); !strings.Contains(out, "create_outbox") || strings.Contains(out, " no") {
		t.Fatalf("migrate list printed %q, want every migration applied", out)
	}
	idText := strings.TrimSpace(mustCLI(t, with("send", "--topic", "orders.created", "--key", "o-1", "--payload", `{"id":1}`)...))
	id, err := uuid.Parse(idText)
	if err != nil {
		t.Fatalf("send printed %q, want a message id", idText)
	}
	if out := mustCLI(t, with("status")...); !strings.Contains(out, "pending         1") || !strings.Contains(out, "events") {
		t.Fatalf("status printed %q, want 1 pending in events", out)
	}

	// A relay process publishes it (to stdout, the default publisher),
	// leasing its claims by their columns, then one holding them in
	// transactions publishes the next.
	bin, err := buildCLI()
	if err != nil {
		t.Fatal(err)
	}
	store, err := outboxmysql.New(db, outboxmysql.Options{Table: "events"})
	if err != nil {
		t.Fatal(err)
	}
	for i, flags := range [][]string{nil, {"--transaction-leases"}} {
		if i > 0 {
			text := strings.TrimSpace(mustCLI(t, with("send", "--topic", "orders.created", "--key", "o-1", "--payload", `{"id":2}`)...))
			if id, err = uuid.Parse(text); err != nil {
				t.Fatalf("send printed %q, want a message id", text)
			}
		}
		relay := exec.Command(bin, with(append([]string{"relay", "--log-level", "warn"}, flags...)...)...)
		var out strings.Builder
		relay.Stdout = &out
		if err := relay.Start(); err != nil {
			t.Fatal(err)
		}
		waitUntil(t, 30*time.Second, "the relay to publish the message", func() bool {
			st, err := store.Stats(t.Context())
			return err == nil && st.Pending == 0
		})
		_ = relay.Process.Signal(syscall.SIGTERM)
		if err := relay.Wait(); err != nil {
			t.Fatalf("relay %v: %v", flags, err)
		}
		if !strings.Contains(out.String(), id.String()) {
			t.Fatalf("relay %v printed %q, want message %s", flags, out.String(), id)
		}
	}

	code, _, errOut := cli(t, with("relay", "--transaction-leases", "--order-by-key")...)
	if code != 2 || !strings.Contains(errOut, "--transaction-leases with --order-by-key") {
		t.Fatalf("relay --transaction-leases --order-by-key: exit %d, %q; want a usage error naming both flags", code, errOut)
	}
}

func TestMySQLURLSetsTheDriverParametersItDoesNotName(t *testing.T) {
	t.Parallel()
	cfg, err := mysqlConfig("mysql://app:s%40cret@db.example:3307/shop?parseTime=false&timeout=5s")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.User != "app" || cfg.Passwd != "s@cret" || cfg.Addr != "db.example:3307" || cfg.DBName != "shop" || cfg.Net != "tcp" {
		t.Fatalf("config %+v; want user app, password s@cret, tcp db.example:3307, database shop", cfg)
	}
	if cfg.ParseTime || !cfg.InterpolateParams || cfg.Timeout != 5*time.Second {
		t.Fatalf("parseTime %v, interpolateParams %v, timeout %v; want the URL's parseTime=false and timeout kept, interpolateParams=true added", cfg.ParseTime, cfg.InterpolateParams, cfg.Timeout)
	}
	if cfg, err := mysqlConfig("mysql://app@db.example/shop"); err != nil || cfg.Addr != "db.example:3306" || !cfg.ParseTime {
		t.Fatalf("mysqlConfig without a port: %+v, %v; want port 3306 and parseTime=true", cfg, err)
	}
	for _, bad := range []string{"mysql://app:pw@db.example", "mysql://app:pw@db.example/shop?nosuchparam=1x&timeout=forever"} {
		if _, err := mysqlConfig(bad); err == nil || strings.Contains(err.Error(), "pw") {
			t.Fatalf("mysqlConfig(%q): %v; want an error that does not show the password", bad, err)
		}
	}
}

func TestMigrateSQLOfAMySQLURLIsMySQLs(t *testing.T) {
	t.Parallel()
	out := mustCLI(t, "migrate", "sql", "--database-url", "mysql://u@h/db", "--table", "events")
	if !strings.Contains(out, "CREATE TABLE `events`") || !strings.Contains(out, "ENGINE = InnoDB") {
		t.Fatalf("migrate sql printed %q; want MySQL's CREATE TABLE `events`", out)
	}
}
