package mysqltest

import (
	"strings"
	"testing"
	"time"
)

func TestParseURLMakesADriverConfigWithTheTestDefaults(t *testing.T) {
	t.Parallel()
	cfg, err := ParseURL("mysql://app:s%40cret@db.example:3307/outbox_test?timeout=5s")
	if err != nil {
		t.Fatal(err)
	}
	switch {
	case cfg.User != "app" || cfg.Passwd != "s@cret":
		t.Fatalf("user %q, password %q; want app, s@cret", cfg.User, cfg.Passwd)
	case cfg.Net != "tcp" || cfg.Addr != "db.example:3307" || cfg.DBName != "outbox_test":
		t.Fatalf("net %q, addr %q, database %q; want tcp, db.example:3307, outbox_test", cfg.Net, cfg.Addr, cfg.DBName)
	case !cfg.ParseTime || !cfg.InterpolateParams || cfg.Loc != time.UTC || cfg.Timeout != 5*time.Second:
		t.Fatalf("parseTime %v, interpolateParams %v, loc %v, timeout %v; want true, true, UTC, 5s", cfg.ParseTime, cfg.InterpolateParams, cfg.Loc, cfg.Timeout)
	}
	cfg, err = ParseURL("mysql://root@127.0.0.1/x?parseTime=false")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Addr != "127.0.0.1:3306" || cfg.ParseTime || cfg.User != "root" || cfg.Passwd != "" {
		t.Fatalf("addr %q, parseTime %v, user %q; want the default port, the URL's parseTime=false and root without a password", cfg.Addr, cfg.ParseTime, cfg.User)
	}
}

func TestParseURLRefusesOtherSchemesWithoutQuotingTheURL(t *testing.T) {
	t.Parallel()
	for _, raw := range []string{"postgres://u:hunter2@h/db", "root:hunter2@tcp(h)/db", "mysql:///db"} {
		_, err := ParseURL(raw)
		if err == nil {
			t.Fatalf("ParseURL(%q): no error", raw)
		}
		if strings.Contains(err.Error(), "hunter2") {
			t.Fatalf("ParseURL(%q) = %v: the error quotes the password", raw, err)
		}
	}
}

func TestDatabaseIsFreshAndDroppedAfterTheTest(t *testing.T) {
	t.Parallel()
	var name string
	t.Run("inner", func(t *testing.T) {
		var n int
		name, _ = Database(t)
		db := DB(t)
		if err := db.QueryRowContext(t.Context(), `SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = DATABASE()`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != 0 {
			t.Fatalf("a fresh database holds %d tables; want none", n)
		}
	})
	if name == "" {
		return // skipped: no server
	}
	var n int
	if err := adminDB(t).QueryRowContext(t.Context(), `SELECT COUNT(*) FROM information_schema.schemata WHERE schema_name = ?`, name).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("database %s still exists after its test", name)
	}
}
